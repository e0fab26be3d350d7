// socket_wire_test.cc: the nns-socket plugin's receiver against a sender written here from the wire format
// (plugins/socket/socket_transport.hpp) instead of the plugin's own: frames it builds by hand arrive intact, and a
// stream that breaks the format (a header out of sequence, a lead of a whole unit, a peer gone in the middle of a
// pad) fails the receive with an error that says so, within the test's deadline, never delivering garbage.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../plugins/socket/socket_transport.hpp"
#include "plugin_harness.hpp"

namespace {

using namespace socket_test;
namespace wire = nns_socket;

bool writeAll(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    bytes += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

int connectTo(const nccl_net::sdk::SocketAddress& address) {
  const int fd = ::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, address.get(), address.length()) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

class SocketWire : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(startSender());
    ASSERT_NO_FATAL_FAILURE(openDataSockets());
  }

  // Listens, then opens the control socket and sends its hello; returns once the listener's Welcome arrived.
  void startSender() {
    net = plugin();
    ASSERT_NE(net, nullptr);
    ncclResult_t result;
    ctx = initPlugin(net, &result);
    ASSERT_EQ(result, ncclSuccess);
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    ASSERT_EQ(net->listen(ctx, 0, handle, &listenComm), ncclSuccess);
    wire::HandlePayload target{};
    ASSERT_EQ(wire::kHandleCodec.decode(handle, &target), ncclSuccess);

    // The control socket and its hello; the listener answers with a Welcome from within accept().
    listenId = target.listenId;
    control = connectTo(target.controlAddress);
    ASSERT_GE(control, 0) << std::strerror(errno);
    const wire::Hello hello{wire::kWireMagic, wire::kControlSocket, listenId, kSenderId, 0, 0};
    ASSERT_TRUE(writeAll(control, &hello, sizeof(hello)));
    size_t got = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (got < sizeof(welcome)) {
      ASSERT_LT(Clock::now(), deadline) << "no Welcome from the listener";
      ASSERT_EQ(accept(), ncclSuccess);
      pollfd readable{control, POLLIN, 0};
      if (poll(&readable, 1, 10) != 1) continue;
      const ssize_t n = ::recv(control, reinterpret_cast<char*>(&welcome) + got, sizeof(welcome) - got, 0);
      ASSERT_GT(n, 0) << "the listener closed the control socket";
      got += static_cast<size_t>(n);
    }
    ASSERT_EQ(welcome.magic, wire::kWireMagic);
    ASSERT_GE(welcome.inlineBytes, 100u) << "the frames below are built inline";
  }

  // Opens the data sockets the Welcome asked for and accepts until the listener made the comm.
  void openDataSockets() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (uint32_t i = 0; i < welcome.dataSockets; ++i) {
      const int fd = connectTo(welcome.addresses[0]);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      data.push_back(fd);
      const wire::Hello dataHello{wire::kWireMagic, wire::kDataSocket, listenId, kSenderId, i, 0};
      ASSERT_TRUE(writeAll(fd, &dataHello, sizeof(dataHello)));
    }
    while (recvComm == nullptr) {
      ASSERT_LT(Clock::now(), deadline) << "accept did not complete";
      ASSERT_EQ(accept(), ncclSuccess);
    }
  }

  void TearDown() override {
    if (recvComm != nullptr) {
      EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
    }
    if (listenComm != nullptr) {
      EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
    }
    if (control >= 0) close(control);
    for (int fd : data) close(fd);
  }

  // Accepts until `fd` reads the end of its stream (the listener closed its end), for up to `seconds`: true if it
  // did.
  bool closedByListener(int fd, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < deadline) {
      if (accept() != ncclSuccess) return false;
      pollfd readable{fd, POLLIN, 0};
      if (poll(&readable, 1, 20) != 1) continue;
      char byte;
      const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }

  ncclResult_t accept() {
    ncclNetDeviceHandle_v12_t* devHandle = nullptr;
    return recvComm != nullptr ? ncclSuccess : net->accept(listenComm, &recvComm, &devHandle);
  }

  // One control frame as the format lays it out: header, gap, inline payload, tail; `cut` stops after that many
  // bytes of it.
  bool sendFrame(const wire::MessageHeader& header, const unsigned char* payload, size_t cut = SIZE_MAX) {
    const wire::ControlFrame frame = wire::controlFrame(header, payload != nullptr);
    std::vector<unsigned char> bytes(sizeof(header) + frame.gap, 0);
    std::memcpy(bytes.data(), &header, sizeof(header));
    if (payload != nullptr) bytes.insert(bytes.end(), payload, payload + header.size);
    bytes.resize(bytes.size() + frame.tail, 0);
    return writeAll(control, bytes.data(), std::min(cut, bytes.size()));
  }

  // Posts one receive of `capacity` bytes for `tag` and tests it until it completes, fails, or 10 s pass.
  ncclResult_t receive(void* buffer, size_t capacity, int tag, int* size) {
    void* request = nullptr;
    void* buffers[1] = {buffer};
    size_t sizes[1] = {capacity};
    int tags[1] = {tag};
    ncclResult_t result = postRecv(net, recvComm, 1, buffers, sizes, tags, &request, std::chrono::seconds(10));
    if (result != ncclSuccess) return result;
    return waitRequest(net, request, size, std::chrono::seconds(10));
  }

  // A good inline message, sequence `sequence`, from a payload `lead` bytes past a unit: arrives intact.
  void expectDelivered(uint32_t sequence, uint32_t lead, size_t size) {
    std::vector<unsigned char> payload(size);
    for (size_t i = 0; i < size; ++i) payload[i] = patternByte(i, sequence);
    ASSERT_TRUE(sendFrame(wire::MessageHeader{size, 9, sequence, lead, {}}, size > 0 ? payload.data() : nullptr));
    std::vector<unsigned char> received(size + 1, 0xee);
    int got = -1;
    ASSERT_EQ(receive(received.data(), size + 1, 9, &got), ncclSuccess);
    EXPECT_EQ(got, static_cast<int>(size));
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), received.begin()));
    EXPECT_EQ(received[size], 0xee) << "a byte beyond the message was written";
  }

  // After a failure the comm stays failed: a further receive reports the error instead of waiting.
  void expectCommFailed() {
    unsigned char buffer[64];
    int got = -1;
    EXPECT_NE(receive(buffer, sizeof(buffer), 9, &got), ncclSuccess);
  }

  const ncclNet_v12_t* net = nullptr;
  void* ctx = nullptr;
  void* listenComm = nullptr;
  void* recvComm = nullptr;
  int control = -1;
  std::vector<int> data;
  wire::Welcome welcome{};
  uint64_t listenId = 0;
  static constexpr uint64_t kSenderId = 0x5e11de4;
};

// A sender that has its Welcome and then goes away (a connect given up half way: the host closed it, or the process
// died) before opening its data sockets. The listener's accept notices at its next call and closes the control
// socket, where it held it until NNS_SOCKET_CONNECT_TIMEOUT_MS (30 s) passed.
class SocketWireHalfConnected : public SocketWire {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(startSender()); }
};

TEST_F(SocketWireHalfConnected, ASenderGoneBeforeItsDataSocketsIsDroppedAtTheNextAccept) {
  ASSERT_GT(welcome.dataSockets, 0u) << "the default configuration has data sockets";
  ASSERT_EQ(::shutdown(control, SHUT_WR), 0);  // our FIN: the listener sees the end of the control stream
  ASSERT_EQ(accept(), ncclSuccess);
  EXPECT_EQ(recvComm, nullptr);
  // The listener closed its end: our control socket reads the end of its stream, not "would block".
  pollfd readable{control, POLLIN, 0};
  ASSERT_EQ(poll(&readable, 1, 2000), 1) << "the listener still holds the control socket of a sender that left";
  char byte;
  EXPECT_EQ(::recv(control, &byte, 1, 0), 0);
  EXPECT_TRUE(warnedAbout("closed its connection before opening all its data sockets"));
}

// Data sockets the listener must not take: one whose index is past the sockets the Welcome asked for (filed, it
// wrote past the sender's list), one with another listener's id (a stale connect that reached a new listener on the
// same port; filed, it took a real socket's place). Each is closed, said by name, and the sender's own data sockets
// still make its comm.
TEST_F(SocketWireHalfConnected, DataSocketsOfAnotherListenerOrPastTheWelcomesCountAreDroppedByName) {
  ASSERT_GT(welcome.dataSockets, 0u) << "the default configuration has data sockets";
  const int pastTheEnd = connectTo(welcome.addresses[0]);
  ASSERT_GE(pastTheEnd, 0) << std::strerror(errno);
  const wire::Hello pastHello{wire::kWireMagic, wire::kDataSocket, listenId, kSenderId, welcome.dataSockets, 0};
  ASSERT_TRUE(writeAll(pastTheEnd, &pastHello, sizeof(pastHello)));
  EXPECT_TRUE(closedByListener(pastTheEnd, 2)) << "a data socket past the Welcome's count was kept";
  EXPECT_TRUE(warnedAbout("out-of-range data socket index " + std::to_string(welcome.dataSockets)));
  close(pastTheEnd);

  const int stale = connectTo(welcome.addresses[0]);
  ASSERT_GE(stale, 0) << std::strerror(errno);
  const wire::Hello staleHello{wire::kWireMagic, wire::kDataSocket, listenId + 1, kSenderId, 0, 0};
  ASSERT_TRUE(writeAll(stale, &staleHello, sizeof(staleHello)));
  EXPECT_TRUE(closedByListener(stale, 2)) << "a data socket for another listener was kept";
  EXPECT_TRUE(warnedAbout("is not a connection for this listener"));
  close(stale);

  ASSERT_NO_FATAL_FAILURE(openDataSockets());
  EXPECT_NE(recvComm, nullptr);
}

// A sender that has its Welcome and stays connected, but never opens its data sockets (a peer stuck, or not this
// plugin): dropped once the connect timeout (2 s here) passes, where it held its socket until closeListen.
TEST_F(SocketWireHalfConnected, ASenderThatNeverOpensItsDataSocketsIsDroppedAtTheConnectTimeout) {
  ASSERT_GT(welcome.dataSockets, 0u) << "the default configuration has data sockets";
  const auto start = Clock::now();
  EXPECT_TRUE(closedByListener(control, 6)) << "the silent sender's control socket was kept";
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(seconds, 1.5);
  EXPECT_TRUE(warnedAbout("did not open all its data sockets within the connect timeout"));
  EXPECT_EQ(recvComm, nullptr);
}

// The positive control for the tests below: frames built here from the header's definition are read as the
// plugin's own, at several leads (so with gaps and tails of several lengths) and with an empty message.
TEST_F(SocketWire, FramesBuiltFromTheFormatArriveIntact) {
  expectDelivered(0, 0, 100);
  expectDelivered(1, 37, 100);
  expectDelivered(2, 63, 1);
  expectDelivered(3, 0, 0);
  expectDelivered(4, 32, 64);
}

TEST_F(SocketWire, AHeaderOutOfSequenceFailsTheReceiveAsACorruptStream) {
  expectDelivered(0, 0, 100);
  std::vector<unsigned char> payload(100, 0x11);
  ASSERT_TRUE(sendFrame(wire::MessageHeader{100, 9, 0, 0, {}}, payload.data()));  // sequence 0 again
  std::vector<unsigned char> received(100, 0xee);
  int got = -1;
  EXPECT_EQ(receive(received.data(), received.size(), 9, &got), ncclInternalError);
  EXPECT_TRUE(
      warnedAbout("message sequence 0 (payload lead 0) where 1 (lead below 64) was due: the stream is corrupt"));
  EXPECT_EQ(received, std::vector<unsigned char>(100, 0xee)) << "the corrupt message's bytes were delivered";
  expectCommFailed();
}

TEST_F(SocketWire, AHeaderWithALeadOfAWholeUnitFailsTheReceiveAsACorruptStream) {
  std::vector<unsigned char> payload(100, 0x22);
  // Built by hand: controlFrame() would give this header a gap the receiver never reads.
  const wire::MessageHeader header{100, 9, 0, static_cast<uint32_t>(wire::kWireAlign), {}};
  ASSERT_TRUE(writeAll(control, &header, sizeof(header)));
  ASSERT_TRUE(writeAll(control, payload.data(), payload.size()));
  std::vector<unsigned char> received(100, 0xee);
  int got = -1;
  EXPECT_EQ(receive(received.data(), received.size(), 9, &got), ncclInternalError);
  EXPECT_TRUE(warnedAbout("message sequence 0 (payload lead 64) where 0 (lead below 64) was due"));
  EXPECT_EQ(received, std::vector<unsigned char>(100, 0xee));
  expectCommFailed();
}

// A peer that goes away inside a frame's gap (before the payload) or inside its tail: the receive waiting on the
// stream fails, naming the closed connection.
TEST_F(SocketWire, APeerGoneInTheMiddleOfAGapFailsTheReceive) {
  std::vector<unsigned char> payload(100, 0x33);
  ASSERT_TRUE(sendFrame(wire::MessageHeader{100, 9, 0, 10, {}}, payload.data(), sizeof(wire::MessageHeader) + 5));
  close(control);
  control = -1;
  std::vector<unsigned char> received(100, 0xee);
  int got = -1;
  EXPECT_EQ(receive(received.data(), received.size(), 9, &got), ncclRemoteError);
  EXPECT_TRUE(warnedAbout("the peer closed the connection in the middle of a message"));
  EXPECT_EQ(received, std::vector<unsigned char>(100, 0xee));
}

TEST_F(SocketWire, APeerGoneInTheMiddleOfATailFailsTheReceive) {
  ASSERT_TRUE(sendFrame(wire::MessageHeader{0, 9, 0, 0, {}}, nullptr, sizeof(wire::MessageHeader) + 10));
  close(control);
  control = -1;
  unsigned char buffer[16];
  int got = -1;
  // The empty message is whole once its header is read, but the same progress call reads on into the tail.
  EXPECT_EQ(receive(buffer, sizeof(buffer), 9, &got), ncclRemoteError);
  EXPECT_TRUE(warnedAbout("the peer closed the connection in the middle of a message"));
}

}  // namespace

int main(int argc, char** argv) {
  // Read once by the plugin: loopback only, and a connect timeout a test can wait out.
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NNS_SOCKET_CONNECT_TIMEOUT_MS", "2000", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
