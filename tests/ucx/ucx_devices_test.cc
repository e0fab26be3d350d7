// ucx_devices_test.cc: nns-ucx device discovery: parsing UCX's resource list, and what UCX_TLS/UCX_NET_DEVICES select.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ucx_devices.hpp"

namespace {

// Verbatim shape of ucp_context_print_info() in UCX 1.13.1.
constexpr const char kPrinted[] =
    "#\n# UCP context\n#\n#     component 0  :  self\n#     component 1  :  tcp\n"
    "#            md 0  :  component 0  self \n#            md 1  :  component 1  tcp \n#\n"
    "#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
    "#      resource 1  :  md 1  dev 1  flags -- tcp/lo\n"
    "#      resource 2  :  md 1  dev 2  flags -- tcp/eth0\n"
    "#      resource 3  :  md 2  dev 3  flags -- rc_mlx5/mlx5_0:1\n"
    "#      resource 4  :  md 3  dev 4  flags -- posix/memory\n#\n";

TEST(UcxDevices, ParsesEveryResourceLine) {
  auto resources = nns_ucx::parseResources(kPrinted);
  ASSERT_EQ(resources.size(), 5u);
  EXPECT_EQ(resources[0], std::make_pair(std::string("self"), std::string("memory0")));
  EXPECT_EQ(resources[2], std::make_pair(std::string("tcp"), std::string("eth0")));
  EXPECT_EQ(resources[3], std::make_pair(std::string("rc_mlx5"), std::string("mlx5_0:1")));
  EXPECT_TRUE(nns_ucx::parseResources("garbage\n# resource 1 : no dashes\n").empty());
}

// A resource line cut off after the transport's slash, or with nothing before it, names no device: it is skipped, not
// offered as a device with an empty name (NCCL keys NICs by name) or one named after the transport.
TEST(UcxDevices, AResourceLineNamingNoDeviceIsSkipped) {
  auto resources = nns_ucx::parseResources(
      "#      resource 1  :  md 1  dev 1  flags -- tcp/\n"
      "#      resource 2  :  md 1  dev 2  flags -- tcp/  \n"
      "#      resource 3  :  md 1  dev 3  flags -- /eth0\n"
      "#      resource 4  :  md 1  dev 4  flags -- tcp/eth1\n");
  ASSERT_EQ(resources.size(), 1u);
  EXPECT_EQ(resources[0], std::make_pair(std::string("tcp"), std::string("eth1")));
}

// A RoCE port listed by UCX twice, as rc_mlx5/mlx5_0:1 and as tcp/eth2 (its Ethernet port, the same PCI function), is
// one NIC; the management interface and a second adapter's port stay; an interface named in UCX_NET_DEVICES stays.
TEST(UcxDevices, AnRdmaPortSeenThroughTcpIsOneDevice) {
  auto device = [](const char* name, const char* pciPath, bool rdma) {
    nns_ucx::UcxDevice d;
    d.name = name;
    d.pciPath = pciPath;
    d.rdma = rdma;
    return d;
  };
  std::vector<nns_ucx::UcxDevice> devices{device("eth0", "/sys/devices/pci0000:00/0000:00:03.0", false),
                                          device("eth2", "/sys/devices/pci0000:80/0000:81:00.0", false),
                                          device("mlx5_0:1", "/sys/devices/pci0000:80/0000:81:00.0", true),
                                          device("ib1", "/sys/devices/pci0000:c0/0000:c1:00.0", false),
                                          device("lo", "", false)};
  auto dropped = nns_ucx::dropTcpViewsOfRdmaPorts(devices, {"all"});
  EXPECT_EQ(dropped, std::vector<std::string>{"eth2"});
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[0].name, "eth0");
  EXPECT_EQ(devices[1].name, "mlx5_0:1");
  EXPECT_EQ(devices[2].name, "ib1");  // no RDMA device of its own listed: a NIC in its own right
  devices.insert(devices.begin() + 1, device("eth2", "/sys/devices/pci0000:80/0000:81:00.0", false));
  EXPECT_TRUE(nns_ucx::dropTcpViewsOfRdmaPorts(devices, {"mlx5_0:1", "eth2"}).empty());
  EXPECT_EQ(devices.size(), 5u);
}

// Loopback and container bridges are not NICs (NCCL's interface choice passes over ^docker,lo): left out beside a
// real interface, kept when named in UCX_NET_DEVICES or when nothing else is listed. docker0 was offered as a NIC.
TEST(UcxDevices, LoopbackAndContainerBridgesAreNotNics) {
  auto named = [](std::initializer_list<const char*> names) {
    std::vector<nns_ucx::UcxDevice> devices;
    for (const char* name : names) {
      devices.emplace_back();
      devices.back().name = name;
    }
    return devices;
  };
  auto names = [](const std::vector<nns_ucx::UcxDevice>& devices) {
    std::vector<std::string> out;
    for (const auto& d : devices) out.push_back(d.name);
    return out;
  };
  auto devices = named({"lo", "docker0", "eth0", "docker_gwbridge", "mlx5_0:1"});
  EXPECT_EQ(nns_ucx::dropHostOnlyInterfaces(devices, {"all"}),
            (std::vector<std::string>{"lo", "docker0", "docker_gwbridge"}));
  EXPECT_EQ(names(devices), (std::vector<std::string>{"eth0", "mlx5_0:1"}));
  devices = named({"lo", "docker0", "eth0"});
  EXPECT_EQ(nns_ucx::dropHostOnlyInterfaces(devices, {"docker0", "eth0"}), std::vector<std::string>{"lo"});
  EXPECT_EQ(names(devices), (std::vector<std::string>{"docker0", "eth0"}));
  devices = named({"lo", "docker0"});  // nothing else: both stay, as NCCL falls back to them
  EXPECT_TRUE(nns_ucx::dropHostOnlyInterfaces(devices, {"all"}).empty());
  EXPECT_EQ(devices.size(), 2u);
}

// Each environment is set before the first UCX call in a fresh gtest process (gtest_discover_tests runs every test in
// its own process), so UCX reads it as a plugin would.
TEST(UcxDevices, TcpOnLoopbackGivesLo) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  std::string error;
  auto devices = nns_ucx::discoverDevices(1234, &error);
  ASSERT_EQ(devices.size(), 1u) << error;
  EXPECT_EQ(devices[0].name, "lo");
  EXPECT_FALSE(devices[0].sharedMemory);
  EXPECT_FALSE(devices[0].sharedMemoryTransports);
  EXPECT_TRUE(devices[0].pciPath.empty());  // loopback is no PCI function
  EXPECT_GT(devices[0].speedMbps, 0);
  EXPECT_TRUE(devices[0].sideChannel.isLoopback());
}

TEST(UcxDevices, SharedMemoryOnlyGivesOneMemoryDevice) {
  setenv("UCX_TLS", "sm", 1);
  unsetenv("UCX_NET_DEVICES");
  std::string error;
  auto devices = nns_ucx::discoverDevices(1234, &error);
  ASSERT_EQ(devices.size(), 1u) << error;
  EXPECT_EQ(devices[0].name, "memory");
  EXPECT_TRUE(devices[0].sharedMemory);
  EXPECT_EQ(devices[0].speedMbps, 1234);
  EXPECT_FALSE(devices[0].transports.empty());
}

TEST(UcxDevices, SelfOnlyGivesNoDeviceAndSaysWhy) {
  setenv("UCX_TLS", "self", 1);
  std::string error;
  auto devices = nns_ucx::discoverDevices(1234, &error);
  EXPECT_TRUE(devices.empty());
  EXPECT_NE(error.find("UCX_TLS=self"), std::string::npos) << error;
}

// NNS_UCX_SIDE_IFNAME naming an interface that does not exist leaves every network device without a side channel:
// discovery fails and says why, naming the variable and its value, and does not fall back to a shared-memory-only
// "memory" device (init succeeded with only "memory" offered before, so NCCL would have gone on without the network).
TEST(UcxDevices, AMissingSideChannelInterfaceFailsInsteadOfFallingBackToMemory) {
  unsetenv("UCX_TLS");  // UCX's default: tcp and shared memory both selected
  unsetenv("UCX_NET_DEVICES");
  setenv("NNS_UCX_SIDE_IFNAME", "nns_no_such_if9", 1);
  std::string error;
  auto devices = nns_ucx::discoverDevices(1234, &error);
  for (const auto& device : devices) ADD_FAILURE() << "offered " << device.name;
  EXPECT_NE(error.find("NNS_UCX_SIDE_IFNAME=nns_no_such_if9"), std::string::npos) << error;
  EXPECT_NE(error.find("side channel"), std::string::npos) << error;
}

// The same variable naming an interface that exists changes nothing but where the side channel listens.
TEST(UcxDevices, ASideChannelInterfaceThatExistsIsUsed) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("NNS_UCX_SIDE_IFNAME", "lo", 1);
  std::string error;
  auto devices = nns_ucx::discoverDevices(1234, &error);
  ASSERT_EQ(devices.size(), 1u) << error;
  EXPECT_EQ(devices[0].name, "lo");
  EXPECT_TRUE(devices[0].sideChannel.isLoopback());
}

}  // namespace
