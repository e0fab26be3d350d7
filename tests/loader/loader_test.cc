// loader_test.cc: the loader on real libraries: NCCL_NET_PLUGIN forms, newest-first probing, rejections with their
// reasons, and each old version's adapter filling the v12 view as NCCL does, with data moved through it.
#include <dlfcn.h>
#include <elf.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "nns/core/loader.hpp"

using namespace nns::core;

namespace {

const std::string kDir = NNS_PLUGIN_DIR;
using Clock = std::chrono::steady_clock;

LoadOptions inBuildTree(const std::string& plugin) {
  LoadOptions options;
  options.plugin = plugin;
  options.searchDirs = {kDir};
  return options;
}

std::string reasons(const LoadReport& report) {
  std::string text;
  for (const auto& c : report.candidates) text += c.requested + ": " + c.rejectReason + "\n";
  return text;
}

// Connects a send/recv pair of `net` in this process and moves `bytes`; returns the size test() reported.
int roundTrip(Net& net, void* ctx, size_t bytes) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  EXPECT_EQ(net.listen(ctx, 0, handle, &listenComm), ncclSuccess);
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while ((sendComm == nullptr || recvComm == nullptr) && Clock::now() < deadline) {
    if (sendComm == nullptr) {
      EXPECT_EQ(net.connect(ctx, 0, handle, &sendComm, nullptr), ncclSuccess);
    }
    if (recvComm == nullptr) {
      EXPECT_EQ(net.accept(listenComm, &recvComm, nullptr), ncclSuccess);
    }
  }
  if (sendComm == nullptr || recvComm == nullptr) return -1;
  std::vector<unsigned char> out(bytes, 0xab), in(bytes + 16, 0);
  void* sendRequest = nullptr;
  void* recvRequest = nullptr;
  void* data = in.data();
  size_t capacity = in.size();
  int tag = 5;
  while (sendRequest == nullptr) {
    EXPECT_EQ(net.isend(sendComm, out.data(), bytes, tag, nullptr, nullptr, &sendRequest), ncclSuccess);
  }
  while (recvRequest == nullptr) {
    EXPECT_EQ(net.irecv(recvComm, 1, &data, &capacity, &tag, nullptr, nullptr, &recvRequest), ncclSuccess);
  }
  int sendDone = 0, recvDone = 0, sendSize = -1, recvSize = -1;
  while ((!sendDone || !recvDone) && Clock::now() < deadline) {
    if (!sendDone) {
      EXPECT_EQ(net.test(sendRequest, &sendDone, &sendSize), ncclSuccess);
    }
    if (!recvDone) {
      EXPECT_EQ(net.test(recvRequest, &recvDone, &recvSize), ncclSuccess);
    }
  }
  EXPECT_TRUE(sendDone && recvDone);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
  net.closeSend(sendComm);
  net.closeRecv(recvComm);
  net.closeListen(listenComm);
  return recvSize;
}

}  // namespace

TEST(Resolution, NameBecomesLibNcclNetNameSo) {
  auto entries = pluginSpecEntries(inBuildTree("minimal"));
  ASSERT_EQ(entries.size(), 1u);
  LoadReport report;
  auto net = loadNet(inBuildTree("minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  EXPECT_EQ(net->path(), kDir + "/libnccl-net-minimal.so");
  EXPECT_EQ(report.candidates[0].openedFile, kDir + "/libnccl-net-minimal.so") << "the file the linker opened";
  ASSERT_EQ(report.candidates.size(), 1u);
  const auto& tried = report.candidates[0].triedPaths;
  EXPECT_EQ(tried.back(), kDir + "/libnccl-net-minimal.so") << "bare name first, then libnccl-net-NAME.so";
  EXPECT_EQ(report.candidates[0].exportedVersions, (std::vector<int>{12, 11, 10, 9, 8, 7, 6}));
  EXPECT_EQ(report.candidates[0].chosenVersion, 12) << "newest first";
}

TEST(Resolution, PathIsUsedAsIs) {
  LoadReport report;
  auto net = loadNet(inBuildTree(kDir + "/libnccl-net-minimal-v9.so"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_EQ(net->version(), 9);
  EXPECT_EQ(report.candidates[0].triedPaths.size(), 1u) << "a path is never rewritten";
}

TEST(Resolution, NoneMeansNoExternalPlugin) {
  EXPECT_TRUE(pluginSpecEntries(inBuildTree("none")).empty());
  EXPECT_TRUE(pluginSpecEntries(inBuildTree("NONE")).empty());
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree("None"), &report), nullptr);
  EXPECT_TRUE(report.candidates.empty());
}

TEST(Resolution, UnsetMeansLibNcclNetSo) {
  unsetenv("NCCL_NET_PLUGIN");
  EXPECT_EQ(pluginSpecEntries(LoadOptions{}), std::vector<std::string>{"libnccl-net.so"});
  setenv("NCCL_NET_PLUGIN", "minimal", 1);
  EXPECT_EQ(pluginSpecEntries(LoadOptions{}), std::vector<std::string>{"minimal"});
  // Set but empty is not unset: NCCL (2.27 on) splits the value into no entry, as for "none".
  setenv("NCCL_NET_PLUGIN", "", 1);
  EXPECT_TRUE(pluginSpecEntries(LoadOptions{}).empty());
  unsetenv("NCCL_NET_PLUGIN");
}

// Entries as NCCL's strtok_r leaves them: spaces kept (so " minimal" is not found, and the rejection says why),
// empty entries skipped, "none" only as the whole value.
TEST(Resolution, EntriesAreTakenAsWritten) {
  EXPECT_EQ(pluginSpecEntries(inBuildTree(",a,, b ,")), (std::vector<std::string>{"a", " b "}));
  EXPECT_EQ(pluginSpecEntries(inBuildTree(" none")), std::vector<std::string>{" none"});
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree(" minimal"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("begins or ends with a space, which NCCL keeps"), std::string::npos)
      << report.candidates[0].rejectReason;
  // lib*.so names are never rewritten, however short.
  EXPECT_EQ(candidateFiles("lib.so", {}), std::vector<std::string>{"lib.so"});
}

// Any prefix of STATIC_PLUGIN, in any case, opens the program itself (dlopen(NULL)), as in NCCL: this test program
// exports no table, so the candidate is rejected as not a plugin rather than looked for as libnccl-net-s.so.
TEST(Resolution, APrefixOfStaticPluginIsTheProgramItself) {
  for (const char* entry : {"s", "Static", "STATIC_PLUGIN"})
    EXPECT_EQ(candidateFiles(entry, {kDir}), std::vector<std::string>{kProgramItself}) << entry;
  EXPECT_NE(candidateFiles("static_plugins", {}).front(), kProgramItself);
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree("static"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_EQ(report.candidates[0].loadedPath, kProgramItself);
  EXPECT_NE(report.candidates[0].rejectReason.find("exports no ncclNetPlugin"), std::string::npos)
      << report.candidates[0].rejectReason;
}

// A plugin of an ABI this host does not load says which it is: older ones need rebuilding, newer ones a newer host.
// Both read "not a net plugin" before, as a library with no plugin symbol at all does.
TEST(Resolution, APluginOfAnUnknownVersionIsNamedAsSuch) {
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree(kDir + "/libnccl-net-defective-only-v5.so"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("exports ncclNetPlugin v5 only, older than any version this host "
                                                   "loads (v12..v6): rebuild the plugin"),
            std::string::npos)
      << report.candidates[0].rejectReason;
  LoadReport newer;
  EXPECT_EQ(loadNet(inBuildTree(kDir + "/libnccl-net-defective-only-v13.so"), &newer), nullptr);
  ASSERT_EQ(newer.candidates.size(), 1u);
  EXPECT_NE(newer.candidates[0].rejectReason.find("exports ncclNetPlugin v13, newer than this host knows (v12..v6)"),
            std::string::npos)
      << newer.candidates[0].rejectReason;
}

// A C table defined without NCCL_NET_EXPORT under -fvisibility=hidden (or static) is in the library's static symbol
// table, not among its exports: the reason names it and the fix, where it read "not a net plugin" as a library with no
// table does. A stripped library has no static symbol table, and keeps that reason. The same for a hidden collNet
// beside an exported net (tests/loader/hidden_table_plugin.c).
TEST(Resolution, ATableDefinedButNotExportedIsNamed) {
  const std::string dir = NNS_HIDDEN_TABLE_DIR;
  for (const char* name : {"hidden-table", "static-table"}) {
    LoadReport report;
    EXPECT_EQ(loadNet(inBuildTree(dir + "/libnccl-net-" + name + ".so"), &report), nullptr) << name;
    ASSERT_EQ(report.candidates.size(), 1u);
    EXPECT_EQ(report.candidates[0].rejectReason,
              "defines ncclNetPlugin_v8 but does not export it (hidden or static): mark it with NCCL_NET_EXPORT "
              "(nccl_net/export.h) or default visibility")
        << name;
  }
  LoadReport stripped;
  EXPECT_EQ(loadNet(inBuildTree(dir + "/libnccl-net-hidden-table-stripped.so"), &stripped), nullptr);
  ASSERT_EQ(stripped.candidates.size(), 1u);
  EXPECT_EQ(stripped.candidates[0].rejectReason, "exports no ncclNetPlugin_v12..v6: not a net plugin");

  LoadReport report;
  auto net = loadNet(inBuildTree(dir + "/libnccl-net-hidden-collnet.so"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  CollNetReport coll;
  EXPECT_EQ(loadCollNet(*net, &coll), nullptr);
  EXPECT_EQ(coll.rejectReason,
            "defines ncclCollNetPlugin_v8 but does not export it (hidden or static): mark it with NCCL_NET_EXPORT "
            "(nccl_net/export.h) or default visibility; as it is, NCCL finds no collNet and runs without in-network "
            "collectives");
}

// NCCL_NET takes only the net of that name (ignoring case), skipping the others before init; so a cluster's
// NCCL_NET=IB makes NCCL pass over a plugin named otherwise, and the report says so.
TEST(Resolution, NcclNetSkipsNetsOfAnotherName) {
  LoadOptions options = inBuildTree("socket,minimal");
  options.netName = "MINIMAL";
  LoadReport report;
  auto net = loadNet(options, &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  EXPECT_NE(report.candidates[0].rejectReason.find(
                "its net is named \"nns-socket\", and NCCL_NET=MINIMAL takes only a net of that name"),
            std::string::npos)
      << report.candidates[0].rejectReason;
  setenv("NCCL_NET", "IB", 1);
  options.netName.reset();  // read from the environment
  EXPECT_EQ(requiredNetName(options), "IB");
  EXPECT_EQ(loadNet(options, &report), nullptr);
  // Set but empty, NCCL_NET matches no net (NCCL's init then fails: "Failed to initialize any NET plugin").
  setenv("NCCL_NET", "", 1);
  EXPECT_EQ(requiredNetName(options), "");
  LoadReport empty;
  EXPECT_EQ(loadNet(options, &empty), nullptr);
  ASSERT_EQ(empty.candidates.size(), 2u);
  EXPECT_NE(empty.candidates[0].rejectReason.find("NCCL_NET is set but empty, which matches no net"), std::string::npos)
      << empty.candidates[0].rejectReason;
  options.readNcclNet = false;  // the tools that test the one plugin they are given
  EXPECT_EQ(requiredNetName(options), std::nullopt);
  EXPECT_NE(loadNet(options, &report), nullptr);
  unsetenv("NCCL_NET");
}

TEST(Resolution, ListTriesInOrderAndReportsEveryRejection) {
  LoadReport report;
  auto net = loadNet(inBuildTree("does-not-exist," + kDir + "/../CMakeCache.txt,minimal-v8,minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_EQ(net->version(), 8) << "first candidate that loads wins";
  ASSERT_EQ(report.candidates.size(), 3u);
  EXPECT_NE(report.candidates[0].rejectReason.find("libnccl-net-does-not-exist.so"), std::string::npos)
      << report.candidates[0].rejectReason;
  EXPECT_NE(report.candidates[0].rejectReason.find("No such file"), std::string::npos) << "dlopen's own text";
  EXPECT_NE(report.candidates[1].rejectReason.find("could not open"), std::string::npos);
  EXPECT_EQ(report.candidates[2].chosenVersion, 8);
}

// An init that fails is rejected with what the plugin logged while it ran: the socket plugin's reason for no
// device ("no usable network interface") reached stderr only, and the rejection said "returned ncclSystemError".
TEST(Resolution, AFailedInitIsRejectedWithWhatThePluginLogged) {
  const char* saved = std::getenv("NCCL_SOCKET_IFNAME");
  const std::string previous = saved != nullptr ? saved : "";
  setenv("NCCL_SOCKET_IFNAME", "=no-such-interface0", 1);
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree("socket"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("returned ncclSystemError (it logged: NET/nns-socket : no usable "
                                                   "network interface"),
            std::string::npos)
      << report.candidates[0].rejectReason;
  if (saved != nullptr) {
    setenv("NCCL_SOCKET_IFNAME", previous.c_str(), 1);
  } else {
    unsetenv("NCCL_SOCKET_IFNAME");
  }
}

TEST(Resolution, ALibraryThatIsNotAPluginIsRejectedWithTheReason) {
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree("libm.so.6"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("exports no ncclNetPlugin"), std::string::npos)
      << report.candidates[0].rejectReason;
}

// What is not a regular file is refused before dlopen: a FIFO named like a plugin would hold dlopen's open until
// some process writes to it (for ever, in NCCL), and the loader would hang with it. The next entry is then tried.
TEST(Resolution, AFifoOrADirectoryNamedLikeAPluginIsRefusedUnopened) {
  char dir[] = "/tmp/nns-loader-fifo-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/libnccl-net-fifo.so", folder = std::string(dir) + "/libnccl-net-dir.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  LoadOptions options = inBuildTree("fifo," + folder + ",minimal");
  options.searchDirs.insert(options.searchDirs.begin(), dir);
  LoadReport report;
  auto net = loadNet(options, &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  ASSERT_EQ(report.candidates.size(), 3u);
  EXPECT_NE(report.candidates[0].rejectReason.find(fifo + ": a FIFO, not a library: not opened"), std::string::npos)
      << report.candidates[0].rejectReason;
  EXPECT_NE(report.candidates[1].rejectReason.find(folder + ": a directory, not a library"), std::string::npos)
      << report.candidates[1].rejectReason;
  // A bare name: the first directory of LD_LIBRARY_PATH that holds it decides, as the dynamic linker's search would.
  const char* saved = std::getenv("LD_LIBRARY_PATH");
  std::string savedPath = saved != nullptr ? saved : "";
  setenv("LD_LIBRARY_PATH", (std::string("/nonexistent:") + dir).c_str(), 1);
  std::string error;
  EXPECT_EQ(openLibrary("libnccl-net-fifo.so", &error), nullptr);
  EXPECT_EQ(error, fifo + ": a FIFO, not a library: not opened, as its open would wait for a writer");
  // A regular file of that name in an earlier directory is what the dynamic linker would find: not refused (dlopen
  // then says what it says of an empty file, or that it found none: it read LD_LIBRARY_PATH when the test began).
  const std::string shadow = std::string(dir) + "/first";
  ASSERT_EQ(mkdir(shadow.c_str(), 0700), 0);
  std::fclose(std::fopen((shadow + "/libnccl-net-fifo.so").c_str(), "w"));
  setenv("LD_LIBRARY_PATH", (shadow + ":" + dir).c_str(), 1);
  error.clear();
  EXPECT_EQ(openLibrary("libnccl-net-fifo.so", &error), nullptr);
  EXPECT_EQ(error.find("FIFO"), std::string::npos) << error;
  unlink((shadow + "/libnccl-net-fifo.so").c_str());
  rmdir(shadow.c_str());
  if (saved != nullptr)
    setenv("LD_LIBRARY_PATH", savedPath.c_str(), 1);
  else
    unsetenv("LD_LIBRARY_PATH");
  EXPECT_EQ(inspectLibrary(fifo).error,
            fifo + ": a FIFO, not a library: not opened, as its open would wait for a writer");
  unlink(fifo.c_str());
  rmdir(folder.c_str());
  rmdir(dir);
}

// A table NCCL would crash on is refused before anything in it is called, and the next entry of the list is tried.
TEST(Resolution, ATableWithNullEntriesIsRejectedBeforeAnyCall) {
  LoadReport report;
  auto net = loadNet(inBuildTree("defective-null-entries,minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  const std::string& reason = report.candidates[0].rejectReason;
  EXPECT_NE(reason.find("ncclNetPlugin_v12: getProperties, listen, connect, accept, regMr, deregMr, isend, irecv, "
                        "test, closeSend, closeRecv, closeListen, finalize are NULL, which NCCL calls without a check"),
            std::string::npos)
      << reason;
  EXPECT_EQ(reason.find("init,"), std::string::npos) << "init is there: " << reason;
  // Its whole ncclNetPlugin_v11 beside is not taken instead: NCCL uses the newest version it finds, or nothing.
  EXPECT_EQ(report.candidates[0].exportedVersions, (std::vector<int>{12, 11}));

  std::string error;
  EXPECT_EQ(openNetVersion(kDir + "/libnccl-net-defective-null-entries.so", 12, &error), nullptr);
  EXPECT_NE(error.find("getProperties, listen"), std::string::npos) << error;
  EXPECT_EQ(openCollNetVersion(kDir + "/libnccl-net-defective-null-entries.so", 12, &error), nullptr);
  EXPECT_NE(error.find("ncclCollNetPlugin_v12: its name is NULL; devices, getProperties"), std::string::npos) << error;
}

// A name pointer that is not NULL but aims at no memory: refused with the reason, before anything prints or compares
// the name (nccl-net-info reported the plugin chosen, then crashed printing it and said no plugin had loaded).
TEST(Resolution, ATableWhoseNameCannotBeReadIsRejected) {
  LoadReport report;
  auto net = loadNet(inBuildTree("defective-unreadable-name,minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  const std::string& reason = report.candidates[0].rejectReason;
  EXPECT_NE(reason.find("ncclNetPlugin_v12: its name (at 0x10) is not a string this process can read"),
            std::string::npos)
      << reason;
}

// iflush may be NULL (NCCL calls it only after GPU-direct receives): the table loads, and a flush is a clear error.
TEST(Resolution, ANullIflushLoadsAndAFlushIsAnError) {
  std::string error;
  auto net = openNetVersion(kDir + "/libnccl-net-defective-no-iflush.so", 12, &error);
  ASSERT_NE(net, nullptr) << error;
  void* request = nullptr;
  EXPECT_EQ(net->iflush(nullptr, 0, nullptr, nullptr, nullptr, &request), ncclInvalidUsage);
}

// Loads "`defective`,minimal": the defective library is rejected with a reason holding `reason`, and the minimal
// plugin after it is taken.
static void expectRejectedBeforeMinimal(const std::string& defective, const std::string& reason) {
  LoadReport report;
  auto net = loadNet(inBuildTree(defective + ",minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  ASSERT_EQ(report.candidates.size(), 2u);
  EXPECT_EQ(report.candidates[0].chosenVersion, 0);
  EXPECT_NE(report.candidates[0].rejectReason.find(reason), std::string::npos) << reasons(report);
}

// NCCL checks device 0 before it assigns a plugin: an UNPACK device at a version its kernels do not speak is passed
// over for the next candidate, as here.
TEST(Resolution, ADeviceTypeNcclWouldNotAssignRejectsTheCandidate) {
  expectRejectedBeforeMinimal("defective-unpack-device",
                              "device 0 has netDeviceType 1 version 0x6; NCCL takes HOST (0), or UNPACK (1) at "
                              "version 0x7 only");
}

// A v11 table with v12's getProperties writes past the v11 struct; the adapter's guard catches it and returns
// ncclInternalError. The rejection says why (it said only "getProperties(0) returned ncclInternalError", the cause
// being in a WARN line on stderr), and the next candidate is taken.
TEST(Resolution, APropertiesOverrunIsTheRejectionsReason) {
  expectRejectedBeforeMinimal("defective-v11-props-overrun",
                              "getProperties(0) returned ncclInternalError: getProperties(0) wrote past the end of "
                              "ncclNetProperties_v11");
}

TEST(Resolution, ASymbolThatIsNotATableIsRejectedUnread) {
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree("defective-function"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("ncclNetPlugin_v12: it is a function, not an ncclNet_v12_t"),
            std::string::npos)
      << report.candidates[0].rejectReason;

  // A label in code: its bytes were read as the table (a NULL name or entry refused it only by chance).
  report = LoadReport{};
  EXPECT_EQ(loadNet(inBuildTree("defective-code-label"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find(
                "ncclNetPlugin_v12: it lies in the library's code, not its data: no ncclNet_v12_t"),
            std::string::npos)
      << report.candidates[0].rejectReason;

  report = LoadReport{};
  EXPECT_EQ(loadNet(inBuildTree("defective-short-object"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("it is a 24-byte object; an ncclNet_v12_t has " +
                                                   std::to_string(sizeof(ncclNet_v12_t))),
            std::string::npos)
      << report.candidates[0].rejectReason;
  // One entry short, as a table built against a header with one entry fewer: refused too, not read one past its end.
  report = LoadReport{};
  EXPECT_EQ(loadNet(inBuildTree("defective-one-entry-short"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("it is a " + std::to_string(sizeof(ncclNet_v12_t) - sizeof(void*)) +
                                                   "-byte object; an ncclNet_v12_t has " +
                                                   std::to_string(sizeof(ncclNet_v12_t))),
            std::string::npos)
      << report.candidates[0].rejectReason;

  // A pointer to a table: it was "an 8-byte object ... (built against another version's header?)", which no
  // version's table is.
  report = LoadReport{};
  EXPECT_EQ(loadNet(inBuildTree("defective-pointer"), &report), nullptr);
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find(
                "ncclNetPlugin_v12: it is a pointer-sized object, not an ncclNet_v12_t (" +
                std::to_string(sizeof(ncclNet_v12_t)) + " bytes): a pointer to the table?"),
            std::string::npos)
      << report.candidates[0].rejectReason;
}

TEST(Resolution, InitFailureRejectsTheCandidate) {
  if (dlopen((kDir + "/libnccl-net-socket.so").c_str(), RTLD_NOW | RTLD_NOLOAD) == nullptr &&
      access((kDir + "/libnccl-net-socket.so").c_str(), F_OK) != 0)
    GTEST_SKIP() << "socket plugin not built";
  setenv("NNS_SOCKET_IFNAME", "=no-such-interface", 1);  // the real plugin finds no device and init fails
  LoadReport report;
  auto net = loadNet(inBuildTree("socket,minimal"), &report);
  unsetenv("NNS_SOCKET_IFNAME");
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_STREQ(net->name(), "minimal");
  EXPECT_NE(report.candidates[0].rejectReason.find("init through ncclNet_v12 returned ncclSystemError"),
            std::string::npos)
      << report.candidates[0].rejectReason;
}

// What a library exports beyond NCCL's tables, read from its file: nothing for a plugin built with the SDK's flags; a
// leaky one's own helpers, and (GCC) its GNU-unique symbols; a clear error for a file that is not a whole ELF library.
TEST(Inspect, SymbolsBeyondNcclsTablesAreNamed) {
  const LibraryExports socket = inspectLibrary(kDir + "/libnccl-net-socket.so", true);
  ASSERT_EQ(socket.error, "");  // opened, so the empty lists below were read, not skipped
  ASSERT_FALSE(socket.netVersions.empty());
  EXPECT_EQ(socket.symbolsError, "");
  EXPECT_EQ(socket.symbols.other, std::vector<std::string>{});
  EXPECT_EQ(socket.symbols.unique, std::vector<std::string>{});

  ElfExports leaky;
  std::string error;
  ASSERT_TRUE(readElfExports(NNS_LEAKY_LIBRARY, &leaky, &error)) << error;
  auto has = [](const std::vector<std::string>& names, const std::string& name) {
    for (const auto& n : names)
      if (n == name) return true;
    return false;
  };
  EXPECT_TRUE(has(leaky.other, "_Z11leakyHelperi")) << leaky.other.size() << " others";
  EXPECT_FALSE(has(leaky.other, "_init") || has(leaky.other, "_fini"));
#if defined(__GNUC__) && !defined(__clang__)
  EXPECT_TRUE(has(leaky.unique, "_ZZ11leakySharedvE6shared")) << leaky.unique.size() << " unique";
#endif

  // Cut short, and not ELF at all: an error each, no read past the bytes.
  std::FILE* file = std::fopen(NNS_LEAKY_LIBRARY, "rb");
  ASSERT_NE(file, nullptr);
  std::vector<unsigned char> bytes(1 << 20);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file));
  std::fclose(file);
  ASSERT_GT(bytes.size(), 4096u);
  EXPECT_FALSE(readElfExports(bytes.data(), 64, &leaky, &error));
  EXPECT_EQ(error, "its section headers lie outside the file");
  EXPECT_FALSE(readElfExports(reinterpret_cast<const unsigned char*>("#!/bin/sh\n"), 10, &leaky, &error));
  EXPECT_EQ(error, "not an ELF file");
  EXPECT_FALSE(readElfExports("/proc/self/status", &leaky, &error));  // not a regular file of that size: stat says 0
  // Not read unless asked for (the other callers want the versions only).
  EXPECT_TRUE(inspectLibrary(kDir + "/libnccl-net-socket.so").symbols.other.empty());
  // A library stripped of its section headers: said so, not "exports nothing".
  std::vector<unsigned char> stripped = bytes;
  Elf64_Ehdr header;
  std::memcpy(&header, stripped.data(), sizeof(header));
  header.e_shnum = 0;
  header.e_shoff = 0;
  std::memcpy(stripped.data(), &header, sizeof(header));
  EXPECT_FALSE(readElfExports(stripped.data(), stripped.size(), &leaky, &error));
  EXPECT_EQ(error, "it has no section headers: its symbols were not read");
}

TEST(Inspect, ListsPluginsAndTheirVersions) {
  auto libraries = findPluginLibraries({kDir});
  bool sawV6 = false;
  for (const auto& path : libraries) {
    auto exports = inspectLibrary(path);
    if (path == kDir + "/libnccl-net-minimal-v6.so") {
      sawV6 = true;
      EXPECT_EQ(exports.netVersions, std::vector<int>{6});
      EXPECT_TRUE(exports.collNetVersions.empty());
    }
  }
  EXPECT_TRUE(sawV6);
  EXPECT_FALSE(inspectLibrary(kDir + "/missing.so").error.empty());
  // The same directory named again (as LD_LIBRARY_PATH often does, spelled otherwise) adds no second listing.
  EXPECT_EQ(findPluginLibraries({kDir, kDir + "/.", kDir + "/../" + kDir.substr(kDir.rfind('/') + 1), kDir}),
            libraries);
}

// Properties of an old plugin come back filled the way NCCL 2.30 fills them (net-abi.md §5.3).
TEST(Adapters, OldVersionsPropertiesAreFilledAsNcclDoes) {
  for (int version : {6, 8, 9, 11}) {
    std::string error;
    auto net = openNetVersion(kDir + "/libnccl-net-minimal-v" + std::to_string(version) + ".so", version, &error);
    ASSERT_NE(net, nullptr) << error;
    void* ctx = nullptr;
    ASSERT_EQ(net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
    ncclNetProperties_v12_t props;
    std::memset(&props, 0x5a, sizeof(props));
    ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    EXPECT_STREQ(props.name, "shm0");
    EXPECT_EQ(props.railId, -1);
    EXPECT_EQ(props.planeId, -1);
    EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
    if (version == 6) {
      EXPECT_EQ(props.netDeviceVersion, NCCL_NET_DEVICE_INVALID_VERSION) << "v6 has no such field";
    }
    EXPECT_EQ(props.maxMultiRequestSize, 1);
    EXPECT_EQ(props.vProps.ndevs, 1);
    EXPECT_EQ(props.vProps.devs[0], 0);
    if (version <= 8) {
      EXPECT_EQ(props.maxP2pBytes, 1ull << 30) << "MAX_NET_SIZE for v6..v8";
      EXPECT_EQ(props.maxCollBytes, 512ull << 20);
      EXPECT_EQ(props.forceFlush, 0);
    } else {
      EXPECT_EQ(props.maxP2pBytes, NCCL_NET_DEFAULT_MAX_P2P_BYTES) << "copied from the plugin (the SDK's default)";
    }
    EXPECT_FALSE(net->hasSetNetAttr()) << "the minimal plugin has none";
    EXPECT_EQ(roundTrip(*net, ctx, 100000), 100000);
    EXPECT_EQ(net->finalize(ctx), ncclSuccess);
  }
}

TEST(Adapters, SizesAnIntSizedVersionCannotCarryAreErrors) {
  std::string error;
  auto net = openNetVersion(kDir + "/libnccl-net-minimal-v8.so", 8, &error);
  ASSERT_NE(net, nullptr) << error;
  void* ctx = nullptr;
  ASSERT_EQ(net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
  void* request = nullptr;
  char byte = 0;
  // Refused before the plugin sees the call, so any comm pointer will do.
  EXPECT_EQ(net->isend(&byte, &byte, (3ull << 30), 0, nullptr, nullptr, &request), ncclInternalError);
  void* data = &byte;
  size_t size = (2ull << 30);
  int tag = 0;
  EXPECT_EQ(net->irecv(&byte, 1, &data, &size, &tag, nullptr, nullptr, &request), ncclInternalError);
  // In a group, every receive's size is checked, not the first's only; and a group of none is refused too.
  void* datas[2] = {&byte, &byte};
  size_t sizes[2] = {1, 2ull << 30};
  int tags[2] = {0, 0};
  testing::internal::CaptureStderr();
  EXPECT_EQ(net->irecv(&byte, 2, datas, sizes, tags, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("irecv of 2147483648 bytes exceeds"), std::string::npos);
  testing::internal::CaptureStderr();
  EXPECT_EQ(net->irecv(&byte, 0, datas, sizes, tags, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("irecv of 0 grouped receives (1..64)"), std::string::npos);
  EXPECT_EQ(net->makeVDevice(nullptr, nullptr), ncclInvalidUsage) << "v8 has no makeVDevice";
  auto v6 = openNetVersion(kDir + "/libnccl-net-minimal-v6.so", 6, &error);
  ASSERT_NE(v6, nullptr) << error;
  void* mhandle = nullptr;
  EXPECT_EQ(v6->regMr(&byte, &byte, static_cast<size_t>(INT_MAX) + 1, NCCL_PTR_HOST, &mhandle), ncclInternalError);
  // A size whose low 32 bits are a small int: cast rather than checked, it reached the plugin as 1 byte, and the
  // registration of 4 GiB + 1 succeeded over one byte.
  testing::internal::CaptureStderr();
  EXPECT_EQ(v6->regMr(&byte, &byte, (1ull << 32) + 1, NCCL_PTR_HOST, &mhandle), ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("regMr of 4294967297 bytes does not fit ncclNet_v6's int size"),
            std::string::npos);
  EXPECT_EQ(openNetVersion(kDir + "/libnccl-net-minimal-v6.so", 12, &error), nullptr);
  EXPECT_NE(error.find("does not export ncclNetPlugin_v12"), std::string::npos) << error;
}

// What the strict-host test double records (NnsStrictRecord in strict_host_plugin.c).
struct StrictRecord {
  int inits, nullLogger, nullConfig, trafficClass, vndevs, vdevs[NCCL_NET_MAX_DEVS_PER_NIC], nullProfiler, overlaps,
      irecvs, nullPhandles;
  long long sendSize;
};

// The strict-host test double of one version (strict_host_plugin.c), opened through that version's adapter, and
// what it records, read through the library the adapter opened.
struct StrictHost {
  explicit StrictHost(int version)
      : path(kDir + "/libnccl-net-strict-host-v" + std::to_string(version) + ".so"),
        net(openNetVersion(path, version, &error)),
        library(net != nullptr ? dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD) : nullptr) {}
  ~StrictHost() {
    if (library != nullptr) dlclose(library);
  }
  StrictHost(const StrictHost&) = delete;
  StrictHost& operator=(const StrictHost&) = delete;
  template <class T>
  T* symbol(const char* name) const {
    return library != nullptr ? static_cast<T*>(dlsym(library, name)) : nullptr;
  }
  std::string path, error;
  std::unique_ptr<Net> net;
  void* library;
};

// Through v6..v8's int sizes, isend hands on exactly 1 GiB (NCCL's limit for them) and refuses one byte more before
// the plugin sees it: one past it fits an int and would have reached the plugin as it was.
TEST(Adapters, AnIntSizedIsendTakesOneGibAndNotAByteMore) {
  StrictHost strict(8);
  ASSERT_NE(strict.net, nullptr) << strict.error;
  auto* record = strict.symbol<StrictRecord>("nnsStrictRecord");
  ASSERT_NE(record, nullptr);
  char byte = 0;
  void* request = nullptr;
  record->sendSize = -1;
  EXPECT_EQ(strict.net->isend(&byte, &byte, 1ull << 30, 0, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_EQ(record->sendSize, 1ll << 30) << "exactly 1 GiB reaches the plugin (which refuses all sends)";
  record->sendSize = -1;
  testing::internal::CaptureStderr();
  EXPECT_EQ(strict.net->isend(&byte, &byte, (1ull << 30) + 1, 0, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "isend of 1073741825 bytes exceeds the 1073741824-byte limit of ncclNet_v8's int sizes"),
            std::string::npos);
  EXPECT_EQ(record->sendSize, -1) << "the plugin was called";
}

// A virtual NIC of more devices than the version's list holds (4 before v12, 8 in v12) is an error: the adapter
// copied the count and listed device 0 for the entries the plugin never wrote.
TEST(Adapters, AVirtualNicBeyondTheVersionsListIsRefused) {
  for (int version : {9, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    auto& net = strict.net;
    auto* size = strict.symbol<int>("nnsStrictVNicSize");
    ASSERT_NE(size, nullptr);
    const int most = version == 12 ? NCCL_NET_MAX_DEVS_PER_NIC : NCCL_NET_MAX_DEVS_PER_NIC_V11;
    ncclNetProperties_v12_t props{};
    *size = most;
    EXPECT_EQ(net->getProperties(0, &props), ncclSuccess);
    EXPECT_EQ(props.vProps.ndevs, most);
    for (int over : {most + 1, most + 2}) {
      *size = over;
      testing::internal::CaptureStderr();
      EXPECT_EQ(net->getProperties(0, &props), ncclInternalError) << over;
      // Named by the plugin's table and the version's ABI (it named the device as the plugin: "plugin strict0").
      const std::string said = testing::internal::GetCapturedStderr();
      EXPECT_NE(said.find("plugin strict-host: device 0 reports a virtual NIC of " + std::to_string(over) +
                          " devices; ncclNet_v" + std::to_string(version) + " lists at most " + std::to_string(most)),
                std::string::npos)
          << said;
    }
    *size = -1;
    EXPECT_EQ(net->getProperties(0, &props), ncclInternalError);
    *size = 0;
  }
}

// A plugin before v11 is initialised once per process, however many communicators load it (each gets an adapter of
// its own): a v9 or v10 plugin's init ran once per communicator. From v11 on, init is per communicator.
TEST(Adapters, APluginBeforeV11IsInitialisedOncePerProcess) {
  for (int version : {9, 10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost first(version), second(version);  // two communicators' adapters
    ASSERT_NE(first.net, nullptr) << first.error;
    ASSERT_NE(second.net, nullptr) << second.error;
    const auto* inits = first.symbol<const int>("nnsStrictRecord");  // its first field
    ASSERT_NE(inits, nullptr);
    const int before = *inits;
    void* ctx = nullptr;
    EXPECT_EQ(first.net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
    EXPECT_EQ(second.net->init(&ctx, 2, nullptr, nullptr, nullptr), ncclSuccess);
    EXPECT_EQ(*inits - before, version >= 11 ? 2 : 1);
  }
}

// Plugins built for several NCCL versions commonly share one init between their old tables, and may refuse a second
// call (NCCL loads one version and calls it once). Opening two old versions of one library (as the harness's
// every-version rule does) called it once per version: the second failed.
TEST(Adapters, OldVersionsOfOneLibraryShareOneInit) {
  const std::string path = kDir + "/libnccl-net-shared-init.so";
  std::string error;
  auto v9 = openNetVersion(path, 9, &error);
  ASSERT_NE(v9, nullptr) << error;
  auto v8 = openNetVersion(path, 8, &error);
  ASSERT_NE(v8, nullptr) << error;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  const auto* inits = static_cast<const int*>(dlsym(library, "nnsSharedInits"));
  ASSERT_NE(inits, nullptr);
  const int before = *inits;
  void* ctx = nullptr;
  EXPECT_EQ(v9->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
  v9->finalize(ctx);
  EXPECT_EQ(v8->init(&ctx, 2, nullptr, nullptr, nullptr), ncclSuccess);
  v8->finalize(ctx);
  EXPECT_EQ(*inits - before, before == 0 ? 1 : 0);
  dlclose(library);
}

// Old tables of one library with an init each: every table's init runs before that table is used (keyed by the
// library alone, only the first table opened ran its init, and the other was used uninitialised).
TEST(Adapters, OldVersionsWithInitsOfTheirOwnEachRunTheirs) {
  const std::string path = kDir + "/libnccl-net-separate-inits.so";
  std::string error;
  auto v9 = openNetVersion(path, 9, &error);
  ASSERT_NE(v9, nullptr) << error;
  auto v8 = openNetVersion(path, 8, &error);
  ASSERT_NE(v8, nullptr) << error;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  const auto* inits9 = static_cast<const int*>(dlsym(library, "nnsSharedInits"));
  const auto* inits8 = static_cast<const int*>(dlsym(library, "nnsSeparateInits8"));
  ASSERT_NE(inits9, nullptr);
  ASSERT_NE(inits8, nullptr);
  const int before9 = *inits9, before8 = *inits8;
  void* ctx = nullptr;
  EXPECT_EQ(v9->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
  EXPECT_EQ(v8->init(&ctx, 2, nullptr, nullptr, nullptr), ncclSuccess);
  // A second adapter of each version finds its own init done.
  auto again = openNetVersion(path, 8, &error);
  ASSERT_NE(again, nullptr) << error;
  EXPECT_EQ(again->init(&ctx, 3, nullptr, nullptr, nullptr), ncclSuccess);
  EXPECT_EQ(*inits9 - before9, before9 == 0 ? 1 : 0);
  EXPECT_EQ(*inits8 - before8, before8 == 0 ? 1 : 0);
  EXPECT_EQ(*inits8, 1);
  dlclose(library);
}

// NCCL runs a plugin's init and finalize one at a time (under its plugin mutex), so a plugin written for NCCL may keep
// unsynchronised state there. Communicators made on several threads at once called a v11+ plugin's init
// concurrently; the adapters now hold one lock across those calls.
TEST(Adapters, APluginsInitAndFinalizeNeverRunAtOnce) {
  for (int version : {11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    std::vector<std::unique_ptr<StrictHost>> hosts;
    for (int t = 0; t < 4; ++t) hosts.push_back(std::make_unique<StrictHost>(version));
    for (auto& host : hosts) ASSERT_NE(host->net, nullptr) << host->error;
    const auto* record = hosts[0]->symbol<const StrictRecord>("nnsStrictRecord");
    ASSERT_NE(record, nullptr);
    const int before = __atomic_load_n(&record->overlaps, __ATOMIC_RELAXED);
    std::vector<std::thread> threads;
    for (auto& host : hosts) {
      threads.emplace_back([&net = *host->net] {
        for (int i = 0; i < 20; ++i) {
          void* ctx = nullptr;
          EXPECT_EQ(net.init(&ctx, static_cast<uint64_t>(i), nullptr, nullptr, nullptr), ncclSuccess);
          EXPECT_EQ(net.finalize(ctx), ncclSuccess);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(__atomic_load_n(&record->overlaps, __ATOMIC_RELAXED) - before, 0)
        << "an init or finalize ran while another was running";
  }
}

// A host that passes no logger or config (as every tool here does) must still hand the plugin what NCCL hands it: a
// logger to keep, a config with the traffic class unset, and makeVDevice's list as given, through each adapter.
TEST(Adapters, APluginGetsTheLoggerConfigAndDeviceListNcclWouldPass) {
  for (int version : {9, 10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    auto& net = strict.net;
    const auto* record = strict.symbol<const StrictRecord>("nnsStrictRecord");
    ASSERT_NE(record, nullptr);

    void* ctx = nullptr;
    const int initsBefore = record->inits;  // other tests of this process may have initialised it
    EXPECT_EQ(net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
    EXPECT_EQ(record->inits - initsBefore, 1);
    EXPECT_EQ(record->nullLogger, 0) << "the plugin logs through the logger it was given";
    EXPECT_EQ(record->nullProfiler, 0) << "a v10+ plugin calls the profiler callback it was given";
    if (version == 10) {
      unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
      void* sendComm = nullptr;
      ncclNetDeviceHandle_v12_t* devComm = nullptr;
      EXPECT_EQ(net->connect(ctx, 0, handle, &sendComm, &devComm), ncclInternalError) << "the double moves no data";
    }
    if (version >= 10) {
      EXPECT_EQ(record->nullConfig, 0) << "v10's connect and v11's init read the config";
      EXPECT_EQ(record->trafficClass, NCCL_NET_TRAFFIC_CLASS_UNDEF);
    }

    ncclNetVDeviceProps_v12_t props{};
    props.ndevs = 2;
    props.devs[0] = 1;
    props.devs[1] = 0;
    int d = -1;
    EXPECT_EQ(net->makeVDevice(&d, &props), ncclSuccess);
    EXPECT_EQ(d, 2);
    EXPECT_EQ(record->vndevs, 2);
    EXPECT_EQ(record->vdevs[0], 1);
    EXPECT_EQ(record->vdevs[1], 0);
    if (ctx != nullptr) net->finalize(ctx);
  }
}

namespace {

// The fields every version of the strict-host double reports alike (device 1), as they reach the v12 view.
void expectStrictHostsFields(const ncclNetProperties_v12_t& props) {
  EXPECT_STREQ(props.name, "strict1");
  EXPECT_STREQ(props.pciPath, "/sys/devices/pci0000:00/0000:00:02.0/strict");
  EXPECT_EQ(props.guid, 0x5eed0001u);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.regIsGlobal, 1) << "v8 and later have regIsGlobal";
  EXPECT_EQ(props.speed, 1000);
  EXPECT_EQ(props.port, 3);
  EXPECT_EQ(props.latency, 2.5f);
  EXPECT_EQ(props.maxComms, 7);
  EXPECT_EQ(props.maxRecvs, 8);
  EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
}

}  // namespace

// Every field a v9..v12 plugin reports reaches the v12 view as it was written (the strict-host double gives each a
// value no adapter fills in by default): an adapter that dropped one, or copied the vNIC list's first device into
// every entry, showed nothing with the minimal plugin's zeros. What v9 and v10 lack (maxMultiRequestSize) is NCCL's 1.
TEST(Adapters, EveryPropertyOfANewerVersionIsCopied) {
  for (int version : {9, 10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    auto* size = strict.symbol<int>("nnsStrictVNicSize");
    ASSERT_NE(size, nullptr);
    *size = 3;
    ncclNetProperties_v12_t props;
    std::memset(&props, 0x5a, sizeof(props));
    ASSERT_EQ(strict.net->getProperties(1, &props), ncclSuccess);
    *size = 0;
    expectStrictHostsFields(props);
    EXPECT_EQ(props.forceFlush, 1);
    ASSERT_EQ(props.vProps.ndevs, 3);
    EXPECT_EQ(props.vProps.devs[0], 2);
    EXPECT_EQ(props.vProps.devs[1], 1);
    EXPECT_EQ(props.vProps.devs[2], 0);
    EXPECT_EQ(props.maxP2pBytes, (1ull << 31) + 1);
    EXPECT_EQ(props.maxCollBytes, 3ull << 30);
    EXPECT_EQ(props.maxMultiRequestSize, version >= 11 ? 8 : 1);
    EXPECT_TRUE(strict.net->hasMakeVDevice()) << "v9 and later tables have makeVDevice";
    // The table has no regMrDmaBuf: an error, not a success with no handle.
    void* mhandle = nullptr;
    char byte = 0;
    testing::internal::CaptureStderr();
    EXPECT_EQ(strict.net->regMrDmaBuf(&byte, &byte, 1, NCCL_PTR_CUDA, 0, -1, &mhandle), ncclInvalidUsage);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("has no regMrDmaBuf"), std::string::npos);
  }
}

// A v8 plugin's fields reach the v12 view, and what v8 lacks is filled as NCCL fills it: its own device as the one
// entry of the vNIC list (device 1 lists 1, not 0), MAX_NET_SIZE and 512 MiB as the largest messages, no forceFlush,
// one request per irecv. Its irecv's "not yet" (success, no request) comes back as no request, whatever the caller's
// variable held before.
TEST(Adapters, AV8PluginsPropertiesAreCopiedAndTheRestFilledAsNcclDoes) {
  StrictHost strict(8);
  ASSERT_NE(strict.net, nullptr) << strict.error;
  ncclNetProperties_v12_t props;
  std::memset(&props, 0x5a, sizeof(props));
  ASSERT_EQ(strict.net->getProperties(1, &props), ncclSuccess);
  expectStrictHostsFields(props);
  EXPECT_EQ(props.forceFlush, 0);
  ASSERT_EQ(props.vProps.ndevs, 1);
  EXPECT_EQ(props.vProps.devs[0], 1);
  EXPECT_EQ(props.maxP2pBytes, 1ull << 30);
  EXPECT_EQ(props.maxCollBytes, 512ull << 20);
  EXPECT_EQ(props.maxMultiRequestSize, 1);
  EXPECT_FALSE(strict.net->hasMakeVDevice());
  char byte = 0;
  void* data = &byte;
  size_t size = 1;
  int tag = 0;
  void* request = &byte;  // what a caller's variable may hold before
  EXPECT_EQ(strict.net->irecv(&byte, 1, &data, &size, &tag, nullptr, nullptr, &request), ncclSuccess);
  EXPECT_EQ(request, nullptr) << "the plugin's \"not yet\" came back as a request";
}

// A vNIC of more devices than an old version's list holds (4 before v12) is refused before the plugin sees it: the
// adapter's copy into the old struct would write past its end. v12's list holds 8.
TEST(Adapters, AVirtualNicAnOldVersionCannotListIsRefused) {
  for (int version : {9, 10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    const auto* record = strict.symbol<const StrictRecord>("nnsStrictRecord");
    ASSERT_NE(record, nullptr);
    ncclNetVDeviceProps_v12_t props{};
    props.ndevs = NCCL_NET_MAX_DEVS_PER_NIC_V11 + 1;
    for (int i = 0; i < props.ndevs; ++i) props.devs[i] = i % 2;
    const int before = record->vndevs;
    int d = -1;
    testing::internal::CaptureStderr();
    const ncclResult_t result = strict.net->makeVDevice(&d, &props);
    const std::string said = testing::internal::GetCapturedStderr();
    if (version == 12) {
      EXPECT_EQ(result, ncclSuccess);
      EXPECT_EQ(record->vndevs, props.ndevs);
    } else {
      EXPECT_EQ(result, ncclInvalidUsage);
      EXPECT_EQ(record->vndevs, before) << "the plugin was called";
      EXPECT_NE(said.find("a vNIC of 5 devices does not fit ncclNet_v" + std::to_string(version)), std::string::npos)
          << said;
    }
  }
}

// A v10 plugin gets its config in connect (the host's record from init): the config the host gave init arrives, not
// the unset one.
TEST(Adapters, AV10PluginsConnectGetsTheConfigInitWasGiven) {
  StrictHost strict(10);
  ASSERT_NE(strict.net, nullptr) << strict.error;
  const auto* record = strict.symbol<const StrictRecord>("nnsStrictRecord");
  ASSERT_NE(record, nullptr);
  ncclNetCommConfig_v12_t config{5};
  void* ctx = nullptr;
  ASSERT_EQ(strict.net->init(&ctx, 1, &config, nullptr, nullptr), ncclSuccess);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  ncclNetDeviceHandle_v12_t* devComm = nullptr;
  EXPECT_EQ(strict.net->connect(ctx, 0, handle, &sendComm, &devComm), ncclInternalError) << "the double moves no data";
  EXPECT_EQ(record->trafficClass, 5);
  EXPECT_EQ(strict.net->finalize(ctx), ncclSuccess);
}

// NCCL always hands irecv an array of profiler handles, and plugins index it unchecked (NCCL's example plugin does):
// a host that passes none gets an array of NULL handles handed on, not NULL.
TEST(Adapters, AnIrecvWithoutProfilerHandlesHandsThePluginAnArray) {
  for (int version : {10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    auto* record = strict.symbol<StrictRecord>("nnsStrictRecord");
    ASSERT_NE(record, nullptr);
    record->nullPhandles = 0;
    const int before = record->irecvs;
    char byte = 0;
    void* data = &byte;
    size_t size = 1;
    int tag = 0;
    void* request = nullptr;
    EXPECT_EQ(strict.net->irecv(&byte, 1, &data, &size, &tag, nullptr, nullptr, &request), ncclInternalError)
        << "the double moves no data";
    EXPECT_EQ(record->irecvs - before, 1);
    EXPECT_EQ(record->nullPhandles, 0);
  }
}

// A pre-v11 plugin's init that failed is tried again at the next init, not recorded as done (which would use the
// plugin uninitialised from then on).
TEST(Adapters, AFailedInitBeforeV11IsTriedAgain) {
  for (int version : {9, 10}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    StrictHost strict(version);
    ASSERT_NE(strict.net, nullptr) << strict.error;
    const auto* record = strict.symbol<const StrictRecord>("nnsStrictRecord");
    auto* failInits = strict.symbol<int>("nnsStrictFailInits");
    ASSERT_NE(record, nullptr);
    ASSERT_NE(failInits, nullptr);
    *failInits = 1;
    const int before = record->inits;
    void* ctx = nullptr;
    EXPECT_EQ(strict.net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSystemError);
    EXPECT_EQ(strict.net->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);
    EXPECT_EQ(record->inits - before, 2) << "the second init did not reach the plugin";
    *failInits = 0;
    if (ctx != nullptr) {
      EXPECT_EQ(strict.net->finalize(ctx), ncclSuccess);
    }
  }
}

// ---- collNet: probed newest first in the net's own library, each version adapted to the v12 view -----------------

namespace {

// One rank's whole collNet lifecycle through `coll`: listen, connect, a checked all-reduce, teardown.
// A one-rank collNet communicator: its listener and its comm.
void connectOneRank(CollNet& coll, void* ctx, void** listenComm, void** collComm) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(coll.listen(ctx, 0, handle, listenComm), ncclSuccess);
  void* handles[1] = {handle};
  ASSERT_EQ(coll.connect(handles, 1, 0, *listenComm, collComm), ncclSuccess);
  ASSERT_NE(*collComm, nullptr);
}

void reduceOnOneRank(CollNet& coll, void* ctx) {
  void* listenComm = nullptr;
  void* collComm = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectOneRank(coll, ctx, &listenComm, &collComm));
  int supported = -1;
  EXPECT_EQ(coll.reduceSupport(ncclFloat32, ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(supported, 1);
  EXPECT_EQ(coll.reduceSupport(ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 2), &supported), ncclSuccess);
  EXPECT_EQ(supported, 0) << "a user-defined op is never reduced by a network";
  std::vector<float> in(1000), out(1000, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.5f * static_cast<float>(i);
  void* sendMr = nullptr;
  void* recvMr = nullptr;
  ASSERT_EQ(coll.regMr(collComm, in.data(), in.size() * sizeof(float), NCCL_PTR_HOST, &sendMr), ncclSuccess);
  ASSERT_EQ(coll.regMr(collComm, out.data(), out.size() * sizeof(float), NCCL_PTR_HOST, &recvMr), ncclSuccess);
  void* request = nullptr;
  ASSERT_EQ(coll.iallreduce(collComm, in.data(), out.data(), in.size(), ncclFloat32, ncclSum, sendMr, recvMr, &request),
            ncclSuccess);
  ASSERT_NE(request, nullptr);
  int done = 0, size = -1;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done && Clock::now() < deadline) ASSERT_EQ(coll.test(request, &done, &size), ncclSuccess);
  EXPECT_TRUE(done);
  EXPECT_EQ(size, static_cast<int>(in.size() * sizeof(float)));
  EXPECT_EQ(in, out) << "the all-reduce of one rank's contribution is that contribution";
  EXPECT_EQ(coll.deregMr(collComm, sendMr), ncclSuccess);
  EXPECT_EQ(coll.deregMr(collComm, recvMr), ncclSuccess);
  EXPECT_EQ(coll.closeColl(collComm), ncclSuccess);
  EXPECT_EQ(coll.closeListen(listenComm), ncclSuccess);
}

// Waits for a one-rank collNet request; the size it reports.
int completedSize(CollNet& coll, void* request) {
  int done = 0, size = -1;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done && Clock::now() < deadline) {
    if (coll.test(request, &done, &size) != ncclSuccess) return -2;
  }
  return done ? size : -3;
}

// An all-gather and a reduce-scatter of one rank through `coll`: a window of 700 of 1001 bytes per rank, at offset 101
// (neither a multiple of anything), carried by `nParts` scatter-gather parts (v8 tables take one), called as NCCL's
// proxy calls them: the buffer of this rank's side (all-gather's send, reduce-scatter's receive) passed at the
// window's start. The bytes of the window arrive where they belong, and nothing outside it is written.
void gatherAndScatterOnOneRank(CollNet& coll, void* ctx, int nParts) {
  void* listenComm = nullptr;
  void* collComm = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectOneRank(coll, ctx, &listenComm, &collComm));
  constexpr size_t kPerRank = 1001, kOffset = 101, kWindow = 700;
  std::vector<unsigned char> in(kPerRank), out(kPerRank, 0xee);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 31 + 7);
  void* inMr = nullptr;
  void* outMr = nullptr;
  ASSERT_EQ(coll.regMr(collComm, in.data(), in.size(), NCCL_PTR_HOST, &inMr), ncclSuccess);
  ASSERT_EQ(coll.regMr(collComm, out.data(), out.size(), NCCL_PTR_HOST, &outMr), ncclSuccess);
  // The window split into nParts parts of unequal sizes, one after another in the registered buffer.
  auto partsOf = [&](std::vector<unsigned char>& buffer, void* mr) {
    std::vector<ncclNetSGE_v12_t> parts;
    size_t at = kOffset;
    for (int i = 0; i < nParts; ++i) {
      size_t size = i + 1 < nParts ? kWindow / (2 * nParts) + static_cast<size_t>(i) : kWindow - (at - kOffset);
      parts.push_back(ncclNetSGE_v12_t{mr, buffer.data() + at, size});
      at += size;
    }
    return parts;
  };
  std::vector<unsigned char> expected(kPerRank, 0xee);
  std::copy(in.begin() + kOffset, in.begin() + kOffset + kWindow, expected.begin() + kOffset);

  std::vector<ncclNetSGE_v12_t> recvParts = partsOf(out, outMr);
  void* request = nullptr;
  ASSERT_EQ(coll.iallgather(collComm, in.data() + kOffset, nParts, recvParts.data(), kPerRank, kOffset, kWindow, inMr,
                            &request),
            ncclSuccess);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(completedSize(coll, request), static_cast<int>(kWindow));
  EXPECT_EQ(out, expected) << "all-gather: the window of the one rank's bytes, in its parts";

  std::fill(out.begin(), out.end(), 0xee);
  std::vector<ncclNetSGE_v12_t> sendParts = partsOf(in, inMr);
  request = nullptr;
  ASSERT_EQ(coll.ireducescatter(collComm, nParts, sendParts.data(), out.data() + kOffset, kPerRank, kOffset, kWindow,
                                ncclUint8, ncclSum, outMr, &request),
            ncclSuccess);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(completedSize(coll, request), static_cast<int>(kWindow));
  EXPECT_EQ(out, expected) << "reduce-scatter: the window of the one rank's block, at its offset";

  EXPECT_EQ(coll.deregMr(collComm, inMr), ncclSuccess);
  EXPECT_EQ(coll.deregMr(collComm, outMr), ncclSuccess);
  EXPECT_EQ(coll.closeColl(collComm), ncclSuccess);
  EXPECT_EQ(coll.closeListen(listenComm), ncclSuccess);
}

}  // namespace

TEST(CollNet, ProbedNewestFirstInTheNetsLibrary) {
  LoadReport report;
  auto net = loadNet(inBuildTree("one-rank-coll"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  CollNetReport collReport;
  auto coll = loadCollNet(*net, &collReport);
  ASSERT_NE(coll, nullptr) << collReport.rejectReason;
  EXPECT_EQ(collReport.exportedVersions, (std::vector<int>{12, 11, 10, 9, 8, 7, 6}));
  EXPECT_EQ(collReport.chosenVersion, 12);
  EXPECT_EQ(coll->version(), 12);
  EXPECT_STREQ(coll->name(), "one-rank-coll");
  EXPECT_EQ(coll->path(), net->path());
}

TEST(CollNet, AnOldOnlyCollNetLoadsThroughItsVersion) {
  LoadReport report;
  auto net = loadNet(inBuildTree("one-rank-coll-v6"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  EXPECT_EQ(net->version(), 6);
  CollNetReport collReport;
  auto coll = loadCollNet(*net, &collReport);
  ASSERT_NE(coll, nullptr) << collReport.rejectReason;
  EXPECT_EQ(collReport.exportedVersions, std::vector<int>{6});
  EXPECT_EQ(coll->version(), 6);
  void* ctx = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(coll->init(&ctx, 7, nullptr), ncclSuccess);
  EXPECT_EQ(ctx, nullptr) << "before v11 a collNet has no per-communicator context";
  reduceOnOneRank(*coll, ctx);
  EXPECT_EQ(coll->finalize(ctx), ncclSuccess);
}

// Each ncclCollNetPlugin_vN of one library, opened through exactly that version, reports the same device filled
// as NCCL fills it and reduces.
TEST(CollNet, EveryVersionLoadsAndReduces) {
  for (int version : knownNetVersions()) {
    SCOPED_TRACE("ncclCollNet_v" + std::to_string(version));
    std::string error;
    auto coll = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", version, &error);
    ASSERT_NE(coll, nullptr) << error;
    EXPECT_EQ(coll->version(), version);
    void* ctx = nullptr;
    ASSERT_EQ(coll->init(&ctx, 1, nullptr), ncclSuccess);
    int ndev = 0;
    ASSERT_EQ(coll->devices(&ndev), ncclSuccess);
    EXPECT_EQ(ndev, 1);
    ncclNetProperties_v12_t props;
    std::memset(&props, 0x5a, sizeof(props));
    ASSERT_EQ(coll->getProperties(0, &props), ncclSuccess);
    EXPECT_STREQ(props.name, "coll0");
    EXPECT_EQ(props.speed, 100000);
    EXPECT_EQ(props.railId, -1);
    EXPECT_EQ(props.planeId, -1);
    EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(props.maxMultiRequestSize, 1);
    EXPECT_EQ(props.maxCollBytes, 512ull << 20);
    EXPECT_EQ(props.vProps.ndevs, 1);
    EXPECT_EQ(coll->hasIallgather(), version >= 8) << "v6 and v7 tables have no iallgather";
    EXPECT_EQ(coll->hasIreducescatter(), version >= 8);
    EXPECT_FALSE(coll->hasMakeVDevice());
    reduceOnOneRank(*coll, ctx);
    // Through v8's table the one part's size is narrowed to its 32 bits (and v8 takes one part); v9+ take several.
    if (version >= 8) gatherAndScatterOnOneRank(*coll, ctx, 1);
    if (version >= 9) gatherAndScatterOnOneRank(*coll, ctx, 3);
    EXPECT_EQ(coll->finalize(ctx), ncclSuccess);
  }
}

// NCCL's v7 and v8 collNet adapters report a host device whatever the plugin says (its v8 net adapter copies the
// type; its collNet one does not); v9 on copy it. The loader did this for v7 only.
TEST(CollNet, OldVersionsReportAHostDeviceAsNcclTakesThem) {
  setenv("NNS_TEST_COLLNET_DEVICE_TYPE", "unpack", 1);
  for (int version : knownNetVersions()) {
    if (version < 7) continue;  // v6 properties have no device type
    SCOPED_TRACE("ncclCollNet_v" + std::to_string(version));
    std::string error;
    auto coll = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", version, &error);
    ASSERT_NE(coll, nullptr) << error;
    void* ctx = nullptr;
    ASSERT_EQ(coll->init(&ctx, 1, nullptr), ncclSuccess);
    ncclNetProperties_v12_t props;
    ASSERT_EQ(coll->getProperties(0, &props), ncclSuccess);
    EXPECT_EQ(props.netDeviceType, version <= 8 ? NCCL_NET_DEVICE_HOST : NCCL_NET_DEVICE_UNPACK);
    EXPECT_EQ(props.netDeviceVersion,
              version <= 8 ? NCCL_NET_DEVICE_INVALID_VERSION : static_cast<int>(NCCL_NET_DEVICE_UNPACK_VERSION));
    EXPECT_EQ(coll->finalize(ctx), ncclSuccess);
  }
  unsetenv("NNS_TEST_COLLNET_DEVICE_TYPE");
}

TEST(CollNet, MoreThanOneRankIsAClearError) {
  std::string error;
  auto coll = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", 12, &error);
  ASSERT_NE(coll, nullptr) << error;
  void* ctx = nullptr;
  ASSERT_EQ(coll->init(&ctx, 1, nullptr), ncclSuccess);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(coll->listen(ctx, 0, handle, &listenComm), ncclSuccess);
  void* handles[2] = {handle, handle};
  void* collComm = nullptr;
  EXPECT_EQ(coll->connect(handles, 2, 0, listenComm, &collComm), ncclInvalidUsage);
  EXPECT_EQ(collComm, nullptr);
  EXPECT_EQ(coll->closeListen(listenComm), ncclSuccess);
}

TEST(CollNet, RejectionsSayWhy) {
  LoadReport report;
  auto net = loadNet(inBuildTree("minimal"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  CollNetReport collReport;
  EXPECT_EQ(loadCollNet(*net, &collReport), nullptr);
  EXPECT_TRUE(collReport.exportedVersions.empty());
  EXPECT_NE(collReport.rejectReason.find("exports no ncclCollNetPlugin_v12..v6"), std::string::npos)
      << collReport.rejectReason;

  auto withColl = loadNet(inBuildTree("one-rank-coll"), &report);
  ASSERT_NE(withColl, nullptr) << reasons(report);
  setenv("NNS_TEST_COLLNET_DEVICES", "0", 1);
  EXPECT_EQ(loadCollNet(*withColl, &collReport), nullptr);
  unsetenv("NNS_TEST_COLLNET_DEVICES");
  EXPECT_EQ(collReport.chosenVersion, 0);
  EXPECT_EQ(collReport.rejectReason, "no devices") << "as NCCL, a collNet without devices is disabled";
}

TEST(CollNet, ValuesAnOldVersionCannotCarryAreErrors) {
  std::string error;
  char byte = 0;
  void* request = nullptr;
  auto v8 = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", 8, &error);
  ASSERT_NE(v8, nullptr) << error;
  // Refused before the plugin sees the call, so any comm pointer will do.
  EXPECT_EQ(v8->iallreduce(&byte, &byte, &byte, (2ull << 30), ncclInt8, ncclSum, nullptr, nullptr, &request),
            ncclInternalError);
  ncclNetSGE_v12_t parts[2] = {{nullptr, &byte, 1}, {nullptr, &byte, 1}};
  EXPECT_EQ(v8->iallgather(&byte, &byte, 2, parts, 1, 0, 1, nullptr, &request), ncclInternalError)
      << "ncclCollNet_v8 takes one scatter-gather part";
  EXPECT_EQ(v8->ireducescatter(&byte, 2, parts, &byte, 1, 0, 1, ncclInt8, ncclSum, nullptr, &request),
            ncclInternalError);
  ncclNetSGE_v12_t huge = {nullptr, &byte, 8ull << 30};
  EXPECT_EQ(v8->iallgather(&byte, &byte, 1, &huge, 8ull << 30, 0, 8ull << 30, nullptr, &request), ncclInternalError)
      << "a part beyond v8's 32-bit size";
  // At the limits' edges, not far past them: a count one over MAX_NET_SIZE, a part one byte over 512 MiB, each
  // refused by the adapter (its warning), not by the plugin.
  testing::internal::CaptureStderr();
  EXPECT_EQ(v8->iallreduce(&byte, &byte, &byte, (1ull << 30) + 1, ncclInt8, ncclSum, nullptr, nullptr, &request),
            ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("iallreduce of 1073741825 elements exceeds the limit"),
            std::string::npos);
  ncclNetSGE_v12_t justOver = {nullptr, &byte, (512ull << 20) + 1};
  testing::internal::CaptureStderr();
  EXPECT_EQ(v8->iallgather(&byte, &byte, 1, &justOver, justOver.size, 0, justOver.size, nullptr, &request),
            ncclInternalError);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("takes one part of at most 536870912 bytes (got 1 part(s), "
                                                        "536870913 bytes)"),
            std::string::npos);
  EXPECT_EQ(request, nullptr);
  auto v6 = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", 6, &error);
  ASSERT_NE(v6, nullptr) << error;
  void* mhandle = nullptr;
  EXPECT_EQ(v6->regMr(&byte, &byte, static_cast<size_t>(INT_MAX) + 1, NCCL_PTR_HOST, &mhandle), ncclInternalError);
  // A size whose low 32 bits are a small int: cast rather than checked, it reached the plugin as 1 byte, and the
  // registration of 4 GiB + 1 succeeded over one byte.
  testing::internal::CaptureStderr();
  EXPECT_EQ(v6->regMr(&byte, &byte, (1ull << 32) + 1, NCCL_PTR_HOST, &mhandle), ncclInternalError);
  EXPECT_NE(
      testing::internal::GetCapturedStderr().find("regMr of 4294967297 bytes does not fit ncclCollNet_v6's int size"),
      std::string::npos);
  EXPECT_EQ(v6->iallgather(&byte, &byte, 1, parts, 1, 0, 1, nullptr, &request), ncclInvalidUsage)
      << "v6 has no iallgather";
  EXPECT_EQ(openCollNetVersion(kDir + "/libnccl-net-minimal.so", 12, &error), nullptr);
  EXPECT_NE(error.find("does not export ncclCollNetPlugin_v12"), std::string::npos) << error;
}

// The limits' edges themselves are handed on to the plugin: through v8's table an all-reduce of exactly
// MAX_COLLNET_SIZE elements and an all-gather of one part of exactly 512 MiB, through v6's a regMr of INT_MAX bytes.
TEST(CollNet, ValuesAtAnOldVersionsLimitsAreHandedOn) {
  std::string error;
  auto v8 = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", 8, &error);
  ASSERT_NE(v8, nullptr) << error;
  void* ctx = nullptr;
  ASSERT_EQ(v8->init(&ctx, 1, nullptr), ncclSuccess);
  void* listenComm = nullptr;
  void* collComm = nullptr;
  ASSERT_NO_FATAL_FAILURE(connectOneRank(*v8, ctx, &listenComm, &collComm));
  // One rank's all-reduce in place moves nothing, so one byte stands for 2^30 int8 elements the plugin never reads.
  char byte = 0;
  void* request = nullptr;
  ASSERT_EQ(v8->iallreduce(collComm, &byte, &byte, 1ull << 30, ncclInt8, ncclSum, nullptr, nullptr, &request),
            ncclSuccess);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(completedSize(*v8, request), 1 << 30);
  // The all-gather copies its part: two 512 MiB mappings, paged in by the copy only (in huge pages where the kernel
  // has them: 4 KiB pages made the copy take seconds).
  constexpr size_t kPart = 512ull << 20;
  auto map = [] {
    void* p = mmap(nullptr, kPart, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) madvise(p, kPart, MADV_HUGEPAGE);
    return p;
  };
  void* in = map();
  void* out = map();
  ASSERT_NE(in, MAP_FAILED);
  ASSERT_NE(out, MAP_FAILED);
  static_cast<char*>(in)[kPart - 1] = 7;
  ncclNetSGE_v12_t part = {nullptr, out, kPart};
  request = nullptr;
  ASSERT_EQ(v8->iallgather(collComm, in, 1, &part, kPart, 0, kPart, nullptr, &request), ncclSuccess);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(completedSize(*v8, request), static_cast<int>(kPart));
  EXPECT_EQ(static_cast<char*>(out)[kPart - 1], 7);
  munmap(in, kPart);
  munmap(out, kPart);
  EXPECT_EQ(v8->closeColl(collComm), ncclSuccess);
  EXPECT_EQ(v8->closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(v8->finalize(ctx), ncclSuccess);

  auto v6 = openCollNetVersion(kDir + "/libnccl-net-one-rank-coll.so", 6, &error);
  ASSERT_NE(v6, nullptr) << error;
  void* mhandle = nullptr;  // the plugin's regMr keeps the range and touches none of it, so any comm will do
  ASSERT_EQ(v6->regMr(&byte, &byte, INT_MAX, NCCL_PTR_HOST, &mhandle), ncclSuccess);
  EXPECT_NE(mhandle, nullptr);
  EXPECT_EQ(v6->deregMr(&byte, mhandle), ncclSuccess);
}

// As in NCCL, the probe's init is the first user's (the first communicator's): a plugin that sets its state up once
// and frees it at its last finalize works. Finalized after the probe and initialised again, it saw init, finalize,
// init in one loaded copy, which NCCL never does, and that second init found its state freed. An init that asks for
// another comm id gets a context of its own; the kept one is finalized with the Net when no init took it.
TEST(Probe, TheProbesInitIsTheFirstInitsAsInNccl) {
  const std::string path = kDir + "/libnccl-net-once-state.so";
  LoadOptions options = inBuildTree(path);
  options.commId = 7;
  LoadReport report;
  auto net = loadNet(options, &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // held: the record outlives the Net below
  ASSERT_NE(library, nullptr);
  const char* calls = static_cast<const char*>(dlsym(library, "nnsOnceStateCalls"));
  ASSERT_NE(calls, nullptr);
  void* ctx = nullptr;
  ASSERT_EQ(net->init(&ctx, 7, nullptr, hostLogger, nullptr), ncclSuccess) << calls;
  int ndev = 0;
  EXPECT_EQ(net->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1);
  EXPECT_STREQ(calls, "init devices getProperties devices ");
  void* other = nullptr;
  EXPECT_EQ(net->init(&other, 8, nullptr, hostLogger, nullptr), ncclSuccess);  // a second communicator's
  EXPECT_EQ(net->finalize(other), ncclSuccess);
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
  net.reset();
  EXPECT_STREQ(calls, "init devices getProperties devices init finalize finalize ");
  dlclose(library);

  // Loaded and never initialised (a tool that only lists the devices): the probe's context is finalized with the Net.
  net = loadNet(options, &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  calls = static_cast<const char*>(dlsym(library, "nnsOnceStateCalls"));
  const std::string before = calls;
  net.reset();
  EXPECT_EQ(std::string(calls).substr(before.size()), "finalize ");
  dlclose(library);
}

// The once-state test double loaded (its net), with its record of calls read from the calls made from here on.
class OnceStateLoaded : public testing::Test {
 protected:
  void SetUp() override {
    net = loadNet(inBuildTree(kPath), &report);
    ASSERT_NE(net, nullptr) << reasons(report);
    library = dlopen(kPath.c_str(), RTLD_NOW | RTLD_NOLOAD);  // held: the record outlives what a test unloads
    ASSERT_NE(library, nullptr);
    calls = static_cast<const char*>(dlsym(library, "nnsOnceStateCalls"));
    ASSERT_NE(calls, nullptr);
    mark = std::strlen(calls);
  }
  void TearDown() override {
    if (library != nullptr) dlclose(library);
  }
  // The calls since SetUp.
  std::string since() const { return calls + mark; }

  const std::string kPath = kDir + "/libnccl-net-once-state.so";
  LoadReport report;
  std::unique_ptr<Net> net;
  void* library = nullptr;
  const char* calls = nullptr;
  size_t mark = 0;
};

// The same for a collNet: NCCL keeps the collNet context of the init that checked it, with the communicator. The
// loader finalized it after the probe, so a collNet that frees its state at its last finalize found it gone at the
// next init (init, finalize, init in one loaded copy, which NCCL never does).
TEST_F(OnceStateLoaded, TheCollNetProbesInitIsTheFirstInitsAsInNccl) {
  CollNetReport collReport;
  auto coll = loadCollNet(*net, &collReport);
  ASSERT_NE(coll, nullptr) << collReport.rejectReason;
  void* ctx = nullptr;
  ASSERT_EQ(coll->init(&ctx, 0, hostLogger), ncclSuccess) << since();
  int ndev = 0;
  EXPECT_EQ(coll->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1);
  void* other = nullptr;
  EXPECT_EQ(coll->init(&other, 1, hostLogger), ncclSuccess);  // a second communicator's
  EXPECT_EQ(coll->finalize(other), ncclSuccess);
  EXPECT_EQ(coll->finalize(ctx), ncclSuccess);
  coll.reset();
  EXPECT_EQ(since(), "coll-init coll-devices coll-devices coll-init coll-finalize coll-finalize ");
}

// Loaded and never initialised (a tool that only lists what is there): the probe's collNet context is finalized
// with the CollNet, once.
TEST_F(OnceStateLoaded, AProbedCollNetNeverInitialisedIsFinalizedWithIt) {
  CollNetReport collReport;
  auto coll = loadCollNet(*net, &collReport);
  ASSERT_NE(coll, nullptr) << collReport.rejectReason;
  EXPECT_EQ(since(), "coll-init coll-devices ");
  coll.reset();
  EXPECT_EQ(since(), "coll-init coll-devices coll-finalize ");
}

// A collNet rejected after its init succeeded (no devices) is disabled while its library stays loaded, as NCCL
// disables it: a later load refuses it with the first reason, and what the plugin logged then, without initialising
// it again. It called init a second time, which this one (having freed its state at the rejection's finalize) refused
// for another reason.
TEST_F(OnceStateLoaded, ACollNetRejectedAfterItsInitIsDisabledWhileLoaded) {
  CollNetReport collReport;
  ASSERT_EQ(setenv("NNS_ONCE_STATE_COLL_NO_DEVICES", "1", 1), 0);
  EXPECT_EQ(loadCollNet(*net, &collReport), nullptr);
  unsetenv("NNS_ONCE_STATE_COLL_NO_DEVICES");
  EXPECT_EQ(collReport.rejectReason, "no devices (it logged: once-state: the collNet lists no device (asked to))");
  EXPECT_EQ(since(), "coll-init coll-devices coll-finalize ");
  CollNetReport again;
  EXPECT_EQ(loadCollNet(*net, &again), nullptr);
  EXPECT_EQ(
      again.rejectReason,
      "disabled while its library stays loaded: an earlier load rejected this collNet after its init succeeded (" +
          collReport.rejectReason + "), and NCCL does not initialise it again");
  EXPECT_EQ(again.exportedVersions, std::vector<int>{12});
  EXPECT_EQ(since(), "coll-init coll-devices coll-finalize ") << "the disabled collNet was initialised again";
  // The net itself is still in use.
  int ndev = 0;
  EXPECT_EQ(net->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1);
}

// ... and forgotten with the library, as NCCL resets a collNet's state when it unloads the plugin with its last
// communicator: the collNet of a fresh load of the library is probed again (here, and taken). The rejection kept the
// library loaded for the process at first, which also made every later load of the net an init after its finalize.
TEST(Probe, ADisabledCollNetIsForgottenWithItsLibrary) {
  const std::string path = kDir + "/libnccl-net-once-state.so";
  ASSERT_EQ(setenv("NNS_ONCE_STATE_COLL_NO_DEVICES", "1", 1), 0);
  {
    LoadReport report;
    auto net = loadNet(inBuildTree(path), &report);
    ASSERT_NE(net, nullptr) << reasons(report);
    CollNetReport collReport;
    EXPECT_EQ(loadCollNet(*net, &collReport), nullptr);
    EXPECT_EQ(loadCollNet(*net, &collReport), nullptr);
    EXPECT_NE(collReport.rejectReason.find("disabled while its library stays loaded"), std::string::npos)
        << collReport.rejectReason;
  }
  unsetenv("NNS_ONCE_STATE_COLL_NO_DEVICES");
  void* still = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(still, nullptr) << "the library stayed loaded after its net and collNet were gone";
  if (still != nullptr) dlclose(still);
  LoadReport report;
  auto net = loadNet(inBuildTree(path), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  CollNetReport collReport;
  EXPECT_NE(loadCollNet(*net, &collReport), nullptr) << collReport.rejectReason;
}

// A collNet table's makeVDevice is handed on (v9 and later tables have the entry): the loader said it had none.
TEST(Probe, ACollNetsMakeVDeviceIsHandedOn) {
  LoadReport report;
  auto net = loadNet(inBuildTree(kDir + "/libnccl-net-once-state.so"), &report);
  ASSERT_NE(net, nullptr) << reasons(report);
  CollNetReport collReport;
  auto coll = loadCollNet(*net, &collReport);
  ASSERT_NE(coll, nullptr) << collReport.rejectReason;
  ASSERT_TRUE(coll->hasMakeVDevice());
  int before = 0;
  ASSERT_EQ(coll->devices(&before), ncclSuccess);
  ncclNetVDeviceProps_v12_t props{};
  props.ndevs = 1;
  int d = -1;
  EXPECT_EQ(coll->makeVDevice(&d, &props), ncclSuccess);
  EXPECT_EQ(d, before);
  int after = 0;
  EXPECT_EQ(coll->devices(&after), ncclSuccess);
  EXPECT_EQ(after, before + 1);
}

// A plugin rejected after its init ran stays loaded, as in NCCL, which disables it and never unloads it: a v6..v10
// plugin has no finalize in which to stop what its init started (a thread), and unloaded, that thread ran on in
// unmapped code (SIGSEGV).
TEST(Probe, APluginRejectedAfterItsInitStaysLoaded) {
  // Process-wide state is its subject: a second run in one process (--gtest_repeat) finds the library disabled.
  static bool ran = false;
  if (std::exchange(ran, true)) GTEST_SKIP() << "the first run in this process disabled its library for the process";
  const std::string path = kDir + "/libnccl-net-once-state-rejected.so";  // a build of its own: see CMakeLists.txt
  ASSERT_EQ(setenv("NNS_ONCE_STATE_THROW", "devices", 1), 0);
  LoadReport report;
  EXPECT_EQ(loadNet(inBuildTree(path), &report), nullptr);
  unsetenv("NNS_ONCE_STATE_THROW");
  ASSERT_EQ(report.candidates.size(), 1u);
  EXPECT_NE(report.candidates[0].rejectReason.find("devices threw"), std::string::npos);
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(library, nullptr) << "unloaded after its init ran";
  if (library != nullptr) dlclose(library);
}

// ... and disabled for the process, as NCCL disables it: a later load (another communicator's) refuses it with the
// first reason and does not initialise it again. It called init a second time on the same loaded copy (a v6..v10
// plugin's, which this one refuses: "init through ncclNet_v9 returned ncclInternalError").
TEST(Probe, APluginRejectedAfterItsInitIsNotInitialisedAgain) {
  // Process-wide state is its subject: a second run in one process (--gtest_repeat) finds the library disabled.
  static bool ran = false;
  if (std::exchange(ran, true)) GTEST_SKIP() << "the first run in this process disabled its library for the process";
  const std::string path = kDir + "/libnccl-net-shared-init-rejected.so";  // a build of its own: see CMakeLists.txt
  ASSERT_EQ(setenv("NNS_SHARED_INIT_NO_DEVICES", "1", 1), 0);
  for (int load = 1; load <= 3; ++load) {
    LoadReport report;
    EXPECT_EQ(loadNet(inBuildTree(path), &report), nullptr);
    ASSERT_EQ(report.candidates.size(), 1u);
    const std::string& reason = report.candidates[0].rejectReason;
    if (load == 1) {
      EXPECT_EQ(reason.rfind("no devices", 0), 0u) << reason;
    } else {
      EXPECT_EQ(
          reason.rfind("disabled for this process: an earlier load rejected it after its init ran (no devices", 0), 0u)
          << "load " << load << ": " << reason;
    }
  }
  unsetenv("NNS_SHARED_INIT_NO_DEVICES");
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr) << "unloaded after its init ran";
  const auto* inits = static_cast<const int*>(dlsym(library, "nnsSharedInits"));
  ASSERT_NE(inits, nullptr);
  EXPECT_EQ(*inits, 1) << "init called again on the loaded copy";
  dlclose(library);
}

// A C++ plugin whose init or devices throws (a bug: nothing may cross the C ABI) is rejected with the reason, and the
// loader is left sound: the probe's pointer to its warning text was left aimed at a dead string, which the next WARN
// logged on the thread wrote through (ASan: a wild allocation size in std::string::append).
TEST(Probe, APluginThatThrowsIsRejectedWithTheReason) {
  // Process-wide state is its subject: a second run in one process (--gtest_repeat) finds the library disabled.
  static bool ran = false;
  if (std::exchange(ran, true)) GTEST_SKIP() << "the first run in this process disabled its library for the process";
  const std::string path = kDir + "/libnccl-net-once-state-throws.so";  // a build of its own: see CMakeLists.txt
  for (const char* call : {"init", "devices"}) {
    SCOPED_TRACE(call);
    ASSERT_EQ(setenv("NNS_ONCE_STATE_THROW", call, 1), 0);
    LoadReport report;
    EXPECT_EQ(loadNet(inBuildTree(path), &report), nullptr);
    unsetenv("NNS_ONCE_STATE_THROW");
    ASSERT_EQ(report.candidates.size(), 1u);
    EXPECT_NE(report.candidates[0].rejectReason.find(std::string(call) + " threw"), std::string::npos)
        << report.candidates[0].rejectReason;
    EXPECT_NE(report.candidates[0].rejectReason.find("no C entry point may"), std::string::npos)
        << report.candidates[0].rejectReason;
    testing::internal::CaptureStderr();
    hostLogger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "a warning after the rejection: %d", 1);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("a warning after the rejection: 1"), std::string::npos);
  }
}
