// bootstrap.cc: launcher environment parsing, the rank-0 TCP rendezvous (length-prefixed messages, deadlines) and
// point-to-point messages between ranks.
#include "nns/core/bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nccl_net/sdk/socket.hpp>

#include "nns/core/descriptors.hpp"
#include "nns/core/nccl_conf.hpp"

namespace nns::core {

namespace {

using Clock = std::chrono::steady_clock;

// How long a wait polls before it sleeps, where the ranks of this machine do not outnumber its CPUs.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

// How long a joining rank tries one of the root's addresses when it has several (see rendezvous).
constexpr std::chrono::milliseconds kAttemptPerAddress{1000};
// How much longer than rank 0 the other ranks wait in an all-gather (see allGather).
constexpr auto kRootGrace = std::chrono::milliseconds(1000);

// The missing ranks a timeout names; the rest are counted.
constexpr int kRanksNamed = 32;

// A rank or size in decimal digits, 0..kMaxRanks: strtol would take " 1" or "+1" as 1 (a value a launcher never
// writes, so a hand-made typo), and strtol's clamping on overflow is beside the point.
bool parseInt(const char* text, int* out) {
  if (text == nullptr || *text == '\0') return false;
  long value = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return false;
    value = std::min(value * 10 + (*c - '0'), static_cast<long>(kMaxRanks) + 1);  // capped: no overflow
  }
  if (value > kMaxRanks) return false;
  *out = static_cast<int>(value);
  return true;
}

using Result = BootstrapError::Result;

constexpr char kPrefix[] = "bootstrap: ";

// A failure's text without the prefix, for quoting it inside another one.
std::string withoutPrefix(const std::string& what) {
  return what.rfind(kPrefix, 0) == 0 ? what.substr(sizeof(kPrefix) - 1) : what;
}

// Each failure says which kind it is (BootstrapError::Result): the C API's code depends on it, so no default.
[[noreturn]] void fail(const std::string& what, Result result) {
  throw BootstrapError(kPrefix + what, result);
}

// Clamped to INT_MAX: NNS_COMM_TIMEOUT_MS=2147483647 plus a rank's grace second overflowed to a negative poll
// timeout, which waits for ever.
int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(std::min<decltype(left)>(left, INT_MAX)) : 0;
}

// connect() that gives up at `deadline` (a root whose accept queue is full drops the SYN, and a blocking connect
// would wait out the kernel's retries, about two minutes). Returns 0 or the errno.
int connectBefore(int fd, const sockaddr_storage& address, socklen_t length, Clock::time_point deadline) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  int err = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      do {
        ready = poll(&p, 1, remainingMs(deadline));
      } while (ready < 0 && errno == EINTR);
      socklen_t size = sizeof(err);
      if (ready == 0)
        err = ETIMEDOUT;
      else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0)
        err = errno;
    }
  }
  if (err == 0 && fcntl(fd, F_SETFL, flags) != 0) err = errno;
  return err;
}

// With `spin`, polls for that long before sleeping in poll(): the ranks then leave a barrier within microseconds of
// each other, where a rank woken from its sleep comes back tens of microseconds late and the first collective after
// the barrier waits for it (MPI's barriers spin too).
void waitFor(int fd, short events, Clock::time_point deadline, const char* what,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  pollfd p{fd, events, 0};
  for (auto spinUntil = Clock::now() + spin; Clock::now() < spinUntil;)
    if (poll(&p, 1, 0) > 0) return;
  for (;;) {
    int ready = poll(&p, 1, remainingMs(deadline));
    if (ready > 0) return;
    if (ready == 0) fail(std::string("timed out ") + what, Result::kRemoteError);
    if (errno != EINTR) fail(std::string("poll failed ") + what + ": " + std::strerror(errno), Result::kSystemError);
  }
}

void sendAll(int fd, const void* data, size_t bytes, Clock::time_point deadline,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    waitFor(fd, POLLOUT, deadline, "sending", spin);
    // MSG_DONTWAIT: POLLOUT means room for some bytes, not all; a blocking send of the rest would wait past the
    // deadline for a peer that stopped reading (the sockets are blocking once connected).
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) fail(std::string("send failed: ") + std::strerror(errno), Result::kRemoteError);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void recvAll(int fd, void* data, size_t bytes, Clock::time_point deadline,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    waitFor(fd, POLLIN, deadline, "receiving", spin);
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) fail("the bootstrap connection was closed: the rank died or failed", Result::kRemoteError);
    if (n < 0) fail(std::string("the bootstrap connection broke: ") + std::strerror(errno), Result::kRemoteError);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

// How a rank left, as a phrase after its name ("closed its bootstrap connection (it died or failed)"), or "" while
// its connection is up: a hang-up is seen even behind data not yet read (POLLRDHUP), which a peek would return first.
std::string hangUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return {};
  int error = 0;
  socklen_t length = sizeof(error);
  if ((p.revents & POLLERR) != 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error != 0)
    return std::string("broke its bootstrap connection (") + std::strerror(error) + ")";
  return "closed its bootstrap connection (it died or failed)";
}

void sendMessage(int fd, const std::string& text, Clock::time_point deadline, std::chrono::microseconds spin) {
  if (text.size() > Bootstrap::kMaxMessageBytes)
    fail("a bootstrap message of " + std::to_string(text.size()) + " bytes, over the " +
             std::to_string(Bootstrap::kMaxMessageBytes >> 20) + " MiB the bootstrap moves",
         Result::kInvalidUsage);
  uint32_t length = static_cast<uint32_t>(text.size());
  sendAll(fd, &length, sizeof(length), deadline, spin);
  sendAll(fd, text.data(), text.size(), deadline, spin);
}

// In place of a message's length: rank 0 gave up, and a message with its reason follows.
constexpr uint32_t kFailureMarker = 0xFFFFFFFFu;

// Who a message comes from, for what a failure marker in place of its length means.
enum class Sender {
  kRoot,        // rank 0: it gave up, and its reason follows
  kRootReason,  // rank 0's reason after its marker: a second marker is garbage
  kMember,      // a rank that joined (read by rank 0): only rank 0 sends the marker, so it is garbage here
};

// A message, or the error a failure marker in its place says (see Sender).
std::string recvMessage(int fd, Clock::time_point deadline, std::chrono::microseconds spin,
                        Sender sender = Sender::kRoot) {
  uint32_t length = 0;
  recvAll(fd, &length, sizeof(length), deadline, spin);
  if (length == kFailureMarker && sender == Sender::kRootReason)
    fail("garbage in place of rank 0's reason", Result::kRemoteError);
  if (length == kFailureMarker && sender == Sender::kMember)
    fail(
        "garbage: a failure marker, which only rank 0 sends, in place of the length of the rank's message (not a "
        "rank of this build?)",
        Result::kRemoteError);
  if (length == kFailureMarker)
    fail("rank 0 gave up: " + recvMessage(fd, deadline, spin, Sender::kRootReason), Result::kRemoteError);
  if (length > Bootstrap::kMaxMessageBytes)
    fail("a bootstrap message announced as " + std::to_string(length) + " bytes, over the " +
             std::to_string(Bootstrap::kMaxMessageBytes >> 20) + " MiB the bootstrap moves (not from a rank?)",
         Result::kRemoteError);
  std::string text(length, '\0');
  recvAll(fd, text.data(), length, deadline, spin);
  return text;
}

// What tells this machine apart (one kernel: one set of CPUs, even across network namespaces): its boot id, else
// its host name.
std::string machineId() {
  char id[64] = {};
  if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    bool read = std::fgets(id, sizeof(id), file) != nullptr;
    std::fclose(file);
    if (read && id[0] != '\0') return id;
  }
  gethostname(id, sizeof(id) - 1);
  return id;
}

// Tells a rank that joined why rank 0 gives up, so it fails with the reason rather than a reset connection. Best
// effort: a rank that is gone or not reading is not waited for. What the rank sent and rank 0 has not read (its part
// of an all-gather rank 0 never reached) is read and dropped: closed with unread bytes, a socket answers with a reset,
// and the reset discards the reason still on its way.
void tellFailure(int fd, const std::string& why) {
  try {
    const std::string text = withoutPrefix(why);
    const uint32_t marker = kFailureMarker;
    const auto deadline = Clock::now() + std::chrono::milliseconds(500);
    sendAll(fd, &marker, sizeof(marker), deadline);
    sendMessage(fd, text, deadline, std::chrono::microseconds(0));
  } catch (const BootstrapError&) {
  }
  char unread[4096];
  for (int reads = 0; reads < 256 && recv(fd, unread, sizeof(unread), MSG_DONTWAIT) > 0; ++reads) {
  }
}

// What else a peer already sent (at most 60 bytes, without waiting), to quote a foreign answer.
std::string firstBytes(int fd) {
  char more[60];
  const ssize_t n = recv(fd, more, sizeof(more), MSG_DONTWAIT);
  return n > 0 ? std::string(more, static_cast<size_t>(n)) : std::string();
}

// `bytes` as one line of text: "\r", "\n" and other unprintable bytes escaped.
std::string printable(const std::string& bytes) {
  std::string text;
  for (unsigned char c : bytes) {
    if (c == '\r') {
      text += "\\r";
    } else if (c == '\n') {
      text += "\\n";
    } else if (std::isprint(c) != 0 && c != '\\' && c != '"') {
      text += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      text += hex;
    }
  }
  return text;
}

struct Address {
  sockaddr_storage address;
  socklen_t length;
};

// getaddrinfo, given up at `deadline`: a DNS server that does not answer held the bootstrap for resolv.conf's
// timeout x attempts x servers (20 s against a 2 s NNS_COMM_TIMEOUT_MS), well past its own limit. The lookup runs on
// a thread of its own, waited for until the deadline; one still running then returns EAI_INPROGRESS and is left to
// end on its own, freeing what it finds.
int lookup(const std::string& host, int port, addrinfo** result, Clock::time_point deadline) {
  struct Lookup {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false, abandoned = false;
    int rc = EAI_INPROGRESS;
    int error = 0;  // errno, for EAI_SYSTEM
    addrinfo* result = nullptr;
  };
  auto state = std::make_shared<Lookup>();
  try {
    std::thread([state, host, service = std::to_string(port)] {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* found = nullptr;
      const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      const int error = errno;
      std::lock_guard lock(state->mutex);
      if (state->abandoned) {
        if (rc == 0) freeaddrinfo(found);
        return;
      }
      state->rc = rc;
      state->error = error;
      state->result = rc == 0 ? found : nullptr;
      state->finished = true;
      state->done.notify_one();
    }).detach();
  } catch (const std::system_error& e) {
    errno = e.code().value();  // no thread to be had: said as getaddrinfo's EAI_SYSTEM is, by errno
    return EAI_SYSTEM;
  }
  std::unique_lock lock(state->mutex);
  if (!state->done.wait_until(lock, deadline, [&] { return state->finished; })) {
    state->abandoned = true;
    return EAI_INPROGRESS;
  }
  *result = state->result;
  if (state->rc == EAI_SYSTEM) errno = state->error;
  return state->rc;
}

// Every address the root's host resolves to (a name may have an IPv6 and an IPv4 one): joiners try each in turn.
// A resolver's temporary failure (EAI_AGAIN: a DNS server that timed out or is restarting, common when hundreds of
// ranks start at once) is retried until `deadline`, as a refused connect is.
std::vector<Address> resolve(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo* result = nullptr;
  int rc = lookup(host, port, &result, deadline);
  // A temporary failure is tried again while there is time; a retry that runs out of it keeps that failure's word.
  while (rc == EAI_AGAIN && Clock::now() + std::chrono::milliseconds(200) < deadline) {
    usleep(200000);
    if (const int again = lookup(host, port, &result, deadline); again != EAI_INPROGRESS)
      rc = again;
    else
      break;
  }
  if (rc == EAI_SYSTEM) fail("cannot resolve root address " + host + ": " + std::strerror(errno), Result::kSystemError);
  if (rc == EAI_INPROGRESS)
    fail("cannot resolve root address " + host + ": the resolver did not answer within the bootstrap's " +
             "timeout (NNS_COMM_TIMEOUT_MS; its DNS servers are in /etc/resolv.conf)",
         Result::kSystemError);
  if (rc != 0 || result == nullptr) {
    // A name no one knows is the setting's fault; a resolver that failed (EAI_AGAIN, no memory) this rank's.
    const bool unknown = rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_ADDRFAMILY || rc == EAI_SERVICE;
    fail("cannot resolve root address " + host + ": " + (rc != 0 ? gai_strerror(rc) : "no address"),
         unknown ? Result::kInvalidUsage : Result::kSystemError);
  }
  std::vector<Address> all;
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    Address one{};
    std::memcpy(&one.address, a->ai_addr, a->ai_addrlen);
    one.length = a->ai_addrlen;
    all.push_back(one);
  }
  freeaddrinfo(result);
  return all;
}

bool isNumericAddress(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// What a rank tells rank 0 when it joins: who it is, the size it expects, and its job ($NNS_JOB_ID, else the
// launcher's job, and the unique id's random value), so that a rank of another job that reached this port (a reused
// MASTER_PORT, two launches at once, a stale unique id whose port a later id got) is turned away.
// What a joining rank says first. The magic and version tell a rank of this bootstrap from anything else that
// connects (a port scanner's bytes were read as a rank number, and 16 zero bytes as "rank 0 of 0", a wrong world size
// that failed the job as the user's mistake), and from a rank of another version, whose messages may differ.
constexpr uint32_t kJoinMagic = 0x4e4e5342;  // "NNSB"
// 2: send/recv messages that fill their pieces exactly end with a zero-byte piece, which a rank of version 1 would
// take for the next message's first piece.
// 3: the rendezvous' all-gather carries each rank's point-to-point address, and connection handles travel point to
// point, made on demand, instead of in one all-gather.
// 4: an all-gather's result is followed by rank 0's word that every rank has it (an empty message), which a rank of
// version 3 would take for the next all-gather's result.
constexpr uint32_t kJoinVersion = 4;
struct JoinMessage {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  uint64_t job;
};

// Rank 0's answer to a join (4 bytes); any but kJoined is followed by a message with the reason.
enum JoinReply : uint32_t { kJoined = 0, kOtherJob = 1, kRefused = 2 };

uint64_t jobId(const std::string& launcherJob, uint64_t idNonce) {
  const char* env = std::getenv("NNS_JOB_ID");
  std::string text = env != nullptr && *env != '\0' ? env : launcherJob;
  if (text.empty() && idNonce == 0) return 0;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  for (int byte = 0; byte < 8 && idNonce != 0; ++byte)
    hash = (hash ^ ((idNonce >> (8 * byte)) & 0xff)) * 1099511628211ull;
  return hash;
}

// The port a listening socket is bound to, or -1.
int boundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return -1;
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

// Sockets already listening on a root port, each for the first rank 0 of this process on that port: the port stays
// reserved from the moment it is chosen, so no other program can take it before rank 0 listens. From
// keepRootListener (nnsGetUniqueId) and from the launcher.
std::mutex keptListenersMutex;
std::vector<int> keptListeners;
// Set when $NNS_ROOT_LISTEN_FD named a descriptor that is not a listening socket here: something between nccl-net-run
// and this process closed the descriptors it inherited, and the launcher's listener still holds the root port.
int launcherListenerLost = -1;

// The launcher's ($NNS_ROOT_LISTEN_FD, nccl-net-run's rank 0) joins them when this library is loaded, before any
// thread of ours runs: the variable is read and unset once, not by each bootstrap (unsetenv while another thread's
// communicator reads its variables is a data race in glibc). One that does not listen is left alone; one on
// another port than the root's is never used.
[[maybe_unused]] const bool kLauncherListenerAdopted = [] {
  const char* text = std::getenv("NNS_ROOT_LISTEN_FD");
  if (text == nullptr) return false;
  const int fd = std::atoi(text);
  unsetenv("NNS_ROOT_LISTEN_FD");
  int accepting = 0;
  socklen_t size = sizeof(accepting);
  if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0 || !accepting) {
    launcherListenerLost = fd;
    return false;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  keptListeners.push_back(fd);
  return true;
}();

// Whether a kept listener on `port` waits for its rank 0 in this process.
bool keptListenerOn(int port) {
  std::lock_guard<std::mutex> lock(keptListenersMutex);
  return std::any_of(keptListeners.begin(), keptListeners.end(), [port](int fd) { return boundPort(fd) == port; });
}

// A kept listener on `port`, taken out of the list; -1 if none.
int inheritedListener(int port) {
  std::lock_guard<std::mutex> lock(keptListenersMutex);
  for (auto it = keptListeners.begin(); it != keptListeners.end(); ++it)
    if (boundPort(*it) == port) {
      const int fd = *it;
      keptListeners.erase(it);
      return fd;
    }
  return -1;
}

// A port in decimal digits, 1..65535: strtol would take " 80", "+80" or "80x"'s 80.
bool parsePort(const std::string& text, int* port, std::string* error) {
  if (text.empty()) {
    *error = "no port after the ':'";
    return false;
  }
  if (text.find_first_not_of("0123456789") != std::string::npos) {
    *error = "the port \"" + text + "\" is not a number";
    return false;
  }
  long value = 0;
  for (char digit : text) value = std::min(value * 10 + (digit - '0'), 100000L);  // capped: no overflow
  if (value < 1 || value > 65535) {
    *error = "the port " + text + " is not one of 1..65535";
    return false;
  }
  *port = static_cast<int>(value);
  return true;
}

}  // namespace

bool parseRootAddress(const std::string& text, std::string* host, int* port, std::string* error) {
  auto refuse = [&](const std::string& why) {
    *error = why;
    return false;
  };
  if (text.empty()) return refuse("it is empty");
  std::string name;
  size_t portStart = 0;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return refuse("no ']' closes the IPv6 address");
    name = text.substr(1, close - 1);
    // A zone (fe80::1%eth0) is getaddrinfo's to check; the address before it must be IPv6.
    in6_addr v6{};
    if (name.empty() || inet_pton(AF_INET6, name.substr(0, name.find('%')).c_str(), &v6) != 1)
      return refuse("[" + name + "] is not an IPv6 address (brackets are for one)");
    if (close + 1 == text.size() || text[close + 1] != ':') return refuse("no :port after the ']'");
    portStart = close + 2;
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return refuse("no :port");
    name = text.substr(0, colon);
    if (name.empty()) return refuse("no host before the ':'");
    in6_addr v6{};
    if (inet_pton(AF_INET6, name.c_str(), &v6) == 1)
      return refuse("an IPv6 address needs brackets, as in [" + name + "]:port");
    // Host names and IPv4 addresses are letters, digits, '-', '.' ('_' in /etc/hosts): anything else is a typo or a
    // URL ("tcp://host:29500"), better named here than as an unknown host later.
    const auto odd = std::find_if(name.begin(), name.end(), [](char c) {
      return !std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_';
    });
    if (odd != name.end())
      return refuse("the host \"" + name + "\" has a '" + std::string(1, *odd) +
                    "', which no host name or IPv4 address has");
    portStart = colon + 1;
  }
  int value = 0;
  if (!parsePort(text.substr(portStart), &value, error)) return false;
  *host = name;
  *port = value;
  return true;
}

void keepRootListener(int fd) {
  std::lock_guard<std::mutex> lock(keptListenersMutex);
  keptListeners.push_back(fd);
}

void releaseRootListener(int port) {
  if (const int fd = inheritedListener(port); fd >= 0) close(fd);
}

namespace {

// Innermost launcher first: torchrun starts its workers itself, so its variables sit above whatever started
// torchrun (`srun torchrun`: SLURM_PROCID is the node's task, RANK the worker's); srun's are inherited by
// everything a step starts, so they come last. Rank and size are never taken from two different launchers.
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* localRank;
  std::vector<const char*> job;
};
const Launcher kLaunchers[] = {
    {"nns", "NNS_RANK", "NNS_WORLD_SIZE", "NNS_LOCAL_RANK", {}},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", {"TORCHELASTIC_RUN_ID"}},
    {"Open MPI",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK",
     {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}},  // Open MPI 4's ORTE sets the first, Open MPI 5's PRRTE the second
    {"PMI",
     "PMI_RANK",
     "PMI_SIZE",
     "MPI_LOCALRANKID",
     {"PMI_JOBID", "PMIX_NAMESPACE", "SLURM_JOB_ID", "SLURM_STEP_ID"}},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", {"SLURM_JOB_ID", "SLURM_STEP_ID"}},
};

bool isSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// Inside a Slurm job but in none of its srun steps: the batch script (sbatch), salloc's shell, the extern step.
// Slurm sets SLURM_PROCID=0 and SLURM_NTASKS (the allocation's) there too, and everything the script starts inherits
// them: read as a step's, each process was rank 0 of SLURM_NTASKS, and a script's own RANK/WORLD_SIZE (a smaller
// world) were dropped as a stale export. A step's tasks have its id in SLURM_STEP_ID (SLURM_STEPID before Slurm
// 20.11); the batch, extern and interactive steps have ids from 0xfffffff0 up, where they are set at all.
bool inSlurmJobOutsideASrunStep() {
  if (!isSet("SLURM_JOB_ID")) return false;  // variables set by hand, as the tests and a user's experiments do
  const char* step = isSet("SLURM_STEP_ID") ? std::getenv("SLURM_STEP_ID") : std::getenv("SLURM_STEPID");
  if (step == nullptr || *step == '\0') return true;
  char* end = nullptr;
  const unsigned long long id = std::strtoull(step, &end, 10);
  return end != step && *end == '\0' && id >= 0xfffffff0ULL;
}

// Whether the launcher's variables count: Slurm's only inside an srun step.
bool counts(const Launcher& l) {
  return std::strcmp(l.name, "Slurm") != 0 || !inSlurmJobOutsideASrunStep();
}

}  // namespace

bool launcherVariablesSet() {
  // A root address is a launch's too: without it, a job whose ranks all lacked NNS_RANK ran as many one-rank jobs.
  return isSet("NNS_ROOT_ADDR") || isSet("MASTER_ADDR") ||
         std::any_of(std::begin(kLaunchers), std::end(kLaunchers),
                     [](const Launcher& l) { return counts(l) && (isSet(l.rank) || isSet(l.size)); });
}

namespace {

// A complete launcher's size, or 0 where its variables are not both set or are not a size.
int sizeFrom(const Launcher& l) {
  const char* text = std::getenv(l.size);
  int size = 0;
  return counts(l) && isSet(l.rank) && text != nullptr && *text != '\0' && parseInt(text, &size) && size >= 1 ? size
                                                                                                              : 0;
}

// The size of the launcher of that name in the table above, as sizeFrom gives it.
int sizeOfLauncher(const char* name) {
  for (const Launcher& l : kLaunchers)
    if (std::strcmp(l.name, name) == 0) return sizeFrom(l);
  return 0;
}

}  // namespace

bool launchInfoFromEnvironment(LaunchInfo* info, std::string* error) {
  // RANK and WORLD_SIZE without torchrun's run id are not torchrun's: under mpirun or mpiexec (which start every
  // process themselves) they are a stale export, inherited by every local rank, which made each one a job of its
  // own. The MPI launcher's then win, with a warning.
  const bool mpiLaunched =
      (isSet("OMPI_COMM_WORLD_RANK") && isSet("OMPI_COMM_WORLD_SIZE")) || (isSet("PMI_RANK") && isSet("PMI_SIZE"));
  const bool torchVariablesByHand = !isSet("TORCHELASTIC_RUN_ID") && isSet("RANK") && isSet("WORLD_SIZE");
  // Under srun they may be a script's own numbering of the ranks (RANK=$SLURM_PROCID, or several processes per task
  // that it starts itself: a world as large as the step's or larger), so they stand, unless their world is smaller
  // than the step's: no launcher inside the step starts fewer ranks than it has tasks, and an exported RANK=0
  // WORLD_SIZE=1 made every task a one-rank job that reported success. Slurm's then win, with a warning.
  const int slurmSize = sizeOfLauncher("Slurm");
  const int torchSize = sizeOfLauncher("torchrun");
  const bool staleUnderSlurm = torchVariablesByHand && torchSize > 0 && torchSize < slurmSize;
  const bool staleTorchVariables = torchVariablesByHand && (mpiLaunched || staleUnderSlurm);
  const Launcher* chosen = nullptr;
  std::string halfSet, ignored;
  for (const Launcher& l : kLaunchers) {
    if (staleTorchVariables && std::strcmp(l.name, "torchrun") == 0) {
      if (mpiLaunched)
        std::fprintf(stderr,
                     "nns WARN bootstrap: ignoring RANK=%s WORLD_SIZE=%s: set without torchrun (no "
                     "TORCHELASTIC_RUN_ID) under an MPI launcher, whose rank and size are used\n",
                     std::getenv("RANK"), std::getenv("WORLD_SIZE"));
      else
        std::fprintf(stderr,
                     "nns WARN bootstrap: ignoring RANK=%s WORLD_SIZE=%s: set without torchrun (no "
                     "TORCHELASTIC_RUN_ID), and a world smaller than the Slurm step's (SLURM_NTASKS=%s; a stale "
                     "export makes each task a job of its own): SLURM_PROCID=%s/SLURM_NTASKS=%s are used\n",
                     std::getenv("RANK"), std::getenv("WORLD_SIZE"), std::getenv("SLURM_NTASKS"),
                     std::getenv("SLURM_PROCID"), std::getenv("SLURM_NTASKS"));
      continue;
    }
    if (!counts(l)) continue;
    const bool rankSet = isSet(l.rank), sizeSet = isSet(l.size);
    if (rankSet != sizeSet)
      halfSet += std::string(halfSet.empty() ? "" : "; ") + (rankSet ? l.rank : l.size) + " is set but " +
                 (rankSet ? l.size : l.rank) + " is not";
    if (!rankSet || !sizeSet) continue;
    if (chosen == nullptr)
      chosen = &l;
    else
      ignored += std::string(ignored.empty() ? "" : ", ") + l.rank + "=" + std::getenv(l.rank) + "/" + l.size + "=" +
                 std::getenv(l.size);
  }
  // NNS_RANK or NNS_WORLD_SIZE alone is someone's intent, not a stale export: said, rather than dropped in silence.
  if (chosen != nullptr && isSet("NNS_RANK") != isSet("NNS_WORLD_SIZE"))
    std::fprintf(stderr, "nns WARN bootstrap: ignoring %s=%s: %s is not set; %s/%s (%s) are used\n",
                 isSet("NNS_RANK") ? "NNS_RANK" : "NNS_WORLD_SIZE",
                 std::getenv(isSet("NNS_RANK") ? "NNS_RANK" : "NNS_WORLD_SIZE"),
                 isSet("NNS_RANK") ? "NNS_WORLD_SIZE" : "NNS_RANK", chosen->rank, chosen->size, chosen->name);
  if (chosen == nullptr) {
    *error =
        "no rank/size in the environment (set NNS_RANK and NNS_WORLD_SIZE, or run under mpirun, srun or "
        "torchrun, or use nccl-net-run)" +
        (halfSet.empty() ? std::string() : ": " + halfSet) +
        (inSlurmJobOutsideASrunStep() && (isSet("SLURM_PROCID") || isSet("SLURM_NTASKS"))
             ? "; SLURM_PROCID/SLURM_NTASKS here are the Slurm job's batch script's (SLURM_JOB_ID without an srun "
               "step's SLURM_STEP_ID), not ranks: start them with srun"
             : "");
    return false;
  }
  const char* rankVar = chosen->rank;
  const char* sizeVar = chosen->size;
  const char* rank = std::getenv(rankVar);
  const char* size = std::getenv(sizeVar);
  if (!parseInt(rank, &info->rank) || !parseInt(size, &info->size) || info->size < 1 || info->rank >= info->size) {
    *error = std::string("bad rank/size: ") + rankVar + "=\"" + rank + "\" " + sizeVar + "=\"" + size +
             "\" (wanted decimal digits only, a size of 1.." + std::to_string(kMaxRanks) + " and a rank below it)";
    return false;
  }
  info->localRank = -1;
  if (const char* local = std::getenv(chosen->localRank); local != nullptr && !parseInt(local, &info->localRank))
    info->localRank = -1;
  info->job.clear();
  for (const char* listed : chosen->job) {
    // Slurm before 20.11 names a task's step SLURM_STEPID: without it, two steps of one job on the same root port
    // were taken for one job.
    const char* name = std::strcmp(listed, "SLURM_STEP_ID") == 0 && !isSet(listed) ? "SLURM_STEPID" : listed;
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0')
      info->job += std::string(info->job.empty() ? "" : " ") + name + "=" + value;
  }
  if (debugInfo())
    std::fprintf(stderr, "nns INFO bootstrap: rank %d of %d from %s/%s (%s), local rank %d%s%s\n", info->rank,
                 info->size, rankVar, sizeVar, chosen->name, info->localRank, ignored.empty() ? "" : "; ignored ",
                 ignored.c_str());
  info->source = std::string(rankVar) + "/" + sizeVar;
  // Variables a user set (NNS_* by hand, RANK/WORLD_SIZE without torchrun) that make a world smaller than a launcher's
  // around them: no launcher inside another starts fewer ranks than the outer one has processes, so either they are
  // stale (each process a job of its own, reporting success) or the outer launcher's processes were split into jobs
  // on purpose. They stand, as the innermost variables do (NNS_* is this library's own override, and a deliberate
  // one-rank run per task must stay possible), but not without a word at the default verbosity. A larger world is
  // not warned of: a script that starts several ranks per task is common, and a stale larger one fails anyway, naming
  // the ranks that never arrive.
  const char* launcherName = std::getenv("NNS_LAUNCHER");
  const bool byHand = std::strcmp(chosen->name, "torchrun") == 0 ? !isSet("TORCHELASTIC_RUN_ID")
                      : std::strcmp(chosen->name, "nns") == 0
                          ? launcherName == nullptr || std::strcmp(launcherName, "nccl-net-run") != 0
                          : false;
  for (const Launcher* l = chosen + 1; byHand && l != std::end(kLaunchers); ++l) {
    if (std::strcmp(l->name, "torchrun") == 0 && (staleTorchVariables || !isSet("TORCHELASTIC_RUN_ID"))) continue;
    const int outer = sizeFrom(*l);
    int outerRank = -1;
    // The same size and another rank, from NNS_RANK (RANK set by a job script to its own order is common): every
    // process of a stale export claims the same rank, and the job fails on "rank given twice" or a missing rank,
    // which does not point here.
    const bool sameSizeOtherRank = outer == info->size && std::strcmp(chosen->name, "nns") == 0 &&
                                   parseInt(std::getenv(l->rank), &outerRank) && outerRank != info->rank;
    if (outer < info->size || (outer == info->size && !sameSizeOtherRank)) continue;
    std::fprintf(
        stderr,
        "nns WARN bootstrap: rank %d of %d from %s=%s/%s=%s, set by hand, while %s says %s=%s/%s=%s: %s (a "
        "stale export of %s/%s %s); unset them to take %s's rank and size\n",
        info->rank, info->size, rankVar, rank, sizeVar, size, l->name, l->rank, std::getenv(l->rank), l->size,
        std::getenv(l->size),
        outer > info->size ? "more processes than ranks, so this job is one of several" : "the same size, another rank",
        rankVar, sizeVar,
        outer > info->size ? "makes each process a job of its own"
                           : "gives every process the same rank, which rank 0 refuses as given twice",
        l->name);
    break;
  }
  // Set but empty is unset, as launcherVariablesSet and nnsGetUniqueId read them (a script's NNS_ROOT_ADDR=$ADDR
  // with ADDR unset): MASTER_ADDR is used instead, and where no root is left the error says which was empty.
  const char* root = std::getenv("NNS_ROOT_ADDR");
  const char* masterHost = std::getenv("MASTER_ADDR");
  std::string emptyRoot;
  if (root != nullptr && *root == '\0') {
    root = nullptr;
    emptyRoot = "NNS_ROOT_ADDR";
  }
  if (masterHost != nullptr && *masterHost == '\0') {
    masterHost = nullptr;
    emptyRoot += std::string(emptyRoot.empty() ? "" : " and ") + "MASTER_ADDR";
  }
  if (root != nullptr) {
    std::string why;
    if (!parseRootAddress(root, &info->rootHost, &info->rootPort, &why)) {
      *error =
          std::string("NNS_ROOT_ADDR must be host:port (port 1..65535) or [IPv6]:port, not \"") + root + "\": " + why;
      return false;
    }
  } else if (const char* host = masterHost) {
    // torchrun's convention: the host alone (an IPv6 address without brackets), the port in MASTER_PORT.
    const char* port = std::getenv("MASTER_PORT");
    std::string why;
    // Checked as NNS_ROOT_ADDR's host is: an IPv6 address may come in brackets ([::1]); a URL (tcp://host) or a
    // host:port was taken as a host name, to fail later as "cannot resolve".
    std::string name = host;
    if (name.size() > 2 && name.front() == '[' && name.back() == ']' && name.find(':') != std::string::npos)
      name = name.substr(1, name.size() - 2);
    // What is left has no brackets: "[[::1]]" passed the check below as "[::1]" and failed later to resolve.
    if (name.find_first_of("[]") != std::string::npos) {
      *error = "MASTER_ADDR=" + std::string(host) +
               " is not a host name or address: brackets go once around a whole IPv6 address, as in [fd00::1]";
      return false;
    }
    {
      std::string checkedHost;
      int checkedPort = 0;
      const bool v6 = name.find(':') != std::string::npos;
      const std::string joined = (v6 ? "[" + name + "]" : name) + ":1";
      in6_addr address{};
      // A ':' outside an IPv6 address is a host:port or a URL (node0:29500, tcp://node0), not a bracket's fault.
      if (v6 && inet_pton(AF_INET6, name.substr(0, name.find('%')).c_str(), &address) != 1) {
        *error = "MASTER_ADDR=" + std::string(host) +
                 " is not a host name or address: it has a ':' but is not an IPv6 address (a host:port or a URL?); "
                 "give the host alone, and the port in MASTER_PORT";
        return false;
      }
      if (!parseRootAddress(joined, &checkedHost, &checkedPort, &why)) {
        *error = "MASTER_ADDR=" + std::string(host) +
                 " is not a host name or address (the port goes in MASTER_PORT): " + why;
        return false;
      }
    }
    info->rootHost = name;
    if (port == nullptr) {
      *error = "MASTER_ADDR is set but MASTER_PORT is missing or not a port (1..65535): it is not set";
      return false;
    }
    if (!parsePort(port, &info->rootPort, &why)) {
      *error =
          "MASTER_ADDR is set but MASTER_PORT is missing or not a port (1..65535): MASTER_PORT=" + std::string(port) +
          ": " + why;
      return false;
    }
    // torchrun's agent keeps its own TCP store on MASTER_PORT (its workers are meant to be clients of it), so rank 0
    // cannot listen there: the next port up is taken instead, on every rank alike. NNS_ROOT_ADDR picks another.
    if (const char* agentStore = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
        agentStore != nullptr && strcasecmp(agentStore, "true") == 0) {
      info->rootPort = info->rootPort < 65535 ? info->rootPort + 1 : info->rootPort - 1;
      info->rootPortNote = "MASTER_PORT" + std::string(info->rootPort > std::atoi(port) ? "+1" : "-1") +
                           ": torchrun's agent holds MASTER_PORT; set NNS_ROOT_ADDR=host:port for another";
      if (debugInfo())
        std::fprintf(stderr, "nns INFO bootstrap: root at %s:%d (%s)\n", host, info->rootPort,
                     info->rootPortNote.c_str());
    }
  } else if (info->size == 1) {
    // A one-rank job meets no one: it needs no root address (mpirun -np 1, a single torchrun worker, a test).
    info->rootHost = "127.0.0.1";
    info->rootPort = 0;
  } else {
    std::string hint;
    if (std::strcmp(chosen->name, "Open MPI") == 0)
      hint = "; mpirun sets none: mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=<free port> ...";
    else if (std::strcmp(chosen->name, "Slurm") == 0)
      hint =
          "; srun sets none: export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) "
          "and MASTER_PORT before srun";
    else if (std::strcmp(chosen->name, "PMI") == 0)
      hint = "; mpiexec sets none: mpiexec -genv MASTER_ADDR <rank 0's host> -genv MASTER_PORT <free port> ...";
    *error = "no root address" +
             (emptyRoot.empty() ? std::string()
                                : " (" + emptyRoot + (emptyRoot.find(" and ") != std::string::npos ? " are" : " is") +
                                      " set but empty)") +
             ": set NNS_ROOT_ADDR=host:port (or MASTER_ADDR and MASTER_PORT) on every rank" + hint;
    return false;
  }
  return true;
}

namespace {

// What a point-to-point connection says first: this bootstrap, this job, and which rank it is from and to. Anything
// else (a stranger, a rank of another job on a reused port, a connection meant for another rank) is closed once its
// first sizeof(PointToPointHello) bytes are read, the rest unread.
constexpr uint32_t kPointToPointMagic = 0x4e4e5350;  // "NNSP"
struct PointToPointHello {
  uint32_t magic;
  uint32_t version;
  uint64_t job;
  int32_t from;
  int32_t to;
};
struct PointToPointFrame {
  uint32_t tag;
  uint32_t length;
};
// How long an accepted point-to-point connection may take to say who it is from.
constexpr auto kHelloWithin = std::chrono::seconds(5);

// `address` with a v4-mapped IPv6 address (rank 0's listener takes both families) as the IPv4 one it stands for.
Address unmapped(const Address& address) {
  if (address.address.ss_family != AF_INET6) return address;
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address.address);
  if (!IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) return address;
  Address v4{};
  auto* in = reinterpret_cast<sockaddr_in*>(&v4.address);
  in->sin_family = AF_INET;
  in->sin_port = v6->sin6_port;
  std::memcpy(&in->sin_addr, &v6->sin6_addr.s6_addr[12], 4);
  v4.length = sizeof(sockaddr_in);
  return v4;
}

bool isLoopback(const Address& address) {
  if (address.address.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&address.address)->sin_addr.s_addr) >> 24) == 127;
  return address.address.ss_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&address.address)->sin6_addr);
}

// This end's address of the connected socket `fd`.
bool localAddress(int fd, Address* out) {
  Address address{};
  address.length = sizeof(address.address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address.address), &address.length) != 0) return false;
  *out = unmapped(address);
  return true;
}

// Interface name prefixes of bridges and links that only this host's containers and VMs reach: Docker's (docker0 and
// a user network's br-<id>), libvirt's, LXC's and LXD's, Kubernetes' CNI bridges and overlays (cni0, flannel.1,
// Calico's cali*, Weave's), Podman's, and the host ends of container veth pairs.
constexpr const char* kHostOnlyInterfaces[] = {"docker",  "br-",  "virbr", "lxcbr",  "lxdbr", "cni",
                                               "flannel", "cali", "weave", "podman", "veth"};

// Names that are loopback on every machine (RFC 6761: localhost and *.localhost, and the usual /etc/hosts aliases of
// ::1): a root address by such a name is on this machine for every rank that reached it, as 127.0.0.1 is.
bool loopbackByName(const std::string& host) {
  std::string name(host.size(), '\0');
  std::transform(host.begin(), host.end(), name.begin(),
                 [](char c) { return std::tolower(static_cast<unsigned char>(c)); });
  if (!name.empty() && name.back() == '.') name.pop_back();  // fully qualified: "localhost."
  const std::string suffix = ".localhost";
  return name == "localhost" || name == "localhost.localdomain" || name == "localhost6" ||
         name == "localhost6.localdomain6" || name == "ip6-localhost" || name == "ip6-loopback" ||
         (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
}

// Link-local addresses (169.254/16, fe80::/10) that no other host's route reaches: a BMC's usb0, an interface that
// got no DHCP lease.
bool linkLocal(const sockaddr* address) {
  if (address->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 16) == 0xa9fe;
  return address->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
}

}  // namespace

bool hostAddress(int family, sockaddr_storage* out, socklen_t* length, std::string* interfaceName) {
  const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
  const bool filtered = nccl_net::sdk::interfaceSpecGiven(spec);  // NCCL ignores a value of one character
  const nccl_net::sdk::InterfaceFilter filter(filtered ? spec : "");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  // Interfaces up and running (a carrier: a link without one connects nowhere), in two tiers, the first one's
  // before the second's. With NCCL_SOCKET_IFNAME: what it selects, loopback last ("^docker" selects lo too). Without:
  // an interface that is running, neither loopback nor a container's or VM's bridge or veth, then such a bridge or veth
  // (a host whose only links are those: a network namespace's veth, a container's). Within a tier IPv4 before IPv6, in
  // the kernel's order.
  bool found = false;
  for (int tier = 0; tier < 2 && !found; ++tier) {
    for (int candidateFamily : {AF_INET, AF_INET6}) {
      if (family != AF_UNSPEC && candidateFamily != family) continue;
      for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != candidateFamily || (a->ifa_flags & IFF_UP) == 0 ||
            (a->ifa_flags & IFF_RUNNING) == 0 || linkLocal(a->ifa_addr))
          continue;
        const bool loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
        if (filtered ? !filter.matches(a->ifa_name) || loopback != (tier == 1)
                     : loopback || hostOnlyInterface(a->ifa_name) != (tier == 1))
          continue;
        *length = candidateFamily == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        *out = sockaddr_storage{};
        std::memcpy(out, a->ifa_addr, *length);
        if (interfaceName != nullptr) *interfaceName = a->ifa_name;
        found = true;
      }
      if (found) break;
    }
  }
  freeifaddrs(list);
  return found;
}

namespace {

// hostAddress's, for a rank that reached rank 0 over loopback through a root host name (Debian's /etc/hosts gives
// the host's own name 127.0.1.1): ranks on other machines reached rank 0 by that name too, and cannot reach this rank
// over loopback.
bool interfaceAddress(Address* out) {
  Address address{};
  if (!hostAddress(AF_UNSPEC, &address.address, &address.length, nullptr)) return false;
  *out = address;
  return true;
}

// "192.0.2.1:4000", "[fd78::1]:4000".
std::string addressText(const Address& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address.address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address.address);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
  port = ntohs(in6->sin6_port);
  std::string text = "[";  // piece by piece: g++ 12 warns (-Wrestrict, a false positive) on "literal" + std::string&&
  text += host;
  text += "]:";
  text += std::to_string(port);
  return text;
}

}  // namespace

bool hostOnlyInterface(const char* name) {
  return std::any_of(std::begin(kHostOnlyInterfaces), std::end(kHostOnlyInterfaces),
                     [name](const char* prefix) { return std::strncmp(name, prefix, std::strlen(prefix)) == 0; });
}

struct Bootstrap::PointToPoint {
  std::mutex mutex;
  int listener = -1;
  std::vector<Address> peers;  // each rank's listener, by rank
  std::vector<int> outgoing;   // this rank's connection to each rank, by rank; -1 until the first send
  struct Incoming {
    int fd;
    int from;  // -1 until its hello is read
    std::string buffer;
    Clock::time_point since;
  };
  std::vector<Incoming> incoming;
  std::map<std::pair<int, uint32_t>, std::deque<std::string>> inbox;  // by (from, tag)
  std::vector<std::string> gone;  // by rank: how its connection to this rank ended, "" while it has not
  std::string listening;          // the listener's address, as text

  ~PointToPoint() {
    if (listener >= 0) close(listener);
    for (int fd : outgoing)
      if (fd >= 0) close(fd);
    for (const auto& in : incoming) close(in.fd);
  }

  // Connections that have not said who they are, at most this many; past it the oldest goes. The listener lives as
  // long as the communicator, and whatever connects to it is accepted at the next tryRecv: a flood of silent
  // connections (a port scanner, a load balancer's health checks) each held a descriptor for kHelloWithin, and the
  // rank failed on EMFILE. A rank's hello comes with its connect and is read as it is accepted, so a rank's
  // connection is rarely among them, and only for as long as its first bytes take.
  static constexpr size_t kMaxStrangers = 64;
  // Accepts in one pump: a flood that keeps coming does not keep tryRecv from returning (the rest waits in the
  // listener's queue for the next one).
  static constexpr int kAcceptsPerPump = 4096;

  // Closes the longest-waiting connection that has not said who it is; false if there is none.
  bool closeOldestStranger() {
    const auto oldest = std::find_if(incoming.begin(), incoming.end(), [](const Incoming& in) { return in.from < 0; });
    if (oldest == incoming.end()) return false;
    close(oldest->fd);
    incoming.erase(oldest);
    return true;
  }

  // Accepts what connected and reads what came, without waiting; call with `mutex` held.
  void pump(int rank, int size, uint64_t job) {
    size_t dropped = 0;
    for (int accepts = 0; accepts < kAcceptsPerPump; ++accepts) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        incoming.push_back(Incoming{fd, -1, {}, Clock::now()});
        // Read before the cap counts it: a rank's hello is in already, and it is then no stranger.
        if (serve(incoming.size() - 1, rank, size, job) &&
            std::count_if(incoming.begin(), incoming.end(), [](const Incoming& in) { return in.from < 0; }) >
                static_cast<std::ptrdiff_t>(kMaxStrangers)) {
          closeOldestStranger();
          ++dropped;
        }
        continue;
      }
      // Out of descriptors or memory: a stranger's descriptor is given up for what waits to be accepted, which may be
      // a rank's. Without one, the peer's message would never be read, and its wait end blaming the peer.
      if (const int err = errno; err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        if (closeOldestStranger()) {
          ++dropped;
          continue;
        }
        fail("rank " + std::to_string(rank) + " cannot accept another rank's bootstrap connection: " +
                 std::strerror(err) + (err == EMFILE ? " (" + descriptorUse() + ")" : ""),
             Result::kSystemError);
      }
      break;  // EAGAIN: nothing more now
    }
    if (dropped > 0 && debugInfo())
      std::fprintf(stderr,
                   "nns bootstrap: rank %d closed %zu point-to-point connection(s) that had not said which rank they "
                   "are from (more than %zu waiting, or out of descriptors)\n",
                   rank, dropped, kMaxStrangers);
    for (size_t i = 0; i < incoming.size();)
      if (serve(i, rank, size, job)) ++i;
  }

  // Reads what incoming[i] sent, without waiting, and files its messages; false once it is closed (and erased).
  bool serve(size_t i, int rank, int size, uint64_t job) {
    Incoming& in = incoming[i];
    std::string ended;
    for (char chunk[4096];;) {
      // Before its hello, no more than the hello is read: what a stranger sends after its first bytes stays unread
      // (a connection that kept sending was read into memory for as long as it did).
      const size_t room = in.from < 0 ? sizeof(PointToPointHello) - in.buffer.size() : sizeof(chunk);
      const ssize_t n = recv(in.fd, chunk, room, MSG_DONTWAIT);
      if (n > 0) {
        in.buffer.append(chunk, static_cast<size_t>(n));
        if (in.from >= 0 || in.buffer.size() < sizeof(PointToPointHello)) continue;
        PointToPointHello hello{};
        std::memcpy(&hello, in.buffer.data(), sizeof(hello));
        if (hello.magic != kPointToPointMagic || hello.version != kJoinVersion || hello.job != job ||
            hello.to != rank || hello.from < 0 || hello.from >= size || hello.from == rank) {
          if (debugInfo())
            std::fprintf(stderr,
                         "nns bootstrap: rank %d closed a point-to-point connection that is not from a rank of "
                         "this job to this rank\n",
                         rank);
          close(in.fd);
          incoming.erase(incoming.begin() + static_cast<std::ptrdiff_t>(i));
          return false;
        }
        in.from = hello.from;
        gone[in.from].clear();  // a rank that reconnects after a failed send of its own
        in.buffer.clear();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0)
        ended = "closed its bootstrap connection to this rank (it died or failed)";
      else if (errno != EAGAIN && errno != EWOULDBLOCK)
        ended = std::string("broke its bootstrap connection to this rank (") + std::strerror(errno) + ")";
      break;
    }
    size_t used = 0;
    while (in.from >= 0 && in.buffer.size() - used >= sizeof(PointToPointFrame)) {
      PointToPointFrame frame{};
      std::memcpy(&frame, in.buffer.data() + used, sizeof(frame));
      if (frame.length > kMaxPointToPointBytes) {
        ended = "sent a point-to-point message announced as " + std::to_string(frame.length) + " bytes, over the " +
                std::to_string(kMaxPointToPointBytes >> 10) + " KiB the bootstrap moves";
        break;
      }
      if (in.buffer.size() - used < sizeof(frame) + frame.length) break;
      inbox[{in.from, frame.tag}].push_back(in.buffer.substr(used + sizeof(frame), frame.length));
      used += sizeof(frame) + frame.length;
    }
    in.buffer.erase(0, used);
    if (ended.empty() && in.from < 0 && Clock::now() - in.since > kHelloWithin) ended = "silent";
    if (ended.empty()) return true;
    if (in.from >= 0 && gone[in.from].empty()) gone[in.from] = ended;
    close(in.fd);
    incoming.erase(incoming.begin() + static_cast<std::ptrdiff_t>(i));
    return false;
  }
};

Bootstrap::Bootstrap(const LaunchInfo& info, std::chrono::milliseconds timeout)
    : rank_(info.rank), size_(info.size), timeout_(timeout) {
  if (size_ < 1 || size_ > kMaxRanks || rank_ < 0 || rank_ >= size_)
    fail("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": a rank is 0..size-1 of a size of 1 to " +
             std::to_string(kMaxRanks),
         Result::kInvalidUsage);
  if (size_ == 1) {
    if (info.rootPort > 0) releaseRootListener(info.rootPort);
    return;
  }
  if (info.rootHost.empty() || info.rootPort < 1 || info.rootPort > 65535)
    fail("no root address: host \"" + info.rootHost + "\", port " + std::to_string(info.rootPort) +
             " (LaunchInfo's rootHost and rootPort, 1..65535)",
         Result::kInvalidUsage);
  reserveRoom();
  try {
    rendezvous(info);
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws: close here, and tell the ranks that joined why.
    for (int& fd : memberSockets_) {
      if (fd < 0) continue;
      tellFailure(fd, e.what());
      close(fd);
      fd = -1;
    }
    if (rootSocket_ >= 0) close(rootSocket_);
    rootSocket_ = -1;
    throw;
  }
}

void Bootstrap::reserveRoom() const {
  // A switch, as the communicator's: anything but 0 or 1 (a "no" meant to turn it off) is refused, not read as 1.
  const char* raise = std::getenv("NNS_RAISE_FD_LIMIT");
  if (raise != nullptr && *raise != '\0' && std::strcmp(raise, "0") != 0 && std::strcmp(raise, "1") != 0)
    fail(std::string("NNS_RAISE_FD_LIMIT=") + raise + " is not an integer from 0 to 1", Result::kInvalidUsage);
  // Rank 0 holds a connection to every rank; point-to-point messages take up to one connection per peer each way
  // (rarely: the communicator's connections are to its neighbours), and what a rank does besides needs some more.
  const size_t peers = static_cast<size_t>(size_) - 1;
  const size_t want = (rank_ == 0 ? 2 * peers : peers) + 64;
  const DescriptorRoom room = reserveDescriptors(want);
  if (room.raised() && debugInfo())
    std::fprintf(
        stderr, "nns bootstrap: rank %d raised its descriptor limit (ulimit -n) from %llu to %llu for %d ranks\n",
        rank_, static_cast<unsigned long long>(room.before), static_cast<unsigned long long>(room.soft), size_);
  // Only rank 0 is sure to need them: said there, where a job that then fails accepting ranks is explained.
  if (!room.enough && rank_ == 0) {
    std::fprintf(stderr, "nns bootstrap: rank 0 may run out of descriptors: %d ranks take about %zu more, and %s; %s\n",
                 size_, want, descriptorUse().c_str(),
                 room.soft >= room.hard ? "raise the hard limit (ulimit -Hn) where the job starts"
                 : !room.mayRaise       ? "raise ulimit -n where the job starts, or unset NNS_RAISE_FD_LIMIT=0"
                                        : "raise ulimit -n where the job starts (this rank could not)");
  }
}

void Bootstrap::rendezvous(const LaunchInfo& info) {
  const auto deadline = Clock::now() + timeout_;
  const std::vector<Address> roots = resolve(info.rootHost, info.rootPort, deadline);
  const JoinMessage mine{kJoinMagic, kJoinVersion, rank_, size_, jobId(info.job, info.idNonce)};
  const std::string rootText =
      (info.rootHost.find(':') != std::string::npos ? "[" + info.rootHost + "]" : info.rootHost) + ":" +
      std::to_string(info.rootPort);
  if (rank_ == 0) {
    std::string listening = rootText;
    int listener = inheritedListener(info.rootPort);
    if (listener < 0) {
      // A host name may resolve to another address on rank 0 than on the others (Debian's /etc/hosts gives the host's
      // own name 127.0.1.1): rank 0 then listens on every address, as torchrun's store does. A numeric address is
      // the one the user chose, and is used as given. So is a loopback name's first address (localhost: 127.0.0.1
      // or ::1, the same on every rank, since all are on this machine; members try each address in turn): the
      // job stays unreachable from other hosts, as the name says.
      Address bindTo = roots.front();
      const bool any = !isNumericAddress(info.rootHost) && !loopbackByName(info.rootHost);
      if (any) {
        bindTo = Address{};
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&bindTo.address);
        v6->sin6_family = AF_INET6;
        v6->sin6_addr = in6addr_any;
        v6->sin6_port = htons(static_cast<uint16_t>(info.rootPort));
        bindTo.length = sizeof(sockaddr_in6);
        listening = "*:" + std::to_string(info.rootPort) + " (every address, since " + info.rootHost + " is a name)";
      }
      listener = socket(bindTo.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (listener < 0 && any) {  // no IPv6 here: every IPv4 address
        bindTo = Address{};
        auto* v4 = reinterpret_cast<sockaddr_in*>(&bindTo.address);
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl(INADDR_ANY);
        v4->sin_port = htons(static_cast<uint16_t>(info.rootPort));
        bindTo.length = sizeof(sockaddr_in);
        listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      }
      if (listener < 0) fail(std::string("rank 0: socket: ") + std::strerror(errno), Result::kSystemError);
      int on = 1, off = 0;
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (bindTo.address.ss_family == AF_INET6) setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      if (bind(listener, reinterpret_cast<sockaddr*>(&bindTo.address), bindTo.length) != 0 ||
          ::listen(listener, size_) != 0) {
        int err = errno;
        close(listener);
        fail("rank 0 cannot listen on " + listening + ": " + std::strerror(err) +
                 (err != EADDRINUSE ? ""
                  : launcherListenerLost >= 0
                      ? " (nccl-net-run holds it for this rank, and its listener, descriptor " +
                            std::to_string(launcherListenerLost) +
                            " (NNS_ROOT_LISTEN_FD), did not reach this process: a program between the launcher and "
                            "this rank closed the descriptors it inherited, as Python's subprocess does unless given "
                            "pass_fds or close_fds=False)"
                      : " (another job, or another program, holds that port; a unique id made by nnsGetUniqueId in "
                        "another process holds it for that process: rank 0 must be created where the id was made)") +
                 (info.rootPortNote.empty() ? "" : "; the port is " + info.rootPortNote),
             Result::kSystemError);
      }
    }
    memberSockets_.assign(size_, -1);
    std::vector<std::string> turnedAway;
    // A rank refused for its own settings (a size that differs, a rank number twice): rank 0's failure is then
    // ncclInvalidUsage, as the refused rank's is, not a remote error.
    bool refusedForSettings = false;
    int arrived = 1;
    // Admits the connection `fd` as the rank its join message names, or turns it away saying why (another job's rank
    // on a reused port, a wrong size, a duplicate, a stray connection that said nothing).
    // Says whom rank 0 turned away, each distinct one once (another job's rank retries every 100 ms), and keeps the
    // first few for the error if ranks are missing.
    auto noteTurnedAway = [&](const std::string& claim, const char* said) {
      if (std::find(turnedAway.begin(), turnedAway.end(), claim) != turnedAway.end()) return;
      std::fprintf(stderr, "nns bootstrap: rank 0 turned away %s%s\n", said, claim.c_str());
      if (turnedAway.size() < 8) turnedAway.push_back(claim);
    };
    // `unheard`: why a connection whose join message did not come whole is turned away ("" when it came). What it
    // sent is no rank's claim (the fields half filled: "rank 825184340 of 168636462"), so only its length is said.
    auto admit = [&](int fd, const JoinMessage& join, size_t got, const char* unheard) {
      const bool spoke = unheard[0] == '\0';
      const int peer = join.rank;
      JoinReply reply = kJoined;
      std::string why;
      if (!spoke) {
        noteTurnedAway("a connection that sent " + std::to_string(got) + " of the " +
                           std::to_string(sizeof(JoinMessage)) + " bytes of a rank's join message: " + unheard,
                       "");
        close(fd);
        return;
      }
      if (join.magic != kJoinMagic) {
        noteTurnedAway("a connection that is not a rank of this bootstrap (it does not speak it)", "");
        close(fd);  // nothing to tell it: it would not understand
        return;
      } else if (join.version != kJoinVersion) {
        reply = kRefused;
        why = "it is a rank of bootstrap version " + std::to_string(join.version) + ", rank 0 of version " +
              std::to_string(kJoinVersion) + " (every rank needs the same nccl-net-sdk)";
      } else if (join.job != mine.job) {
        reply = kOtherJob;
        why = "rank 0 there belongs to another job (or was made from another unique id)";
      } else if (join.size != size_) {
        reply = kRefused;
        why = "rank 0 expects " + std::to_string(size_) + " ranks, and rank " + std::to_string(peer) + " says " +
              std::to_string(join.size) + " (a wrong world size on one rank?)";
      } else if (peer <= 0 || peer >= size_) {
        reply = kRefused;
        why = "rank " + std::to_string(peer) + " is not a joining rank of " + std::to_string(size_);
      } else if (memberSockets_[peer] >= 0) {
        reply = kRefused;
        why = "rank 0 already has a rank " + std::to_string(peer) +
              " (two ranks were given the same rank, or another job's rank reached this port)";
      }
      if (reply == kJoined) {
        try {
          sendAll(fd, &reply, sizeof(reply), deadline);
        } catch (const BootstrapError&) {
          close(fd);  // gone already: it will retry, or be missing
          return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memberSockets_[peer] = fd;
        ++arrived;
        return;
      }
      noteTurnedAway("rank " + std::to_string(peer) + " of " + std::to_string(join.size) + ": " + why,
                     "a connection claiming ");
      if (reply == kRefused && join.job == mine.job) refusedForSettings = true;  // this job's rank, not a stranger
      try {
        const auto soon = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
        sendAll(fd, &reply, sizeof(reply), soon);
        sendMessage(fd, why, soon, std::chrono::microseconds(0));
      } catch (const BootstrapError&) {
      }
      close(fd);
    };
    // Connections accepted whose join message is still coming. All are read at once, so a connection that says
    // nothing (a port scanner, a health check) holds up no rank behind it; it is turned away after 5 s.
    struct Pending {
      int fd;
      Clock::time_point since;
      JoinMessage join{0, 0, -1, -1, 0};
      size_t got = 0;
    };
    constexpr auto kSpeakWithin = std::chrono::seconds(5);
    std::vector<Pending> pending;
    // Connections waiting to speak are capped (a flood of silent ones would take every descriptor): past the cap
    // the oldest is turned away. An accept that fails for want of descriptors or memory pauses accepting for a while
    // (the listener stays readable: polling it again at once spun a core) and is named if ranks are then missing.
    const size_t maxPending = std::max<size_t>(64, 2 * static_cast<size_t>(size_));
    Clock::time_point acceptPausedUntil{};
    std::string acceptProblem;
    // Since when every accept has failed for want of descriptors. Once no connection waits to speak (turning one away
    // frees its descriptor, and the next accept then succeeds), nothing this rank does frees one: after a while it
    // gives up, rather than at the timeout.
    std::optional<Clock::time_point> outOfDescriptorsSince;
    constexpr auto kOutOfDescriptorsFor = std::chrono::seconds(3);
    while (arrived < size_) {
      const auto now = Clock::now();
      const bool outOfDescriptors =
          outOfDescriptorsSince && pending.empty() && now - *outOfDescriptorsSince >= kOutOfDescriptorsFor;
      if (now >= deadline || outOfDescriptors) {
        for (const auto& p : pending) close(p.fd);
        std::string missing, refused;
        // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on "literal" + std::string&&.
        int absent = 0;
        for (int r = 1; r < size_; ++r) {
          if (memberSockets_[r] >= 0) continue;
          if (++absent > kRanksNamed) continue;
          if (!missing.empty()) missing += ',';
          missing += std::to_string(r);
        }
        if (absent > kRanksNamed) {
          missing += " and ";
          missing += std::to_string(absent - kRanksNamed);
          missing += " more";
        }
        for (const auto& one : turnedAway) refused += (refused.empty() ? "" : "; ") + one;
        close(listener);
        const std::string where = " at " + listening + " (ranks from " + info.source + ")";
        if (outOfDescriptors)
          fail("rank(s) " + missing + " could not join" + where + ": rank 0, which keeps a connection to every rank, " +
                   "could not accept one for " +
                   std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kOutOfDescriptorsFor).count()) +
                   " s: " + acceptProblem,
               Result::kSystemError);
        fail("rank(s) " + missing + " did not arrive within " + std::to_string(timeout_.count()) + " ms" + where +
                 (refused.empty() ? std::string() : "; turned away: " + refused) +
                 (acceptProblem.empty() ? std::string() : "; accepting failed: " + acceptProblem),
             refusedForSettings ? Result::kInvalidUsage : Result::kRemoteError);
      }
      auto until = deadline;
      for (const auto& p : pending) until = std::min(until, p.since + kSpeakWithin);
      const bool acceptPaused = now < acceptPausedUntil;
      if (acceptPaused) until = std::min(until, acceptPausedUntil);
      std::vector<pollfd> fds{{acceptPaused ? -1 : listener, POLLIN, 0}};
      for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), remainingMs(until)) < 0 && errno != EINTR) {
        const int err = errno;
        for (const auto& p : pending) close(p.fd);
        close(listener);
        fail(std::string("rank 0: poll failed waiting for ranks: ") + std::strerror(err), Result::kSystemError);
      }
      // Read what each pending connection sent; a complete message is admitted, a silent or closed one turned away.
      std::vector<Pending> still;
      for (size_t i = 0; i < pending.size(); ++i) {
        Pending& p = pending[i];
        bool closed = false;
        if (fds[i + 1].revents != 0) {
          ssize_t n = recv(p.fd, reinterpret_cast<char*>(&p.join) + p.got, sizeof(p.join) - p.got, MSG_DONTWAIT);
          if (n > 0) p.got += static_cast<size_t>(n);
          closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (p.got == sizeof(p.join)) {
          admit(p.fd, p.join, p.got, "");
        } else if (closed || Clock::now() >= p.since + kSpeakWithin) {
          admit(p.fd, p.join, p.got, closed ? "it closed" : "it said nothing more for 5 s");
        } else {
          still.push_back(p);
        }
      }
      pending.swap(still);
      if (fds[0].revents & POLLIN) {
        int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          outOfDescriptorsSince.reset();
          if (pending.size() >= maxPending) {
            admit(pending.front().fd, pending.front().join, pending.front().got,
                  "the oldest of too many connections waiting to speak");
            pending.erase(pending.begin());
          }
          pending.push_back(Pending{fd, Clock::now()});
        } else if (const int err = errno; err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          acceptProblem = std::string(std::strerror(err)) + (err == EMFILE ? " (" + descriptorUse() + ")" : "");
          acceptPausedUntil = Clock::now() + std::chrono::milliseconds(100);
          if (err == EMFILE && !outOfDescriptorsSince) outOfDescriptorsSince = Clock::now();
        }
      }
    }
    for (const auto& p : pending) close(p.fd);  // strangers still silent when every rank is in
    // Shut down, not only closed: the listener nccl-net-run hands rank 0 has copies in whatever rank 0's process was
    // started through (a wrapper shell forks the program and keeps its own), and while one is open the port stays in
    // listening state with nobody accepting: the job's next communicator could not listen there ("Address already in
    // use") and its other ranks connected into the dead queue. Shutting a listening socket down ends the listening
    // for every copy.
    shutdown(listener, SHUT_RDWR);
    close(listener);
  } else {
    // Non-root: retry while rank 0 is not listening yet, trying each of the root's addresses in turn. A connection
    // closed unanswered (a listener closed with us in its queue) or another job's rank 0 is retried too.
    std::string lastProblem;
    for (size_t attempt = 0;; ++attempt) {
      const Address& root = roots[attempt % roots.size()];
      int fd = socket(root.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0)
        fail(std::string("rank ") + std::to_string(rank_) + ": socket: " + std::strerror(errno), Result::kSystemError);
      // With several addresses, each attempt gets at most a second, so that one whose SYNs are dropped (a firewall,
      // a full accept queue, an IPv6 address not routed here) does not take the whole timeout from the others.
      const auto attemptEnd = roots.size() > 1 ? std::min(deadline, Clock::now() + kAttemptPerAddress) : deadline;
      int err = connectBefore(fd, root.address, root.length, attemptEnd);
      if (err == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        uint32_t reply = kRefused;
        std::string why;
        bool answered = false;
        try {
          sendAll(fd, &mine, sizeof(mine), deadline);
          recvAll(fd, &reply, sizeof(reply), deadline);
          answered = true;
          if (reply == kOtherJob || reply == kRefused) why = recvMessage(fd, deadline, std::chrono::microseconds(0));
        } catch (const BootstrapError& e) {
          if (answered)
            why = "its reason could not be read (" + withoutPrefix(e.what()) + ")";
          else
            lastProblem = Clock::now() >= deadline ? "it accepted the connection but never answered the join"
                                                   : "it closed the connection without answering the join";
          // This process's own kept listener took the connection: no rank 0 of this process ever came for it.
          if (keptListenerOn(info.rootPort))
            lastProblem +=
                "; the port is held by this process, which made the unique id (nnsGetUniqueId) for its "
                "own rank 0: rank 0 must be created in the process that made the id (it serves the "
                "rendezvous there; NCCL's ncclGetUniqueId may be called anywhere, this one may not)";
        }
        if (answered && reply == kJoined) {
          rootSocket_ = fd;
          break;
        }
        if (answered && reply != kOtherJob && reply != kRefused) {
          // No rank 0 answers that: another program holds the port (a web server, a previous job's service), and
          // this job's rank 0 could not listen there either. Its first bytes tell the user which program it is.
          const std::string said = std::string(reinterpret_cast<const char*>(&reply), sizeof(reply)) + firstBytes(fd);
          close(fd);
          fail("rank " + std::to_string(rank_) + ": what answered at " + rootText +
                   " does not speak this bootstrap (not an nccl-net-sdk rank 0: another program holds the port?); "
                   "it answered \"" +
                   printable(said) + "\"",
               Result::kInvalidUsage);
        }
        close(fd);
        if (answered && reply == kRefused)
          fail("rank " + std::to_string(rank_) + ": rank 0 at " + rootText + " refused it: " + why,
               Result::kInvalidUsage);
        if (answered) {
          lastProblem = why;
          usleep(80000);  // another job's rank 0: its own comes once that one stops listening
        }
      } else {
        close(fd);
        lastProblem = std::strerror(err);
        if (err == ECONNREFUSED)
          lastProblem +=
              " (nothing listens there: rank 0 has not started, or listens at another address or port; or "
              "it has all " +
              std::to_string(size_) +
              " ranks already and stopped listening: this rank number given twice, or a process left "
              "from an earlier job that took its place)";
      }
      if (Clock::now() >= deadline)
        fail("rank " + std::to_string(rank_) + " could not reach rank 0 at " + rootText + " within " +
                 std::to_string(timeout_.count()) + " ms: " + lastProblem,
             Result::kRemoteError);
      usleep(20000);
    }
  }
  // Waits poll before they sleep only where each rank can have a CPU of its own: ranks that share one would spin in
  // the time the rank they wait for needs to get there. (8-byte allreduces after the barrier, 20 per run, medians of
  // 10 runs: 2 ranks on 2 CPUs 7.5 us with the spin against 7.95 without; 4 ranks on 2 CPUs 49 against 48, and in
  // an earlier 9-run comparison 54 against 43.)
  job_ = mine.job;
  const std::string machine = machineId();
  // A root named "localhost" is loopback on every rank, as 127.0.0.1 is: every rank is on rank 0's machine, and a
  // rank announced an interface's address (the first one up, a container bridge as likely as not) beside rank 0's
  // 127.0.0.1.
  const bool rootNamed = !isNumericAddress(info.rootHost) && !loopbackByName(info.rootHost);
  const auto everyone = allGather(listenPointToPoint(rootNamed) + machine);
  uint32_t ownScope = 0;  // this rank's listener's interface, where its address is link-local IPv6
  if (Address own{}; localAddress(p2p_->listener, &own) && own.address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&own.address);
    if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) ownScope = in6->sin6_scope_id;
  }
  p2p_->peers.resize(size_);
  p2p_->outgoing.assign(size_, -1);
  p2p_->gone.assign(size_, std::string());
  localRanks_ = 0;
  for (int r = 0; r < size_; ++r) {
    // Each rank's part: its listener's address (a 4-byte length, then the sockaddr's room), then its machine.
    constexpr size_t kRoom = sizeof(uint32_t) + sizeof(sockaddr_storage);
    uint32_t length = 0;
    if (everyone[r].size() >= kRoom) std::memcpy(&length, everyone[r].data(), sizeof(length));
    if (everyone[r].size() < kRoom || length < sizeof(sockaddr_in) || length > sizeof(sockaddr_storage))
      fail("rank " + std::to_string(r) + "'s point-to-point address is garbage", Result::kRemoteError);
    std::memcpy(&p2p_->peers[r].address, everyone[r].data() + sizeof(length), sizeof(sockaddr_storage));
    p2p_->peers[r].length = length;
    const sa_family_t family = p2p_->peers[r].address.ss_family;
    if (!(family == AF_INET && length == sizeof(sockaddr_in)) &&
        !(family == AF_INET6 && length == sizeof(sockaddr_in6)))
      fail("rank " + std::to_string(r) + "'s point-to-point address is garbage", Result::kRemoteError);
    if (everyone[r].compare(kRoom, std::string::npos, machine) == 0) ++localRanks_;
    // A link-local IPv6 address's scope is an interface index of the rank that announced it, which names another
    // interface here, or none ("Network is unreachable" with a link-local root address): this rank reaches it
    // through the interface of its own link-local listener, on the same link.
    auto* peer = reinterpret_cast<sockaddr_in6*>(&p2p_->peers[r].address);
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&peer->sin6_addr) && ownScope != 0) peer->sin6_scope_id = ownScope;
  }
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  spin_ = cpus > 0 && localRanks_ <= cpus ? kSpinBeforeSleep : std::chrono::microseconds(0);
}

Bootstrap::~Bootstrap() {
  if (rootSocket_ >= 0) close(rootSocket_);
  for (int fd : memberSockets_)
    if (fd >= 0) close(fd);
}

std::string Bootstrap::listenPointToPoint(bool rootNamed) {
  p2p_ = std::make_unique<PointToPoint>();
  // The address the other ranks reached rank 0 by is one they can reach: rank 0 takes its end of a member's
  // connection, another rank its end of its connection to rank 0. A loopback one is kept only where nothing else can
  // be: for rank 0 when every member came over loopback, for the others when the root address was a loopback
  // address given as such, or a name loopback everywhere (localhost: a job on one machine). Where another root name
  // led to loopback (127.0.1.1 from /etc/hosts), an
  // interface's address is taken instead.
  Address own{};
  bool found = false;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) {
      Address candidate{};
      if (!localAddress(memberSockets_[r], &candidate)) continue;
      if (!found || (isLoopback(own) && !isLoopback(candidate))) own = candidate;
      found = true;
    }
  } else {
    found = localAddress(rootSocket_, &own);
    if (found && isLoopback(own) && rootNamed) {
      if (Address other{}; interfaceAddress(&other)) own = other;
    }
  }
  if (!found)
    fail(std::string("rank ") + std::to_string(rank_) + ": getsockname: " + std::strerror(errno), Result::kSystemError);
  if (own.address.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&own.address)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&own.address)->sin6_port = 0;
  const int fd = socket(own.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    fail(std::string("rank ") + std::to_string(rank_) + ": socket: " + std::strerror(errno), Result::kSystemError);
  p2p_->listener = fd;
  Address bound{};
  bound.length = sizeof(bound.address);
  // A long queue: every rank may connect at once (an all-to-all's first messages), and what waits in it costs this
  // process no descriptor; strangers in it are accepted and dropped past a cap (PointToPoint::kMaxStrangers). A short
  // one would drop ranks' SYNs behind a flood, to be retried only after the kernel's second or more.
  if (bind(fd, reinterpret_cast<const sockaddr*>(&own.address), own.length) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound.address), &bound.length) != 0)
    fail("rank " + std::to_string(rank_) + " cannot listen on " + addressText(own) +
             " for the other ranks: " + std::strerror(errno),
         Result::kSystemError);
  p2p_->listening = addressText(unmapped(bound));
  if (debugInfo())
    std::fprintf(stderr, "nns bootstrap: rank %d listens for the other ranks at %s\n", rank_, p2p_->listening.c_str());
  std::string announced(sizeof(uint32_t) + sizeof(sockaddr_storage), '\0');
  const uint32_t length = bound.length;
  std::memcpy(announced.data(), &length, sizeof(length));
  std::memcpy(announced.data() + sizeof(length), &bound.address, sizeof(sockaddr_storage));
  return announced;
}

void Bootstrap::send(int peer, uint32_t tag, const std::string& data) {
  const std::string who = "rank " + std::to_string(rank_) + " sending to rank " + std::to_string(peer) + ": ";
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail(who + "not another rank of " + std::to_string(size_), Result::kInvalidUsage);
  if (data.size() > kMaxPointToPointBytes)
    fail(who + "a message of " + std::to_string(data.size()) + " bytes, over the " +
             std::to_string(kMaxPointToPointBytes >> 10) + " KiB the bootstrap moves point to point",
         Result::kInvalidUsage);
  const auto deadline = Clock::now() + timeout_;
  std::lock_guard<std::mutex> lock(p2p_->mutex);
  int& fd = p2p_->outgoing[peer];
  const Address& to = p2p_->peers[peer];
  try {
    if (fd < 0) {
      const int s = socket(to.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) fail(who + "socket: " + std::strerror(errno), Result::kSystemError);
      if (const int err = connectBefore(s, to.address, to.length, deadline); err != 0) {
        close(s);
        fail(who + "cannot reach it at " + addressText(to) + ": " + std::strerror(err) +
                 (err == ECONNREFUSED ? " (it died or failed)"
                                      : " (it died, or that address is not reachable from here)"),
             Result::kRemoteError);
      }
      int one = 1;
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd = s;
      const PointToPointHello hello{kPointToPointMagic, kJoinVersion, job_, rank_, peer};
      sendAll(fd, &hello, sizeof(hello), deadline);
    }
    std::string frame(sizeof(PointToPointFrame), '\0');
    const PointToPointFrame header{tag, static_cast<uint32_t>(data.size())};
    std::memcpy(frame.data(), &header, sizeof(header));
    frame += data;
    sendAll(fd, frame.data(), frame.size(), deadline);
  } catch (const BootstrapError& e) {
    // A connection left with part of a message on it is of no further use: the peer reads its end as a failure.
    if (fd >= 0) close(fd);
    fd = -1;
    const std::string what = withoutPrefix(e.what());
    if (what.rfind(who, 0) == 0) throw;
    fail(who + what, e.result());
  }
}

bool Bootstrap::probe(int peer, std::chrono::milliseconds connectWithin) {
  const std::string who =
      "rank " + std::to_string(peer) + " cannot be reached (it died, failed or destroyed its communicator): ";
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail("rank " + std::to_string(rank_) + " probing rank " + std::to_string(peer) + ": not another rank of " +
             std::to_string(size_),
         Result::kInvalidUsage);
  std::lock_guard<std::mutex> lock(p2p_->mutex);
  int& fd = p2p_->outgoing[peer];
  const Address& to = p2p_->peers[peer];
  if (fd < 0) {
    const int s = socket(to.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return false;  // this rank's trouble, not the peer's: the wait's own timeout decides
    const int err = connectBefore(s, to.address, to.length, Clock::now() + connectWithin);
    if (err != 0) {
      close(s);
      // Only a refusal says the peer is gone (nothing listens on its port); a timeout or an unreachable network
      // says nothing of it.
      if (err == ECONNREFUSED)
        fail(who + "its bootstrap port at " + addressText(to) + " refused a connection", Result::kRemoteError);
      return false;
    }
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // Kept as this rank's connection to the peer, as a first send would have made it: the hello goes at once, so the
    // peer files it as this rank's and never closes it as a stranger's.
    const PointToPointHello hello{kPointToPointMagic, kJoinVersion, job_, rank_, peer};
    try {
      sendAll(s, &hello, sizeof(hello), Clock::now() + connectWithin);
    } catch (const BootstrapError&) {
      close(s);
      return false;
    }
    fd = s;
  }
  // The peer never writes on this connection: anything to read is its end closing (its process exited, which the
  // kernel did for it) or an error.
  if (const std::string left = hangUp(fd); !left.empty()) {
    close(fd);
    fd = -1;
    // hangUp's phrase is "closed ... (it died or failed)" or "broke ... (<the socket's error>)".
    const bool closed = left.rfind("closed", 0) == 0;
    fail(who + (closed ? "it closed its end of this rank's bootstrap connection to it"
                       : "this rank's bootstrap connection to it broke" + left.substr(left.find(" ("))),
         Result::kRemoteError);
  }
  return true;
}

std::string Bootstrap::pointToPointAddress() const {
  return p2p_ == nullptr ? std::string() : p2p_->listening;
}

bool Bootstrap::tryRecv(int peer, uint32_t tag, std::string* data) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail("rank " + std::to_string(rank_) + " receiving from rank " + std::to_string(peer) + ": not another rank of " +
             std::to_string(size_),
         Result::kInvalidUsage);
  std::lock_guard<std::mutex> lock(p2p_->mutex);
  // What came already first: a caller polling many peers reads the sockets only when a message is not in.
  for (bool pumped = false;; pumped = true) {
    if (auto it = p2p_->inbox.find({peer, tag}); it != p2p_->inbox.end()) {
      *data = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) p2p_->inbox.erase(it);
      return true;
    }
    if (pumped) break;
    p2p_->pump(rank_, size_, job_);
  }
  if (!p2p_->gone[peer].empty()) fail("rank " + std::to_string(peer) + " " + p2p_->gone[peer], Result::kRemoteError);
  return false;
}

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  // Rank 0 decides that a rank is missing and tells the others why: they wait a little longer than it does, so that
  // its reason reaches them before their own deadline (their wait starts later, but only by the time to join).
  auto deadline = Clock::now() + timeout_ + (rank_ == 0 ? std::chrono::milliseconds(0) : kRootGrace);
  std::vector<std::string> all(size_);
  if (size_ == 1) {
    all[0] = mine;
    return all;
  }
  if (rank_ == 0) {
    all[0] = mine;
    // Every rank's contribution is waited for at once, each read as it comes: a rank that died is heard of while
    // another is still on its way (one that is stuck in a plugin call for its own timeout), not after it.
    // A rank whose contribution is in is still watched, for a hang-up: until the result comes it has no reason to
    // leave, and one that died after sending would leave the ranks still to come waiting out their timeouts.
    std::vector<pollfd> members;  // index r - 1
    for (int r = 1; r < size_; ++r) members.push_back({memberSockets_[r], POLLIN | POLLRDHUP, 0});
    int pending = size_ - 1;
    const auto spinUntil = Clock::now() + spin_;
    while (pending > 0) {
      const int ready = poll(members.data(), members.size(), Clock::now() < spinUntil ? 0 : remainingMs(deadline));
      if (ready < 0 && errno != EINTR)
        fail(std::string("poll failed receiving: ") + std::strerror(errno), Result::kSystemError);
      if (ready == 0 && Clock::now() >= deadline) {
        std::string late;
        for (size_t i = 0; i < members.size(); ++i)
          if ((members[i].events & POLLIN) != 0) late += std::string(late.empty() ? "" : ", ") + std::to_string(i + 1);
        const std::string why = "rank" + std::string(pending > 1 ? "s " : " ") + late + " sent nothing within " +
                                std::to_string(timeout_.count()) +
                                " ms (NNS_COMM_TIMEOUT_MS) of an exchange among all ranks (stopped, stuck, or busy "
                                "elsewhere?)";
        giveUp(0, why, Result::kRemoteError);
      }
      for (size_t i = 0; ready > 0 && i < members.size(); ++i) {
        pollfd& p = members[i];
        const int r = static_cast<int>(i) + 1;
        if (p.revents == 0) continue;
        if ((p.events & POLLIN) == 0) {  // already heard from: a hang-up
          giveUp(r, "rank " + std::to_string(r) + " " + hangUp(p.fd), Result::kRemoteError);
        }
        try {
          all[r] = recvMessage(p.fd, deadline, spin_, Sender::kMember);
        } catch (const BootstrapError& e) {
          // A rank died or stalled: the others hear it from rank 0 instead of waiting out their own timeouts.
          giveUp(r, withoutPrefix(e.what()) + " (from rank " + std::to_string(r) + ")", e.result());
        }
        p.events = POLLRDHUP;
        --pending;
      }
    }
    std::string packed;
    for (const auto& part : all) {
      uint32_t length = static_cast<uint32_t>(part.size());
      packed.append(reinterpret_cast<const char*>(&length), sizeof(length));
      packed += part;
    }
    for (int r = 1; r < size_; ++r) {
      try {
        // A deadline of its own for each rank: the wait above may have used up `deadline` (a rank that came late),
        // and a large job's result goes out to one member after another.
        sendMessage(memberSockets_[r], packed, Clock::now() + timeout_, spin_);
      } catch (const BootstrapError& e) {
        // As for a receive: every other rank hears why from rank 0, those served already too (they wait for the
        // word below), so that no rank returns a result some rank never got.
        const std::string why = std::string(e.what()) + " (sending the all-gather to rank " + std::to_string(r) + ")";
        giveUp(0, withoutPrefix(why), e.result());  // rank r too: the failure may be the result's, not its
      }
    }
    // The result reached every rank: the word that lets each return it (an empty message). A rank served early
    // returned at once, and succeeded where rank 0 then failed to reach a later one. Best effort: a rank that took
    // the result and died since is found by the next exchange, as a rank dying after the all-gather would be. Each
    // within the timeout, as the result was: a rank still draining a large result has not made room for it yet.
    for (int r = 1; r < size_; ++r) {
      try {
        sendMessage(memberSockets_[r], std::string(), Clock::now() + timeout_, std::chrono::microseconds(0));
      } catch (const BootstrapError&) {
      }
    }
    return all;
  }
  std::string packed;
  bool sent = false;
  try {
    sendMessage(rootSocket_, mine, deadline, spin_);
    sent = true;
    // The result comes once every part is in (up to a timeout after rank 0 began waiting, so about this rank's
    // deadline), and rank 0 then serves the ranks one after another, each within a timeout of its own: a rank served
    // after a slow one, in an all-gather whose last part came late but in time, ran out its deadline and failed the
    // job while every rank was on time. A timeout more covers that; rank 0's reason comes as soon as it gives up.
    packed = recvMessage(rootSocket_, deadline + timeout_, spin_);
    // Rank 0's word that every rank got the result (or its reason for giving up, thrown as such). Rank 0 serves the
    // ranks one after another, each within a timeout of its own: this wait starts with the result, not with the
    // all-gather (an early rank ran out its deadline while rank 0 was still serving the others, and failed alone).
    if (!recvMessage(rootSocket_, Clock::now() + timeout_ + kRootGrace, spin_).empty())
      fail("garbage after the all-gather's result in place of rank 0's word that every rank has it",
           Result::kRemoteError);
  } catch (const BootstrapError& e) {
    // Whose connection it was: this rank's to rank 0 (a reset said only "Connection reset by peer").
    const std::string what = withoutPrefix(e.what());
    if (what.rfind("rank 0 gave up", 0) == 0) throw;
    // This rank's own send refused because rank 0 gave up before its part came: rank 0's reason is read if it is
    // here (a late rank said only "send failed: Broken pipe"). Only then: once the send went through, what is
    // unread is part of a result, whose bytes could read as the marker.
    uint32_t marker = 0;
    if (!sent &&
        recv(rootSocket_, &marker, sizeof(marker), MSG_PEEK | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof(marker)) &&
        marker == kFailureMarker)
      recvMessage(rootSocket_, Clock::now() + kRootGrace, std::chrono::microseconds(0));  // throws its reason
    // Which wait it was: a rank 0 that took the join and then says nothing (another program answering the join's
    // bytes, a rank 0 stuck) ended as "timed out receiving (rank 0)", about twice the timeout after the call began.
    fail(what + (sent ? " (rank 0, waiting for the all-gather's result: this rank's part was sent)"
                      : " (rank 0, sending this rank's part of the all-gather)"),
         e.result());
  }
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    uint32_t length = 0;
    if (offset + sizeof(length) > packed.size()) fail("truncated all-gather from rank 0", Result::kRemoteError);
    std::memcpy(&length, packed.data() + offset, sizeof(length));
    offset += sizeof(length);
    if (offset + length > packed.size()) fail("truncated all-gather from rank 0", Result::kRemoteError);
    all[r] = packed.substr(offset, length);
    offset += length;
  }
  return all;
}

void Bootstrap::giveUp(int failed, const std::string& why, Result result) {
  for (int other = 1; other < size_; ++other)
    if (other != failed) tellFailure(memberSockets_[other], why);
  fail(why, result);
}

void Bootstrap::abandon(const std::string& why, Result result) {
  if (rank_ == 0 && size_ > 1) giveUp(0, withoutPrefix(why), result);
  fail(withoutPrefix(why), result);
}

void Bootstrap::checkPeers() {
  if (size_ == 1) return;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) {
      const std::string left = hangUp(memberSockets_[r]);
      if (!left.empty()) giveUp(r, "rank " + std::to_string(r) + " " + left, Result::kRemoteError);
    }
    return;
  }
  // Rank 0 sends nothing between two all-gathers but its reason for giving up, read here as the all-gather would
  // (only peeked at before: anything else stays for the all-gather).
  uint32_t marker = 0;
  const ssize_t n = recv(rootSocket_, &marker, sizeof(marker), MSG_PEEK | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(sizeof(marker)) && marker == kFailureMarker)
    recvMessage(rootSocket_, Clock::now() + kRootGrace, std::chrono::microseconds(0));
  if (const std::string left = hangUp(rootSocket_); !left.empty()) fail("rank 0 " + left, Result::kRemoteError);
}

}  // namespace nns::core
