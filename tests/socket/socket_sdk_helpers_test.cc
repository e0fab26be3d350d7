// socket_sdk_helpers_test.cc: nccl_net/sdk/socket.hpp: interface filters, addresses, non-blocking connect/accept
// with retries and timeouts, and the send/receive helpers' end-of-stream and error reporting.
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nccl_net/sdk/socket.hpp>

namespace {

namespace sdk = nccl_net::sdk;
using Clock = std::chrono::steady_clock;

TEST(SocketInterfaceFilter, PrefixListMatchesByPrefix) {
  sdk::InterfaceFilter filter("eth,ib");
  EXPECT_TRUE(filter.matches("eth0"));
  EXPECT_TRUE(filter.matches("ib1"));
  EXPECT_FALSE(filter.matches("lo"));
  EXPECT_FALSE(filter.matches("veth0")) << "prefix, not substring";
}

TEST(SocketInterfaceFilter, CaretExcludes) {
  sdk::InterfaceFilter filter("^docker,lo");
  EXPECT_TRUE(filter.matches("eth0"));
  EXPECT_FALSE(filter.matches("docker0"));
  EXPECT_FALSE(filter.matches("lo"));
}

TEST(SocketInterfaceFilter, EqualsMeansExactNames) {
  sdk::InterfaceFilter filter("=eth0,eth2");
  EXPECT_TRUE(filter.matches("eth0"));
  EXPECT_FALSE(filter.matches("eth01"));
  EXPECT_FALSE(filter.matches("eth1"));
  sdk::InterfaceFilter notExactly("^=eth0");
  EXPECT_FALSE(notExactly.matches("eth0"));
  EXPECT_TRUE(notExactly.matches("eth01"));
}

// NCCL's list parser takes "name:port" entries (the port is for NCCL_IB_HCA): "eth0:1" is eth0. The whole entry was
// taken as the name before, which no interface has.
TEST(SocketInterfaceFilter, APortSuffixIsNoPartOfTheName) {
  sdk::InterfaceFilter filter("eth0:1,ib:2");
  EXPECT_EQ(filter.names(), (std::vector<std::string>{"eth0", "ib"}));
  EXPECT_TRUE(filter.matches("eth0"));
  EXPECT_TRUE(filter.matches("ib3"));
  EXPECT_FALSE(filter.matches("eth1"));
  sdk::InterfaceFilter exact("=eth0:1,eth2");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_TRUE(exact.matches("eth2"));
  EXPECT_FALSE(exact.matches("eth01"));
  sdk::InterfaceFilter excluded("^lo:0");
  EXPECT_FALSE(excluded.matches("lo"));
  EXPECT_TRUE(excluded.matches("eth0"));
  EXPECT_TRUE(sdk::InterfaceFilter(":1,:2").names().empty()) << "an entry with no name is ignored, as NCCL does";
}

// NCCL takes NCCL_SOCKET_IFNAME only when it is longer than one character, and otherwise chooses automatically. "="
// was taken before: exact names, none listed, so no interface at all.
TEST(SocketInterfaceSelection, AValueOfOneCharacterIsIgnoredAsNcclDoes) {
  EXPECT_FALSE(sdk::interfaceSpecGiven(nullptr));
  EXPECT_FALSE(sdk::interfaceSpecGiven(""));
  EXPECT_FALSE(sdk::interfaceSpecGiven("="));
  EXPECT_FALSE(sdk::interfaceSpecGiven("e"));
  EXPECT_TRUE(sdk::interfaceSpecGiven("lo"));
  unsetenv("SOCKET_TEST_FAMILY");
  unsetenv("SOCKET_TEST_IFNAME");
  auto automatic = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
  ASSERT_FALSE(automatic.empty());
  for (const char* value : {"=", "^", "l"}) {
    setenv("SOCKET_TEST_IFNAME", value, 1);
    auto found = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
    ASSERT_EQ(found.size(), automatic.size()) << "SOCKET_TEST_IFNAME=" << value;
    for (size_t i = 0; i < found.size(); ++i) EXPECT_EQ(found[i].name, automatic[i].name) << value;
  }
  setenv("SOCKET_TEST_IFNAME", "=lo:1", 1);
  auto found = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].name, "lo");
  unsetenv("SOCKET_TEST_IFNAME");
}

TEST(SocketInterfaceSelection, VariableSelectsLoopbackAndFamily) {
  setenv("SOCKET_TEST_IFNAME", "=lo", 1);
  unsetenv("SOCKET_TEST_FAMILY");
  auto found = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].name, "lo");
  EXPECT_EQ(found[0].address.family(), AF_INET) << "IPv4 is preferred";
  EXPECT_EQ(found[0].address.toString(), "127.0.0.1:0");

  setenv("SOCKET_TEST_FAMILY", "AF_INET6", 1);
  found = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
  ASSERT_EQ(found.size(), 1u) << "lo has ::1";
  EXPECT_EQ(found[0].address.toString(), "[::1]:0");

  setenv("SOCKET_TEST_FAMILY", "bogus", 1);
  bool unknown = false;
  EXPECT_EQ(sdk::socketFamilyFromEnv("SOCKET_TEST_FAMILY", &unknown), AF_UNSPEC);
  EXPECT_TRUE(unknown);
}

TEST(SocketInterfaceSelection, AutomaticChoiceSkipsLoopbackWhenAnythingElseIsUp) {
  unsetenv("SOCKET_TEST_IFNAME");
  unsetenv("SOCKET_TEST_FAMILY");
  auto found = sdk::findInterfaces("SOCKET_TEST_IFNAME", "SOCKET_TEST_FAMILY", 16);
  ASSERT_FALSE(found.empty()) << "at worst loopback is chosen";
  auto others = sdk::listInterfaces(sdk::InterfaceFilter("^lo"), AF_UNSPEC, 16);
  if (others.empty()) {
    EXPECT_EQ(found[0].name, "lo");
  } else {
    for (const auto& i : found) EXPECT_NE(i.name, "lo");
  }
}

// An interface with several addresses is offered by its best: IPv4 over IPv6, and with IPv6 forced a global address
// over a link-local one; whatever order the kernel lists them in. Checked on this machine's interfaces.
TEST(SocketInterfaceSelection, AnInterfaceIsOfferedByItsBestAddress) {
  struct Has {
    bool v4 = false, globalV6 = false;
  };
  std::vector<std::pair<std::string, Has>> has;
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || (entry->ifa_flags & IFF_UP) == 0) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    auto it = std::find_if(has.begin(), has.end(), [&](const auto& h) { return h.first == entry->ifa_name; });
    if (it == has.end()) it = has.insert(has.end(), {entry->ifa_name, Has{}});
    const sdk::SocketAddress address = sdk::SocketAddress::fromSockaddr(entry->ifa_addr);
    if (family == AF_INET) it->second.v4 = true;
    if (family == AF_INET6 && !address.isLinkLocal() && !address.isLoopback()) it->second.globalV6 = true;
  }
  freeifaddrs(list);
  int checked = 0;
  for (const auto& found : sdk::listInterfaces(sdk::InterfaceFilter(""), AF_UNSPEC, 64)) {
    for (const auto& [name, h] : has) {
      if (name != found.name || !h.v4) continue;
      EXPECT_EQ(found.address.family(), AF_INET) << name << ": " << found.address.toString();
      ++checked;
    }
  }
  for (const auto& found : sdk::listInterfaces(sdk::InterfaceFilter(""), AF_INET6, 64)) {
    for (const auto& [name, h] : has) {
      if (name != found.name || !h.globalV6) continue;
      EXPECT_FALSE(found.address.isLinkLocal()) << name << ": " << found.address.toString();
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no interface here has an IPv4 or a global IPv6 address";
}

TEST(SocketAddress, PortAndText) {
  sdk::SocketAddress v4 = sdk::SocketAddress::loopback(AF_INET);
  v4.setPort(4242);
  EXPECT_EQ(v4.port(), 4242);
  EXPECT_TRUE(v4.isLoopback());
  EXPECT_EQ(v4.toString(), "127.0.0.1:4242");
  sdk::SocketAddress v6 = sdk::SocketAddress::loopback(AF_INET6);
  v6.setPort(7);
  EXPECT_EQ(v6.toString(), "[::1]:7");
  EXPECT_EQ(v6.length(), sizeof(sockaddr_in6));
  EXPECT_EQ(sdk::SocketAddress{}.toString(), "<invalid>");
}

// Connect before anyone listens: refused attempts are retried until the listener appears.
TEST(SocketConnector, RetriesRefusedConnectsUntilTheListenerAppears) {
  std::string error;
  sdk::SocketAddress bound{};
  int probe = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 1, &bound, &error);
  ASSERT_GE(probe, 0) << error;
  close(probe);  // the port is free again and nothing listens on it

  sdk::TcpConnector connector;
  connector.start(bound, sdk::SocketAddress{}, std::chrono::seconds(10), std::chrono::milliseconds(20));
  auto start = Clock::now();
  int listener = -1;
  sdk::IoStatus status = sdk::IoStatus::kWouldBlock;
  while (status == sdk::IoStatus::kWouldBlock && Clock::now() - start < std::chrono::seconds(10)) {
    status = connector.progress();
    if (listener < 0 && Clock::now() - start > std::chrono::milliseconds(150)) {
      listener = sdk::listenTcp(bound, 4, nullptr, &error);
      ASSERT_GE(listener, 0) << error;
    }
  }
  ASSERT_EQ(status, sdk::IoStatus::kDone) << connector.error();
  EXPECT_GT(connector.attempts(), 1);
  int client = connector.release();
  int server = -1;
  sdk::SocketAddress peer{};
  while (sdk::acceptTcp(listener, &server, &peer, &error) == sdk::IoStatus::kWouldBlock) {
    ASSERT_TRUE(sdk::waitForSocket(listener, POLLIN, 5000));
  }
  EXPECT_TRUE(peer.isLoopback());
  // Each socket close-on-exec: a program the process starts must not hold the connection or the port.
  for (int fd : {listener, client, server}) EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "descriptor " << fd;
  close(client);
  close(server);
  close(listener);
}

// A test double for accept4 (the kernel reports these only for a connection that failed in the backlog, which a
// test cannot make on demand): while failAccepts > 0, each call fails with acceptErrno instead of accepting.
int failAccepts = 0;
int acceptErrno = 0;
extern "C" int accept4(int fd, sockaddr* address, socklen_t* length, int flags) {
  using Real = int (*)(int, sockaddr*, socklen_t*, int);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "accept4"));
  if (failAccepts > 0) {
    --failAccepts;
    errno = acceptErrno;
    return -1;
  }
  return real(fd, address, length, flags);
}

// The network errors accept(2) passes on from a new connection (ENETUNREACH, EHOSTUNREACH, ENETDOWN, ...) are
// "nothing to accept now", as its page says and NCCL retries them: the listener goes on and accepts the next
// connection. They failed the listener (and NCCL's accept) before.
TEST(SocketAccept, NetworkErrorsOfANewConnectionAreRetried) {
  std::string error;
  sdk::SocketAddress bound{};
  int listener = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 4, &bound, &error);
  ASSERT_GE(listener, 0) << error;
  for (int code : {ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN, ENONET, ENOPROTOOPT, EOPNOTSUPP}) {
    sdk::TcpConnector connector;
    connector.start(bound, sdk::SocketAddress{}, std::chrono::seconds(10), std::chrono::milliseconds(20));
    sdk::IoStatus status = sdk::IoStatus::kWouldBlock;
    for (auto start = Clock::now();
         status == sdk::IoStatus::kWouldBlock && Clock::now() - start < std::chrono::seconds(10);)
      status = connector.progress();
    ASSERT_EQ(status, sdk::IoStatus::kDone) << connector.error();
    int client = connector.release();
    failAccepts = 1;
    acceptErrno = code;
    int server = -1;
    EXPECT_EQ(sdk::acceptTcp(listener, &server, nullptr, &error), sdk::IoStatus::kWouldBlock)
        << std::strerror(code) << ": " << error;
    ASSERT_TRUE(sdk::waitForSocket(listener, POLLIN, 5000));
    EXPECT_EQ(sdk::acceptTcp(listener, &server, nullptr, &error), sdk::IoStatus::kDone) << error;
    close(server);
    close(client);
  }
  failAccepts = 1;
  acceptErrno = EBADF;  // the listener's own failure is still one
  int server = -1;
  EXPECT_EQ(sdk::acceptTcp(listener, &server, nullptr, &error), sdk::IoStatus::kFailed);
  close(listener);
}

// A list with no name in it matches every interface, as NCCL's matchIfList does ("no user list"): so "^=" excludes
// them all and "=," selects them all (the other way round before, loopback taken silently for "^=").
TEST(SocketInterfaceFilter, AListWithNoNameMatchesEveryInterfaceAsInNccl) {
  for (const char* none : {"^=", "^,", "^:1"}) {
    EXPECT_FALSE(sdk::InterfaceFilter(none).matches("lo")) << none;
    EXPECT_FALSE(sdk::InterfaceFilter(none).matches("eth0")) << none;
  }
  for (const char* all : {"=,", ",,", "=:0"}) {
    EXPECT_TRUE(sdk::InterfaceFilter(all).matches("lo")) << all;
    EXPECT_TRUE(sdk::InterfaceFilter(all).matches("eth0")) << all;
  }
}

// Connects to `peer` with a 300 ms timeout (retrying refusals every 20 ms) until the connector ends: it must fail
// within 2 s, saying it timed out and naming the address, as a failure of the network rather than of this host.
void expectConnectTimesOut(const sdk::SocketAddress& peer, sdk::TcpConnector& connector) {
  connector.start(peer, sdk::SocketAddress{}, std::chrono::milliseconds(300), std::chrono::milliseconds(20));
  auto start = Clock::now();
  sdk::IoStatus status;
  do {
    status = connector.progress();
  } while (status == sdk::IoStatus::kWouldBlock && Clock::now() - start < std::chrono::seconds(5));
  EXPECT_EQ(status, sdk::IoStatus::kFailed);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(connector.error().find("timed out"), std::string::npos) << connector.error();
  EXPECT_NE(connector.error().find(peer.toString()), std::string::npos) << connector.error();
  EXPECT_FALSE(connector.failedHere()) << "the peer was tried: a network failure";
}

TEST(SocketConnector, GivesUpAfterTheTimeoutWithTheAddressInTheError) {
  std::string error;
  sdk::SocketAddress bound{};
  int probe = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 1, &bound, &error);
  ASSERT_GE(probe, 0);
  close(probe);
  sdk::TcpConnector connector;
  expectConnectTimesOut(bound, connector);
}

// A connect the peer never answers (its listener's accept queue is full, so the SYN is dropped) stays pending; it
// fails at the timeout, naming the address, as a failure of the network rather than of this host.
TEST(SocketConnector, AConnectThatStaysPendingFailsAtTheTimeout) {
  std::string error;
  sdk::SocketAddress bound{};
  int listener = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 0, &bound, &error);
  ASSERT_GE(listener, 0) << error;
  // Nothing accepts: once one connection has completed, the queue is full and a further SYN is dropped.
  int filling = sdk::openTcpSocket(AF_INET, &error);
  ASSERT_GE(filling, 0) << error;
  (void)::connect(filling, bound.get(), bound.length());
  ASSERT_TRUE(sdk::waitForSocket(filling, POLLOUT, 5000));
  sdk::TcpConnector connector;
  expectConnectTimesOut(bound, connector);
  EXPECT_EQ(connector.attempts(), 1) << "one attempt, never answered: " << connector.error();
  close(filling);
  close(listener);
}

// A listener of this host that is gone, when the kernel picks its port as the connect's source port: the socket
// connects to itself (TCP's simultaneous open), and a peer waiting for the listener's answer read its own hello back
// and waited for the rest for ever, past the connect timeout. Made certain in a network namespace of its own whose
// ephemeral range is that one port (the listener's port 0 is taken from it too); the connect must fail as a refusal.
TEST(SocketConnector, ASocketConnectedToItselfIsARefusal) {
  if (geteuid() != 0) GTEST_SKIP() << "a network namespace needs root";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(out[0]);
    auto say = [&](const std::string& text) {
      (void)!write(out[1], text.data(), text.size());
      _exit(0);
    };
    if (unshare(CLONE_NEWNET) != 0) say(std::string("skip: unshare(CLONE_NEWNET): ") + std::strerror(errno));
    if (std::system("ip link set lo up") != 0) say("skip: ip link set lo up failed");
    std::ofstream("/proc/sys/net/ipv4/ip_local_port_range") << "40001 40001\n";
    std::string error;
    sdk::SocketAddress bound{};
    int listener = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 1, &bound, &error);
    if (listener < 0) say("error: listen: " + error);
    if (bound.port() != 40001) say("skip: the listener got port " + std::to_string(bound.port()) + ", not 40001");
    close(listener);
    sdk::TcpConnector connector;
    connector.start(bound, sdk::SocketAddress{}, std::chrono::milliseconds(500), std::chrono::milliseconds(20));
    sdk::IoStatus status;
    auto start = Clock::now();
    do {
      status = connector.progress();
    } while (status == sdk::IoStatus::kWouldBlock && Clock::now() - start < std::chrono::seconds(5));
    say(status == sdk::IoStatus::kDone     ? std::string("connected")
        : status == sdk::IoStatus::kFailed ? "failed: " + connector.error()
                                           : std::string("still connecting after 5 s"));
  }
  close(out[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) said.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (said.rfind("skip: ", 0) == 0) GTEST_SKIP() << said.substr(6);
  EXPECT_EQ(said.rfind("failed: ", 0), 0u) << said;
  EXPECT_NE(said.find("connected the socket to itself"), std::string::npos) << said;
}

// Out of descriptors, no socket is opened: the connect fails at once, as this host's failure (a plugin returns
// ncclSystemError for it, not ncclRemoteError with a hint about the peer's address).
TEST(SocketConnector, NoSocketIsAFailureOfThisHost) {
  std::string error;
  sdk::SocketAddress bound{};
  int listener = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 1, &bound, &error);
  ASSERT_GE(listener, 0) << error;
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  rlimit none = limit;
  none.rlim_cur = 0;  // no new descriptor at all: EMFILE
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
  sdk::TcpConnector connector;
  connector.start(bound, sdk::SocketAddress{}, std::chrono::seconds(10), std::chrono::milliseconds(20));
  const sdk::IoStatus status = connector.progress();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(status, sdk::IoStatus::kFailed);
  EXPECT_TRUE(connector.failedHere());
  EXPECT_NE(connector.error().find("Too many open files"), std::string::npos) << connector.error();
  // Started again, the flag is cleared with the rest.
  connector.start(bound, sdk::SocketAddress{}, std::chrono::seconds(10), std::chrono::milliseconds(20));
  EXPECT_FALSE(connector.failedHere());
  close(listener);
}

volatile sig_atomic_t gAlarms = 0;
void countAlarm(int) {
  gAlarms = gAlarms + 1;
}

// A signal caught while a connect is still pending (a profiler's SIGPROF, a timer) makes poll() return EINTR, even
// with no timeout and SA_RESTART: that is no answer from the socket. It was taken for the connect's error ("connect:
// Interrupted system call"), which is not retryable, and failed the plugin's connect (ncclRemoteError for NCCL).
TEST(SocketConnector, ASignalWhileTheConnectIsPendingIsNotItsFailure) {
  std::string error;
  sdk::SocketAddress bound{};
  int listener = sdk::listenTcp(sdk::SocketAddress::loopback(AF_INET), 0, &bound, &error);
  ASSERT_GE(listener, 0) << error;
  // The accept queue filled (nothing accepts): a further connect's SYN is dropped, and that connect stays pending.
  std::vector<int> filling;
  for (int i = 0; i < 4; ++i) {
    int fd = sdk::openTcpSocket(AF_INET, &error);
    ASSERT_GE(fd, 0) << error;
    (void)::connect(fd, bound.get(), bound.length());
    filling.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  struct sigaction alarm {
  }, before{};
  alarm.sa_handler = countAlarm;
  sigemptyset(&alarm.sa_mask);
  alarm.sa_flags = 0;  // no SA_RESTART (poll is never restarted anyway)
  ASSERT_EQ(sigaction(SIGALRM, &alarm, &before), 0);
  itimerval every{{0, 50}, {0, 50}}, off{};
  ASSERT_EQ(setitimer(ITIMER_REAL, &every, nullptr), 0);
  sdk::TcpConnector connector;
  connector.start(bound, sdk::SocketAddress{}, std::chrono::seconds(30), std::chrono::milliseconds(50));
  sdk::IoStatus status = sdk::IoStatus::kWouldBlock;
  const int alarmsBefore = gAlarms;
  for (auto end = Clock::now() + std::chrono::milliseconds(300);
       status == sdk::IoStatus::kWouldBlock && Clock::now() < end;)
    status = connector.progress();
  setitimer(ITIMER_REAL, &off, nullptr);
  sigaction(SIGALRM, &before, nullptr);
  const int alarms = gAlarms - alarmsBefore;
  EXPECT_NE(status, sdk::IoStatus::kFailed) << connector.error() << " (" << alarms << " signals)";
  EXPECT_GT(alarms, 10) << "the timer did not interrupt the connect's polls";
  connector.reset();
  for (int fd : filling) close(fd);
  close(listener);
}

TEST(SocketIo, PartialProgressThenEndOfStream) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  const char message[] = "0123456789";
  iovec parts[2] = {{const_cast<char*>(message), 4}, {const_cast<char*>(message) + 4, 6}};
  size_t sent = 0;
  int error = 0;
  ASSERT_EQ(sdk::sendSomeGather(pair[0], parts, 2, &sent, &error), sdk::IoStatus::kDone);
  EXPECT_EQ(sent, 10u);
  char buffer[16] = {};
  size_t received = 0;
  EXPECT_EQ(sdk::recvSome(pair[1], buffer, 16, &received, &error), sdk::IoStatus::kWouldBlock);
  EXPECT_EQ(received, 10u);
  EXPECT_EQ(std::string(buffer, 10), "0123456789");
  close(pair[0]);
  EXPECT_EQ(sdk::recvSome(pair[1], buffer, 16, &received, &error), sdk::IoStatus::kClosed);
  size_t offset = 0;
  EXPECT_EQ(sdk::sendSome(pair[1], message, 10, &offset, &error), sdk::IoStatus::kFailed);
  EXPECT_EQ(error, EPIPE) << "no SIGPIPE, an error instead";
  close(pair[1]);
}

TEST(SocketIo, ScatteredReceiveFillsEachPartInStreamOrder) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, pair), 0);
  char head[2] = {}, body[5] = {}, tail[3] = {};
  iovec parts[4] = {{head, 2}, {nullptr, 0}, {body, 5}, {tail, 3}};  // a zero-length part is skipped
  size_t received = 0;
  int error = 0;
  ASSERT_EQ(write(pair[0], "abc", 3), 3);
  EXPECT_EQ(sdk::recvSomeScatter(pair[1], parts, 4, &received, &error), sdk::IoStatus::kWouldBlock);
  EXPECT_EQ(received, 3u) << "what has arrived is taken, across the first part's end";
  ASSERT_EQ(write(pair[0], "defghijk", 8), 8);
  EXPECT_EQ(sdk::recvSomeScatter(pair[1], parts, 4, &received, &error), sdk::IoStatus::kDone);
  EXPECT_EQ(received, 10u);
  EXPECT_EQ(std::string(head, 2), "ab");
  EXPECT_EQ(std::string(body, 5), "cdefg");
  EXPECT_EQ(std::string(tail, 3), "hij");
  // The byte after the parts stays in the stream for the next read.
  char next = 0;
  size_t one = 0;
  EXPECT_EQ(sdk::recvSome(pair[1], &next, 1, &one, &error), sdk::IoStatus::kDone);
  EXPECT_EQ(next, 'k');
  close(pair[0]);
  received = 0;
  EXPECT_EQ(sdk::recvSomeScatter(pair[1], parts, 4, &received, &error), sdk::IoStatus::kClosed);
  close(pair[1]);
}

}  // namespace
