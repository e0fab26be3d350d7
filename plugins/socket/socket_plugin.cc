// socket_plugin.cc: the "nns-socket" NCCL net plugin: devices from network interfaces, vNIC fusion, non-blocking
// listen/connect/accept, and the ncclNet_v12 calls over the data path in socket_transport.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nccl_net/sdk.hpp>

#include "socket_transport.hpp"

namespace nns_socket {
namespace {

constexpr int kMaxPhysicalDevices = 64;
constexpr int kDefaultSpeedMbps = 10000;  // what NCCL assumes too when a link does not say
constexpr int kListenBacklog = 512;

// ---- devices
// ----------------------------------------------------------------------------------------------------------

struct Device {
  std::string name;                           // interface name, or "a+b" for a fused device
  std::vector<int> children;                  // physical devices behind it ({self} for a physical one)
  std::vector<sdk::SocketAddress> addresses;  // one per child
  std::string pciPath;                        // empty: virtual interface
  int speedMbps = kDefaultSpeedMbps;
  uint64_t guid = 0;
};

class DeviceTable {
 public:
  static DeviceTable& get() {
    static DeviceTable table;
    return table;
  }

  // Interfaces are chosen once per process, as NCCL does; NNS_SOCKET_IFNAME/FAMILY override NCCL's variables.
  void discoverOnce() {
    std::call_once(discovered_, [this] {
      // An empty override (`export NNS_SOCKET_IFNAME=`) is unset, as every other knob's empty value is: it must
      // not silently discard NCCL's variable.
      auto isSet = [](const char* name) {
        const char* value = std::getenv(name);
        return value != nullptr && *value != '\0';
      };
      // NCCL ignores an NCCL_SOCKET_IFNAME of one character (sdk::interfaceSpecGiven); ours is read the same way, so
      // such a value of ours does not hide NCCL's variable either.
      const char* ours = std::getenv("NNS_SOCKET_IFNAME");
      const char* nccls = std::getenv("NCCL_SOCKET_IFNAME");
      const char* ifnameVariable = sdk::interfaceSpecGiven(ours) ? "NNS_SOCKET_IFNAME" : "NCCL_SOCKET_IFNAME";
      if (isSet("NNS_SOCKET_IFNAME") && !sdk::interfaceSpecGiven(ours))
        NCCL_NET_WARN(
            "NNS_SOCKET_IFNAME=%s is ignored, as NCCL ignores a value of one character; %s", ours,
            sdk::interfaceSpecGiven(nccls) ? "using NCCL_SOCKET_IFNAME" : "choosing interfaces automatically");
      if (!sdk::interfaceSpecGiven(ours) && isSet("NCCL_SOCKET_IFNAME") && !sdk::interfaceSpecGiven(nccls))
        NCCL_NET_WARN(
            "NCCL_SOCKET_IFNAME=%s is ignored, as NCCL ignores a value of one character; choosing "
            "interfaces automatically",
            nccls);
      if (const char* spec = std::getenv(ifnameVariable);
          sdk::interfaceSpecGiven(spec) && sdk::InterfaceFilter(spec).names().empty())
        NCCL_NET_WARN("%s=%s names no interface: NCCL reads that as %s", ifnameVariable, spec,
                      sdk::InterfaceFilter(spec).excludes() ? "every interface excluded" : "every interface selected");
      const char* familyVariable = isSet("NNS_SOCKET_FAMILY") ? "NNS_SOCKET_FAMILY" : "NCCL_SOCKET_FAMILY";
      bool unknownFamily = false;
      sdk::socketFamilyFromEnv(familyVariable, &unknownFamily);
      if (unknownFamily)
        NCCL_NET_WARN("%s=%s is neither AF_INET nor AF_INET6; using both", familyVariable, std::getenv(familyVariable));
      auto interfaces = sdk::findInterfaces(ifnameVariable, familyVariable, kMaxPhysicalDevices);
      std::lock_guard<std::mutex> lock(mutex_);
      std::string list;
      for (const sdk::NetInterface& found : interfaces) {
        Device device;
        device.name = found.name;
        device.children = {static_cast<int>(devices_.size())};
        device.addresses = {found.address};
        device.pciPath = sdk::pciPathOfNetDevice(found.name);
        device.speedMbps = sdk::netDeviceSpeedMbps(found.name, kDefaultSpeedMbps);
        device.guid = devices_.size();
        list += " [" + std::to_string(devices_.size()) + "]" + found.name + ":" + found.address.toString();
        devices_.push_back(std::move(device));
      }
      const char* spec = std::getenv(ifnameVariable);
      if (devices_.empty()) {
        NCCL_NET_WARN("no usable network interface (%s=%s)", ifnameVariable, spec != nullptr ? spec : "<unset>");
      } else {
        NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "using%s", list.c_str());
      }
    });
  }

  int count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(devices_.size());
  }

  // A copy, so callers never race with makeVDevice growing the table. `stable` gets the entry's lasting storage
  // (a deque never moves its elements) for the name/pciPath pointers NCCL keeps.
  Device copy(int dev, const Device** stable = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stable != nullptr) *stable = &devices_[static_cast<size_t>(dev)];
    return devices_[static_cast<size_t>(dev)];
  }

  ncclResult_t addVirtual(const ncclNetVDeviceProps_v12_t& props, int* dev) {
    std::lock_guard<std::mutex> lock(mutex_);
    Device fused;
    fused.speedMbps = 0;
    for (int i = 0; i < props.ndevs; ++i) {
      const Device& child = devices_[static_cast<size_t>(props.devs[i])];
      if (child.children.size() != 1 || child.children[0] != props.devs[i]) {
        NCCL_NET_WARN("makeVDevice: device %d (%s) is itself virtual; fuse physical devices only", props.devs[i],
                      child.name.c_str());
        return ncclInternalError;
      }
      if (std::find(fused.children.begin(), fused.children.end(), props.devs[i]) != fused.children.end()) {
        NCCL_NET_WARN("makeVDevice: device %d listed twice", props.devs[i]);
        return ncclInternalError;
      }
      fused.name += (i == 0 ? "" : "+") + child.name;
      fused.children.push_back(props.devs[i]);
      fused.addresses.push_back(child.addresses[0]);
      fused.speedMbps += child.speedMbps;
      if (fused.pciPath.empty()) fused.pciPath = child.pciPath;  // NCCL places a vNIC where its first NIC is
    }
    fused.guid = 0x100000000ull + devices_.size();
    *dev = static_cast<int>(devices_.size());
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "virtual device %d = %s (%d Mbps)", *dev, fused.name.c_str(), fused.speedMbps);
    devices_.push_back(std::move(fused));
    return ncclSuccess;
  }

 private:
  std::once_flag discovered_;
  std::mutex mutex_;
  std::deque<Device> devices_;
};

// Seeded afresh in every process that draws: a forked child inherits its parent's generator state and would repeat
// the parent's ids, and a listener files data sockets by sender id alone, so a parent and its child connecting to one
// listener had their sockets mixed.
uint64_t randomId() {
  static std::mutex mutex;
  static std::mt19937_64 generator;
  static pid_t seededIn = 0;
  std::lock_guard<std::mutex> lock(mutex);
  const pid_t pid = getpid();
  if (pid != seededIn) {
    std::random_device device;
    const uint64_t seed = (static_cast<uint64_t>(device()) << 32) | device();
    generator.seed(seed ^ (static_cast<uint64_t>(pid) << 16));
    seededIn = pid;
  }
  uint64_t id = 0;
  while (id == 0) id = generator();
  return id;
}

// NNS_SOCKET_SNDBUF/RCVBUF go on the listening sockets, before any peer connects: accepted sockets inherit them and
// the receive window is scaled for them at the handshake. A receive buffer shrunk on an established connection
// leaves the window out of step with that scale, and transfers crawl at a few KiB per 200 ms.
void configureListeningSocket(int fd) {
  const Config& config = Config::get();
  sdk::setSocketBuffers(fd, config.sendBufferBytes, config.receiveBufferBytes);
}

// An accepted socket (buffers inherited from its listener) or a connected one (which only sends data: its send
// buffer may change at any time; its receive side carries no more than the listener's welcome).
void configureSocket(int fd, bool connected) {
  const Config& config = Config::get();
  std::string error;
  if (!sdk::setDeadPeerTimeout(fd, config.deadPeerTimeoutMs, &error))
    NCCL_NET_WARN("dead-peer detection on an idle connection is off: %s", error.c_str());
  if (connected) sdk::setSocketBuffers(fd, config.sendBufferBytes, 0);
}

// ---- listen side
// --------------------------------------------------------------------------------------------------------

// A socket accepted but not yet identified by its Hello.
struct IncomingSocket {
  int fd;
  sdk::SocketAddress peer;
  Hello hello;
  size_t helloOffset;
  Clock::time_point since;
};

// A sender whose control socket arrived; complete once the Welcome is written and all its data sockets arrived.
struct PendingSender {
  uint64_t senderId;
  int controlFd;
  sdk::SocketAddress peer;
  Welcome welcome;
  size_t welcomeOffset;
  std::vector<int> dataFds;  // -1 until that index arrives
  Clock::time_point since;
};

struct ListenComm {
  uint64_t listenId;
  int dev;
  std::vector<int> listenFds;  // one per child interface
  Welcome welcome;             // what every sender is told
  std::vector<IncomingSocket> incoming;
  std::vector<PendingSender> senders;
};

void closeIfOpen(int fd) {
  if (fd >= 0) close(fd);
}

// ---- connect side
// -------------------------------------------------------------------------------------------------------

struct PendingConnect {
  enum class Phase { kControl, kWelcome, kData } phase = Phase::kControl;
  HandlePayload target{};
  Device device;
  uint64_t senderId = 0;
  Clock::time_point deadline{};
  sdk::TcpConnector control;
  int controlFd = -1;
  Hello hello{};
  size_t helloOffset = 0;
  Welcome welcome{};
  size_t welcomeOffset = 0;
  std::vector<std::unique_ptr<sdk::TcpConnector>> data;
  std::vector<int> dataFds;
  std::vector<Hello> dataHellos;
  std::vector<size_t> dataHelloOffsets;

  ~PendingConnect() {
    closeIfOpen(controlFd);
    for (int fd : dataFds) closeIfOpen(fd);
  }
};
using ConnectStage = sdk::ConnectStage<PendingConnect>;

// Writes / reads the fixed-size `message` on a non-blocking socket; *error set on failure.
template <class Message>
sdk::IoStatus sendMessage(int fd, const Message& message, size_t* offset, std::string* error) {
  return sdk::sendSome(fd, &message, sizeof(message), offset, error);
}
template <class Message>
sdk::IoStatus recvMessage(int fd, Message* message, size_t* offset, std::string* error) {
  return sdk::recvSome(fd, message, sizeof(*message), offset, error);
}
using sdk::failed;

}  // namespace

// ---- the plugin class
// ---------------------------------------------------------------------------------------------------
class SocketNet {
 public:
  // Not "Socket": that is NCCL's internal transport, and NCCL_NET= selects by name.
  static constexpr const char kName[] = "nns-socket";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/nns-socket");
    DeviceTable::get().discoverOnce();
    const Config& config = Config::get();
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET,
                  "ncclNet_v%d; %d helper thread(s) (%d usable CPUs%s%s) x %d data socket(s)%s%s, inline <= %zu B, "
                  "dead-peer timeout %d ms",
                  args.abiVersion, config.helperThreads, config.usableCpus,
                  std::getenv(config.threadsVariable) != nullptr ? ", " : "",
                  std::getenv(config.threadsVariable) != nullptr ? config.threadsVariable : "", config.socketsPerThread,
                  std::getenv(config.socketsVariable) != nullptr ? " per thread, " : "",
                  std::getenv(config.socketsVariable) != nullptr ? config.socketsVariable : "", config.inlineBytes,
                  config.deadPeerTimeoutMs);
    *ctx = nullptr;  // no per-communicator state
    if (DeviceTable::get().count() == 0) return ncclSystemError;
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    *ndev = DeviceTable::get().count();
    return ncclSuccess;
  }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    const Device* stable = nullptr;
    Device device = DeviceTable::get().copy(dev, &stable);
    props->name = const_cast<char*>(stable->name.c_str());
    props->pciPath = stable->pciPath.empty() ? nullptr : const_cast<char*>(stable->pciPath.c_str());
    props->guid = device.guid;
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = device.speedMbps;
    props->port = 0;
    props->latency = 0;
    props->maxComms = 65536;
    props->maxRecvs = Config::get().maxRecvs;
    props->vProps.ndevs = static_cast<int>(device.children.size());
    for (size_t i = 0; i < device.children.size(); ++i) props->vProps.devs[i] = device.children[i];
    return ncclSuccess;
  }

  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
    return DeviceTable::get().addVirtual(*props, d);
  }

  ncclResult_t listen(void* /*ctx*/, int dev, void* handle, void** listenComm) {
    Device device = DeviceTable::get().copy(dev);
    const Config& config = Config::get();
    auto listener = std::make_unique<ListenComm>();
    listener->listenId = randomId();
    listener->dev = dev;
    Welcome& welcome = listener->welcome;
    std::memset(&welcome, 0, sizeof(welcome));
    welcome.magic = kWireMagic;
    // Every child interface needs at least one data socket for the traffic to be striped over all of them.
    int children = static_cast<int>(device.children.size());
    int sockets = config.dataSockets();
    if (children > 1 && sockets < children) sockets = children;
    welcome.dataSockets = static_cast<uint32_t>(sockets);
    welcome.inlineBytes = config.inlineBytes;
    welcome.minChunkBytes = config.minChunkBytes;
    welcome.addressCount = static_cast<uint32_t>(children);
    for (int i = 0; i < children; ++i) {
      std::string error;
      sdk::SocketAddress bound{};
      int fd = sdk::listenTcp(device.addresses[static_cast<size_t>(i)], kListenBacklog, &bound, &error);
      if (fd < 0) {
        NCCL_NET_WARN("listen on device %d (%s): %s", dev, device.name.c_str(), error.c_str());
        for (int open : listener->listenFds) close(open);
        return ncclSystemError;
      }
      configureListeningSocket(fd);
      listener->listenFds.push_back(fd);
      welcome.addresses[i] = bound;
    }
    HandlePayload payload{};  // zeroed padding too: the handle's bytes go to the peer as they are
    payload.listenId = listener->listenId;
    payload.controlAddress = welcome.addresses[0];
    NCCL_NET_CHECK(kHandleCodec.encode(payload, handle));
    NCCL_NET_INFO(NCCL_NET, "listening on %s (device %d %s, %d data socket(s))",
                  welcome.addresses[0].toString().c_str(), dev, device.name.c_str(), sockets);
    *listenComm = listener.release();
    return ncclSuccess;
  }

  ncclResult_t connect(void* /*ctx*/, int dev, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v12_t** /*sendDevComm*/) {
    PendingConnect* pending = ConnectStage::get(handle);
    if (pending == nullptr) {
      auto fresh = std::make_unique<PendingConnect>();
      NCCL_NET_CHECK(kHandleCodec.decode(handle, &fresh->target));
      if (!fresh->target.controlAddress.valid()) {
        NCCL_NET_WARN("connect: the handle carries no valid address");
        return ncclInternalError;
      }
      const Config& config = Config::get();
      fresh->device = DeviceTable::get().copy(dev);
      fresh->senderId = randomId();
      fresh->deadline = Clock::now() + std::chrono::milliseconds(config.connectTimeoutMs);
      fresh->control.start(fresh->target.controlAddress, fresh->device.addresses[0],
                           std::chrono::milliseconds(config.connectTimeoutMs),
                           std::chrono::milliseconds(config.retryIntervalMs));
      fresh->hello = Hello{kWireMagic, kControlSocket, fresh->target.listenId, fresh->senderId, 0, 0};
      pending = ConnectStage::adopt(handle, std::move(fresh));  // the SDK frees it if the host gives this connect up
    }
    ncclResult_t result = ncclSuccess;
    try {
      result = progressConnect(pending, sendComm);
    } catch (const std::exception& e) {  // the comm's helper threads could not start: give up this connect cleanly
      NCCL_NET_WARN("connect to %s: making the comm: %s", pending->target.controlAddress.toString().c_str(), e.what());
      result = ncclSystemError;
    }
    if (result != ncclSuccess || *sendComm != nullptr) ConnectStage::take(handle);  // and delete it
    return result;
  }

  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** /*recvDevComm*/) {
    auto* listener = static_cast<ListenComm*>(listenComm);
    const auto timeout = std::chrono::milliseconds(Config::get().connectTimeoutMs);
    for (int fd : listener->listenFds) {
      for (;;) {
        IncomingSocket socket{-1, {}, {}, 0, Clock::now()};
        std::string error;
        sdk::IoStatus status = sdk::acceptTcp(fd, &socket.fd, &socket.peer, &error);
        if (status == sdk::IoStatus::kWouldBlock) break;
        if (status != sdk::IoStatus::kDone) {
          NCCL_NET_WARN("accept on %s: %s", listener->welcome.addresses[0].toString().c_str(), error.c_str());
          return ncclSystemError;
        }
        configureSocket(socket.fd, false);
        listener->incoming.push_back(socket);
      }
    }
    identifyIncoming(listener, timeout);
    return finishSender(listener, timeout, recvComm);
  }

  ncclResult_t regMr(void* /*comm*/, void* /*data*/, size_t /*size*/, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST) {
      NCCL_NET_WARN("regMr: memory type %d is not supported; this plugin moves host memory only", type);
      return ncclInternalError;
    }
    // TCP needs no registration; NCCL only needs a non-NULL handle to pass back.
    static int hostMemory = NCCL_PTR_HOST;
    *mhandle = &hostMemory;
    return ncclSuccess;
  }
  ncclResult_t deregMr(void* /*comm*/, void* /*mhandle*/) { return ncclSuccess; }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* /*mhandle*/, void* /*phandle*/,
                     void** request) {
    return static_cast<SendComm*>(sendComm)->post(data, size, tag, request);
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** /*mhandles*/,
                     void** /*phandles*/, void** request) {
    return static_cast<RecvComm*>(recvComm)->post(n, data, sizes, tags, request);
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    auto* header = static_cast<RequestHeader*>(request);
    if (header->magic != RequestHeader::kLiveMagic) {
      NCCL_NET_WARN("test: %p is not a live request of this plugin", request);
      return ncclInternalError;
    }
    if (header->isSend) {
      auto* comm = static_cast<SendComm*>(header->comm);
      if (!comm->owns(request)) return foreignRequest(request);
      return comm->test(static_cast<SendRequest*>(request), done, sizes);
    }
    auto* comm = static_cast<RecvComm*>(header->comm);
    if (!comm->owns(request)) return foreignRequest(request);
    return comm->test(static_cast<RecvRequest*>(request), done, sizes);
  }

  ncclResult_t closeSend(void* sendComm) {
    delete static_cast<SendComm*>(sendComm);
    return ncclSuccess;
  }
  ncclResult_t closeRecv(void* recvComm) {
    delete static_cast<RecvComm*>(recvComm);
    return ncclSuccess;
  }
  ncclResult_t closeListen(void* listenComm) {
    auto* listener = static_cast<ListenComm*>(listenComm);
    for (int fd : listener->listenFds) close(fd);
    for (IncomingSocket& socket : listener->incoming) close(socket.fd);
    for (PendingSender& sender : listener->senders) {
      closeIfOpen(sender.controlFd);
      for (int fd : sender.dataFds) closeIfOpen(fd);
    }
    delete listener;
    return ncclSuccess;
  }

 private:
  static ncclResult_t foreignRequest(void* request) {
    NCCL_NET_WARN("test: %p is not a live request of its comm (already completed?)", request);
    return ncclInternalError;
  }

  // `here`: the failure was on this host (no socket could be opened), not on the way to the peer.
  static ncclResult_t connectFailed(PendingConnect* pending, const std::string& what, bool here = false) {
    if (here) {
      NCCL_NET_WARN("connect to %s failed on this host: %s", pending->target.controlAddress.toString().c_str(),
                    what.c_str());
      return ncclSystemError;
    }
    // A loopback address in the handle reaches the peer only on its own host: say so, since across hosts the
    // symptom is a refused or silent connect to this host's own loopback. Not once something answered there.
    const char* hint = pending->target.controlAddress.isLoopback() && pending->phase == PendingConnect::Phase::kControl
                           ? " (a loopback address: the peer listens on lo, which reaches it only from its own host; "
                             "across hosts give every rank an interface the others can reach, NCCL_SOCKET_IFNAME)"
                           : "";
    NCCL_NET_WARN("connect to %s failed: %s%s", pending->target.controlAddress.toString().c_str(), what.c_str(), hint);
    return ncclRemoteError;
  }

  static ncclResult_t progressConnect(PendingConnect* p, void** sendComm) {
    std::string error;
    // The timeout bounds the TCP connects (a listener gone or unreachable), not the wait for the welcome: the
    // listener sends it from its accept(), which a live peer may call much later (NCCL's ranks reach their accepts
    // after their own set-up, and lazily at a first collective). A peer that dies or closes its listenComm meanwhile
    // closes the control socket, which ends the wait.
    if (p->phase != PendingConnect::Phase::kWelcome && Clock::now() > p->deadline) {
      std::string last = p->control.error().empty() ? "" : "; last error: " + p->control.error();
      return connectFailed(p, "not connected within " + std::to_string(Config::get().connectTimeoutMs) +
                                  " ms (NNS_SOCKET_CONNECT_TIMEOUT_MS)" + last);
    }
    if (p->phase == PendingConnect::Phase::kControl) {
      if (p->controlFd < 0) {
        sdk::IoStatus status = p->control.progress();
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) return connectFailed(p, p->control.error(), p->control.failedHere());
        p->controlFd = p->control.release();
        configureSocket(p->controlFd, true);
      }
      sdk::IoStatus status = sendMessage(p->controlFd, p->hello, &p->helloOffset, &error);
      if (failed(status)) return connectFailed(p, "sending hello: " + error);
      if (status != sdk::IoStatus::kDone) return ncclSuccess;
      p->phase = PendingConnect::Phase::kWelcome;
    }
    if (p->phase == PendingConnect::Phase::kWelcome) {
      sdk::IoStatus status = recvMessage(p->controlFd, &p->welcome, &p->welcomeOffset, &error);
      if (failed(status)) return connectFailed(p, "waiting for the listener's answer: " + error);
      if (status != sdk::IoStatus::kDone) return ncclSuccess;
      const Welcome& w = p->welcome;
      if (w.magic != kWireMagic || w.dataSockets > kMaxDataSockets || w.addressCount < 1 ||
          w.addressCount > kMaxDeviceChildren || w.minChunkBytes == 0) {
        return connectFailed(p, "the listener answered with a malformed welcome (another plugin version?)");
      }
      const Config& config = Config::get();
      // The data sockets' connects get the whole timeout again, from the welcome.
      const auto remaining = std::chrono::milliseconds(config.connectTimeoutMs);
      p->deadline = Clock::now() + remaining;
      size_t localCount = p->device.addresses.size();
      for (uint32_t i = 0; i < w.dataSockets; ++i) {
        auto connector = std::make_unique<sdk::TcpConnector>();
        // Socket i leaves through local child i and lands on remote child i: fused devices stripe over all links.
        connector->start(w.addresses[i % w.addressCount], p->device.addresses[i % localCount], remaining,
                         std::chrono::milliseconds(config.retryIntervalMs));
        p->data.push_back(std::move(connector));
        p->dataFds.push_back(-1);
        p->dataHellos.push_back(Hello{kWireMagic, kDataSocket, p->target.listenId, p->senderId, i, 0});
        p->dataHelloOffsets.push_back(0);
      }
      p->phase = PendingConnect::Phase::kData;
    }
    // The listener says nothing more after its welcome: a close (it gave up on us, closed its listenComm or died)
    // or an error on the control socket ends the connect now; its data ports would only refuse us until the timeout.
    char byte;
    ssize_t got = recv(p->controlFd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got == 0) return connectFailed(p, "the listener closed the connection before all data sockets were open");
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return connectFailed(p, "control socket: " + sdk::errnoText(errno));
    if (got > 0) return connectFailed(p, "unexpected bytes from the listener after its welcome");
    bool allDone = true;
    for (size_t i = 0; i < p->data.size(); ++i) {
      if (p->dataFds[i] < 0) {
        sdk::IoStatus status = p->data[i]->progress();
        if (status == sdk::IoStatus::kWouldBlock) {
          allDone = false;
          continue;
        }
        if (status != sdk::IoStatus::kDone)
          return connectFailed(p, "data socket " + std::to_string(i) + ": " + p->data[i]->error(),
                               p->data[i]->failedHere());
        p->dataFds[i] = p->data[i]->release();
        configureSocket(p->dataFds[i], true);
      }
      sdk::IoStatus status = sendMessage(p->dataFds[i], p->dataHellos[i], &p->dataHelloOffsets[i], &error);
      if (failed(status)) return connectFailed(p, "data socket " + std::to_string(i) + " hello: " + error);
      if (status != sdk::IoStatus::kDone) allDone = false;
    }
    if (!allDone) return ncclSuccess;
    std::string peer = p->target.controlAddress.toString();
    auto* comm = new SendComm(p->controlFd, p->dataFds, p->welcome, peer);
    p->controlFd = -1;
    p->dataFds.clear();
    NCCL_NET_INFO(NCCL_NET, "connected to %s with %u data socket(s)", peer.c_str(), p->welcome.dataSockets);
    *sendComm = comm;
    return ncclSuccess;
  }

  // Reads the Hello of each accepted socket and files it under its sender; strangers are dropped with a WARN.
  static void identifyIncoming(ListenComm* listener, std::chrono::milliseconds timeout) {
    auto& incoming = listener->incoming;
    for (size_t i = 0; i < incoming.size();) {
      IncomingSocket& socket = incoming[i];
      std::string error;
      sdk::IoStatus status = recvMessage(socket.fd, &socket.hello, &socket.helloOffset, &error);
      std::string problem;
      if (failed(status)) {
        problem = "before identifying itself: " + error;
      } else if (status == sdk::IoStatus::kWouldBlock) {
        if (Clock::now() - socket.since > timeout) problem = "sent no hello within the connect timeout";
      } else if (socket.hello.magic != kWireMagic || socket.hello.listenId != listener->listenId) {
        problem = "is not a connection for this listener (wrong magic or listen id)";
      } else if (!fileSocket(listener, socket, &problem)) {
        // fileSocket explained why
      } else {
        incoming.erase(incoming.begin() + static_cast<long>(i));
        continue;
      }
      if (problem.empty()) {
        ++i;
        continue;
      }
      NCCL_NET_WARN("accept: dropping connection from %s: %s", socket.peer.toString().c_str(), problem.c_str());
      close(socket.fd);
      incoming.erase(incoming.begin() + static_cast<long>(i));
    }
  }

  static bool fileSocket(ListenComm* listener, const IncomingSocket& socket, std::string* problem) {
    const Hello& hello = socket.hello;
    if (hello.role == kControlSocket) {
      PendingSender sender{hello.senderId,    socket.fd, socket.peer,
                           listener->welcome, 0,         std::vector<int>(listener->welcome.dataSockets, -1),
                           Clock::now()};
      listener->senders.push_back(std::move(sender));
      return true;
    }
    for (PendingSender& sender : listener->senders) {
      if (sender.senderId != hello.senderId) continue;
      if (hello.role != kDataSocket || hello.dataIndex >= sender.dataFds.size() ||
          sender.dataFds[hello.dataIndex] >= 0) {
        *problem = "duplicate or out-of-range data socket index " + std::to_string(hello.dataIndex);
        return false;
      }
      sender.dataFds[hello.dataIndex] = socket.fd;
      return true;
    }
    *problem = "data socket for an unknown sender";
    return false;
  }

  // Why a sender that has its Welcome but not yet all its data sockets is gone ("" while it is not): it sends nothing
  // on its control socket before its comm is made, so a readable control socket means it closed it (a connect given
  // up half way) or the connection broke. Without this its sockets stayed until the connect timeout.
  static std::string senderGone(int controlFd) {
    char byte;
    const ssize_t n = ::recv(controlFd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return "closed its connection before opening all its data sockets";
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return std::string("its connection broke before it opened all its data sockets: ") + std::strerror(errno);
    return "";
  }

  // Completes at most one sender per call (NCCL wants one recvComm per accept).
  static ncclResult_t finishSender(ListenComm* listener, std::chrono::milliseconds timeout, void** recvComm) {
    auto& senders = listener->senders;
    for (size_t i = 0; i < senders.size();) {
      PendingSender& sender = senders[i];
      std::string error;
      sdk::IoStatus status = sendMessage(sender.controlFd, sender.welcome, &sender.welcomeOffset, &error);
      std::string problem;
      if (failed(status)) problem = "answering: " + error;
      bool complete = status == sdk::IoStatus::kDone &&
                      std::none_of(sender.dataFds.begin(), sender.dataFds.end(), [](int fd) { return fd < 0; });
      if (problem.empty() && status == sdk::IoStatus::kDone && !complete) problem = senderGone(sender.controlFd);
      if (problem.empty() && !complete && Clock::now() - sender.since > timeout)
        problem = "did not open all its data sockets within the connect timeout";
      if (!problem.empty()) {
        NCCL_NET_WARN("accept: dropping sender %s: %s", sender.peer.toString().c_str(), problem.c_str());
        closeIfOpen(sender.controlFd);
        for (int fd : sender.dataFds) closeIfOpen(fd);
        senders.erase(senders.begin() + static_cast<long>(i));
        continue;
      }
      if (!complete) {
        ++i;
        continue;
      }
      try {
        *recvComm = new RecvComm(sender.controlFd, sender.dataFds, sender.welcome, sender.peer.toString());
      } catch (const std::exception& e) {  // the comm's helper threads could not start: the sender is dropped
        NCCL_NET_WARN("accept: making the comm for %s: %s", sender.peer.toString().c_str(), e.what());
        closeIfOpen(sender.controlFd);
        for (int fd : sender.dataFds) closeIfOpen(fd);
        senders.erase(senders.begin() + static_cast<long>(i));
        return ncclSystemError;
      }
      NCCL_NET_INFO(NCCL_NET, "accepted %s with %zu data socket(s)", sender.peer.toString().c_str(),
                    sender.dataFds.size());
      senders.erase(senders.begin() + static_cast<long>(i));
      return ncclSuccess;
    }
    return ncclSuccess;
  }
};

}  // namespace nns_socket

NCCL_NET_SDK_EXPORT(nns_socket::SocketNet)
