// descriptors.cc: counting this process's open descriptors and raising its soft limit (descriptors.hpp).
#include "nns/core/descriptors.hpp"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace nns::core {
namespace {

// Descriptors open now, the one that reads /proc/self/fd not counted; -1 where it cannot be read. Out of
// descriptors, the directory cannot be opened: then every one is open, `soft` of them.
long openDescriptors(rlim_t soft) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return errno == EMFILE && soft != RLIM_INFINITY ? static_cast<long>(soft) : -1;
  long count = 0;
  while (const dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count - 1;
}

std::string limitText(rlim_t limit) {
  return limit == RLIM_INFINITY ? "unlimited" : std::to_string(limit);
}

}  // namespace

DescriptorRoom reserveDescriptors(size_t more) {
  static std::mutex mutex;  // two communicators of one process raising at once read and write one limit
  const std::lock_guard<std::mutex> lock(mutex);
  DescriptorRoom room;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return room;  // nothing known: `enough` stays true, nothing is said
  room.open = openDescriptors(limit.rlim_cur);
  room.before = room.soft = limit.rlim_cur;
  room.hard = limit.rlim_max;
  const rlim_t need = static_cast<rlim_t>(std::max(0L, room.open)) + static_cast<rlim_t>(more);
  if (need <= limit.rlim_cur) return room;
  const char* raise = std::getenv("NNS_RAISE_FD_LIMIT");
  room.mayRaise = raise == nullptr || std::strcmp(raise, "0") != 0;
  if (room.mayRaise) {
    rlimit wanted = limit;
    const rlim_t doubled = limit.rlim_cur > RLIM_INFINITY / 2 ? RLIM_INFINITY : 2 * limit.rlim_cur;
    wanted.rlim_cur = std::min(limit.rlim_max, std::max(need, doubled));
    bool set = setrlimit(RLIMIT_NOFILE, &wanted) == 0;
    // The kernel refuses a soft limit above fs.nr_open even under an unlimited hard one: then just what is needed.
    if (!set && wanted.rlim_cur > need) {
      wanted.rlim_cur = std::min(limit.rlim_max, need);
      set = setrlimit(RLIMIT_NOFILE, &wanted) == 0;
    }
    if (set) room.soft = wanted.rlim_cur;
  }
  room.enough = need <= room.soft;
  return room;
}

std::string descriptorUse() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return "the descriptor limit is unknown";
  const long open = openDescriptors(limit.rlim_cur);
  return (open >= 0 ? std::to_string(open) : std::string("an unknown number")) + " of " + limitText(limit.rlim_cur) +
         " descriptors open (ulimit -n " + limitText(limit.rlim_cur) + ", hard limit " + limitText(limit.rlim_max) +
         ")";
}

bool nearDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return false;
  const long open = openDescriptors(limit.rlim_cur);
  return open >= 0 && static_cast<rlim_t>(open) + 16 >= limit.rlim_cur;
}

}  // namespace nns::core
