// nns/core/descriptors.hpp: room for the file descriptors a job's connections take. Rank 0 of the bootstrap holds a
// connection to every rank, and each plugin connection takes one or more sockets, so a job of about a thousand ranks
// passes the usual soft limit of 1024 (`ulimit -n`) while the hard limit is often far higher. Like the JVM and Go,
// the engine raises the soft limit when it needs to, never past the hard one. Unlike Go, it does not put the old one
// back for programs the process starts: they inherit the raised limit. A select() in the host program is no worse
// off: a descriptor past FD_SETSIZE (1024) exists only where the old limit would have failed the job.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <string>

namespace nns::core {

struct DescriptorRoom {
  long open = -1;        // descriptors this process had open when asked; -1 where /proc/self/fd cannot be read
  rlim_t before = 0;     // the soft limit before the call
  rlim_t soft = 0;       // the soft limit after it
  rlim_t hard = 0;       // the hard limit (`ulimit -Hn`)
  bool enough = true;    // whether `open` plus the descriptors asked for fit under `soft`
  bool mayRaise = true;  // false where NNS_RAISE_FD_LIMIT=0 keeps the limit as it is
  bool raised() const { return soft > before; }
};

// Makes room for `more` descriptors beyond those open now: where they do not fit under the soft limit, raises it to
// at least what they need and at least twice what it was (so a job growing a connection at a time does not raise it
// at every one), capped at the hard limit. NNS_RAISE_FD_LIMIT=0 leaves the limit as it is (the result then says
// whether there is room). Room, not a reservation: callers at once in one process each count the same descriptors as
// free (the doubling covers a few). Serialized; the limit is the process's.
DescriptorRoom reserveDescriptors(size_t more);

// This process's use of descriptors, as text for an error: "1021 of 1024 descriptors open (ulimit -n 1024, hard
// limit 4096)".
std::string descriptorUse();

// Whether this process is near its descriptor limit (within 16 of it): a failure then names descriptorUse().
bool nearDescriptorLimit();

}  // namespace nns::core
