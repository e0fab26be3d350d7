// nns/core/bootstrap.hpp: rank/size from the launcher's environment, a TCP rendezvous through rank 0 that
// all-gathers small blobs, and point-to-point messages between any two ranks (plugin connection handles, made on
// demand). Every wait has a deadline.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nns::core {

// Every failure of the bootstrap, with the ncclResult_t it stands for, so that the C API returns the code
// docs/collectives.md promises for a failure during creation instead of ncclSystemError for all of them.
class BootstrapError : public std::runtime_error {
 public:
  // The values of nccl_net/err.h's ncclResult_t, spelled out because nns_bootstrap builds without net-api's headers
  // (they are NCCL's ABI and never change): a caller returns static_cast<ncclResult_t>(error.result()).
  enum Result : int {
    kSystemError = 2,   // ncclSystemError: a set-up failure on this rank (cannot listen on the root port, no socket)
    kInvalidUsage = 5,  // ncclInvalidUsage: a setting this rank cannot run with (a malformed or unknown root
                        // address, a foreign service on it) or that differs between the ranks (size, a rank twice)
    kRemoteError = 6,   // ncclRemoteError: rank 0 not reached, a rank that did not arrive, a peer that failed
  };
  BootstrapError(const std::string& what, Result result) : std::runtime_error(what), result_(result) {}
  Result result() const { return result_; }

 private:
  Result result_;
};

// The most ranks a communicator takes (2^24, as the launchers' variables are read).
inline constexpr int kMaxRanks = 1 << 24;

struct LaunchInfo {
  int rank = -1;
  int size = -1;
  std::string rootHost;  // where rank 0 listens
  int rootPort = 0;
  std::string source;  // which launcher's variables were used
  int localRank = -1;  // rank among this machine's, from the same launcher; -1 where it does not say
  // The launcher's name for this job (Open MPI's job id, Slurm's job and step, torchrun's run id), or empty: rank 0
  // turns away ranks of another job that reach its port. $NNS_JOB_ID, where set, is used instead.
  std::string job = {};
  // The unique id's random value (nnsGetUniqueId when it picked the port), 0 where there is none: ranks made from
  // another id are of another job, even where a later id got the same port (a stale id of an ended job).
  uint64_t idNonce = 0;
  // Where rootPort is not the launcher's port as given, why (torchrun's agent holds MASTER_PORT): said on failure.
  std::string rootPortNote = {};
};

// Rank and size come from one launcher, both variables of the same one, the innermost where several are present:
// NNS_RANK/NNS_WORLD_SIZE, then torchrun's RANK/WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE
// (MPICH, Intel MPI), and last Slurm's SLURM_PROCID/SLURM_NTASKS, which every process of a step inherits, torchrun
// or a Hydra proxy started by srun included; RANK/WORLD_SIZE without TORCHELASTIC_RUN_ID give way to Open MPI's and
// PMI's (a stale export under mpirun), and to Slurm's where their world is smaller than the step's (a stale export
// under srun); NNS_RANK/NNS_WORLD_SIZE set by hand always win, with a warning where their world is smaller than a
// launcher's around them. Slurm's count only inside an srun step: in a Slurm job (SLURM_JOB_ID) without a step's
// SLURM_STEP_ID (a batch script, salloc's shell) they are the allocation's, inherited by everything the script starts.
// The root from NNS_ROOT_ADDR (host:port) or MASTER_ADDR/MASTER_PORT (either set but empty
// is unset), under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True, the agent listening on MASTER_PORT)
// MASTER_PORT+1.
// Returns false with `error` set when something is missing or inconsistent.
bool launchInfoFromEnvironment(LaunchInfo* info, std::string* error);
// Whether any launcher's rank or size variable (those above), or a root address (NNS_ROOT_ADDR, MASTER_ADDR), is set:
// a tool started by hand, with none, may run as a job of one rank, as nccl-tests does without mpirun; where some are
// set, launchInfoFromEnvironment's word stands.
bool launcherVariablesSet();

// Hands a socket already listening on a root port to the rank 0 of this process that will listen there
// (nnsGetUniqueId binds the port it picks and keeps it, so no other program takes it in between, as NCCL's root
// thread holds its port from ncclGetUniqueId on). The first Bootstrap of rank 0 on that port takes it.
void keepRootListener(int fd);
// Closes the kept listener on `port`, if one is still kept: a rank 0 that will not listen there after all (a one-rank
// job, which meets no one, or a communicator that failed before its bootstrap). Kept, it stayed open for the life of
// the process, and a rank that reached the port was accepted by the kernel and never answered.
void releaseRootListener(int port);

// Whether an interface by this name is a bridge or virtual link that only this host's containers and VMs reach
// (docker0, br-<id>, virbr0, veth*, cni0, flannel.1, cali*, ...): an address on it is no address for another host.
bool hostOnlyInterface(const char* name);

// The address of this host that other hosts most likely reach, for a rank to announce (port 0): with
// NCCL_SOCKET_IFNAME, the first interface up and running that it selects, loopback only when nothing else is;
// without it, the first up and running and neither loopback nor hostOnlyInterface, else the first such bridge or
// veth. IPv4 before IPv6 (`family` AF_INET or AF_INET6 takes only that one; AF_UNSPEC either), never a link-local
// address (169.254/16, fe80::/10: a BMC's usb0). False when there is none: the caller's loopback stands.
// `interfaceName` (may be null) gets the interface's name.
bool hostAddress(int family, sockaddr_storage* out, socklen_t* length, std::string* interfaceName);

// Splits a root address into host and port: host:port, a name or IPv4 address as the host, an IPv6 address in
// brackets ([fd78::1]:29500), the port in decimal digits, 1..65535. Anything else returns false with `error` saying
// what is wrong (the caller names where `text` came from): a lenient split turned `[::1:29816` into [::]:29816 and
// sent an empty host or a bad port on to fail later as something else.
bool parseRootAddress(const std::string& text, std::string* host, int* port, std::string* error);

class Bootstrap {
 public:
  // Rendezvous of `info.size` ranks through rank 0; throws BootstrapError (naming the missing ranks) when not
  // every rank arrives within `timeout`. Rank 0 answers each joiner: a rank whose size disagrees, or a second rank
  // with the same number, fails at once with the reason; one of another job retries until its own rank 0 listens.
  // When rank 0 gives up, the ranks that had joined fail with its reason rather than a reset connection.
  Bootstrap(const LaunchInfo& info, std::chrono::milliseconds timeout);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks on this machine (the same boot id), this one included.
  int localRanks() const { return localRanks_; }

  // The largest message the bootstrap moves: an all-gather's result (every rank's contribution, with a 4-byte length
  // each) must fit. Larger is refused by the sender, naming the size, and by the receiver as garbage.
  static constexpr size_t kMaxMessageBytes = size_t{64} << 20;

  // Every rank contributes `mine` (same length on every rank); returns all contributions in rank order. A rank that
  // died or stalled throws BootstrapError (kRemoteError) on every rank.
  std::vector<std::string> allGather(const std::string& mine);
  void barrier() { allGather(std::string()); }

  // For a wait outside the bootstrap between two all-gathers that every rank must reach (a communicator making its
  // connections): returns at once, and throws BootstrapError (kRemoteError) when the next all-gather is bound to
  // fail, so the wait need not run out its own timeout. Rank 0 fails when a rank closed its connection (died) and
  // tells the others; a rank fails when rank 0 did so, or closed its connection. Not for use while a rank may leave
  // for good (after the last all-gather), nor beside another thread's all-gather.
  void checkPeers();

  // Gives up on the job for `why` (a point-to-point failure while every rank makes its connections): rank 0 tells
  // every rank, which then fails with its reason at its next all-gather or checkPeers; every rank throws
  // BootstrapError(`result`). Same restrictions as checkPeers.
  [[noreturn]] void abandon(const std::string& why, BootstrapError::Result result);

  // Point to point, for what one rank has for one other only (a plugin connection handle, made when the connection
  // is: the all-gather would move every rank's handles to every rank, size x size of them). Each rank listens on a
  // port of its own, announced at the rendezvous; a rank's messages to a peer travel on one connection, opened at its
  // first send and kept. `tag` tells one peer's messages apart; those with the same tag arrive in the order sent.
  // Safe beside another thread's all-gather (the point-to-point state has a lock of its own).
  static constexpr size_t kMaxPointToPointBytes = size_t{64} << 10;
  // Throws BootstrapError: kInvalidUsage for a peer out of range, this rank, or more than kMaxPointToPointBytes;
  // kRemoteError when `peer` cannot be reached or stops reading within the timeout (it died or failed).
  void send(int peer, uint32_t tag, const std::string& data);
  // Without waiting: true, with `data`, once `peer`'s message with `tag` has come (it is then taken). Throws
  // BootstrapError (kRemoteError) when `peer` closed its connection to this rank, or broke this bootstrap's rules on
  // it, with no such message left: it died or failed, and the message will not come.
  bool tryRecv(int peer, uint32_t tag, std::string* data);
  // Whether `peer` is still there, for a wait on it after the last all-gather, where checkPeers may not be used (a
  // rank may have left for good): throws BootstrapError (kRemoteError) when its end of this rank's point-to-point
  // connection to it was closed or broken, or, where this rank has none yet, its listener refuses one (it died, failed
  // or destroyed its communicator). Sends nothing on the connection (nothing piles up in the peer's inbox), and a live
  // peer, however late, is never failed: its kernel answers for it. Returns false where it cannot tell: the connection
  // to open was not made within `connectWithin` (a host that does not answer), which bounds how long this blocks.
  bool probe(int peer, std::chrono::milliseconds connectWithin);
  // Where this rank listens for the other ranks' point-to-point connections ("192.0.2.1:40123"), "" in a job of one.
  std::string pointToPointAddress() const;

 private:
  void rendezvous(const LaunchInfo& info);
  void reserveRoom() const;  // raises the descriptor limit to what this rank's bootstrap connections may take
  // Opens this rank's point-to-point listener (after the join) and returns what the rendezvous announces of it.
  std::string listenPointToPoint(bool rootNamed);
  // Rank 0 giving up: every member but `failed` (0: none) is told why, then this rank throws it.
  [[noreturn]] void giveUp(int failed, const std::string& why, BootstrapError::Result result);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  int localRanks_ = 1;
  std::chrono::microseconds spin_{0};  // how long a wait polls before it sleeps
  int rootSocket_ = -1;                // non-root: connection to the root
  std::vector<int> memberSockets_;     // root: connection to each rank (index = rank, own slot -1)
  struct PointToPoint;                 // bootstrap.cc: the listener, the peers' addresses and connections, the inbox
  std::unique_ptr<PointToPoint> p2p_;
  uint64_t job_ = 0;  // the job id the rendezvous checked: a point-to-point connection of another job is turned away
};

}  // namespace nns::core
