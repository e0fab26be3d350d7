// nns/core/loader.hpp: finds and opens ncclNet plugins the way NCCL does (NCCL_NET_PLUGIN), newest version first,
// and the collNet beside a plugin's net.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nns/core/collnet.hpp"
#include "nns/core/nccl_conf.hpp"
#include "nns/core/net.hpp"

namespace nns::core {

struct LoadOptions {
  // Plugin spec with NCCL_NET_PLUGIN semantics (a name gives libnccl-net-NAME.so, a path is used as is, "none",
  // comma-separated lists). Empty: read NCCL_NET_PLUGIN from the environment; unset there: the project default.
  std::string plugin;
  // Extra directories searched before the dynamic linker's path (e.g. the build tree's lib/).
  std::vector<std::string> searchDirs;
  // Directories searched only after the dynamic linker's own search, for every name of an entry, has found nothing:
  // for a tool that describes what NCCL, which dlopen()s the bare name, would load, with its own lib/ as a last
  // resort (a copy of the plugin on LD_LIBRARY_PATH or in the ld.so cache then wins, as it does in NCCL).
  std::vector<std::string> fallbackDirs;
  // NCCL_NET semantics: only a net whose name is this (compared ignoring case) is taken; the others are skipped
  // before init, as NCCL skips them. Unset: NCCL_NET from the environment, when `readNcclNet`; set there, even to
  // "", it filters (an empty one matches no net, as in NCCL, whose init then fails).
  std::optional<std::string> netName;
  // false: no NCCL_NET filter unless `netName` is set (the tools that test or measure the one plugin they are given).
  bool readNcclNet = true;
  // The comm id the probe's init passes. The probe's context is kept for the first init of the returned Net with
  // this id, no config, hostLogger and no profiler (as NCCL's first communicator's init is its probe); another init
  // gets a context of its own, and the kept one is finalized with the Net.
  uint64_t commId = 0;
};

// Why each candidate was taken or rejected: the paths tried, dlopen's text, the symbols found, what init returned.
struct CandidateReport {
  std::string requested;                // the list entry as the user wrote it
  std::vector<std::string> triedPaths;  // every file name handed to dlopen, in order
  std::string loadedPath;               // the library that opened, if any, as handed to dlopen
  std::string openedFile;               // the file the dynamic linker opened for it (its search resolved a bare name)
  std::vector<int> exportedVersions;    // ncclNetPlugin_vN found, newest first
  int chosenVersion = 0;                // 0 when rejected
  std::string rejectReason;             // empty when chosen
};

struct LoadReport {
  std::vector<CandidateReport> candidates;
};

// Loads the first candidate that opens, exports a known ncclNetPlugin_vN and has devices (init, devices and device
// 0's properties succeed; an exception thrown through the C ABI rejects it too). Returns nullptr (with every
// rejection explained in `report`) when none does. The returned Net owns the library handle and the probe's
// initialised context (LoadOptions::commId).
std::unique_ptr<Net> loadNet(const LoadOptions& options, LoadReport* report);

// The plugin list NCCL would try for `options` (NCCL_NET_PLUGIN semantics): empty for "none" and for a value set
// but empty; entries as written (NCCL keeps spaces), empty ones skipped.
std::vector<std::string> pluginSpecEntries(const LoadOptions& options);

// Why pluginSpecEntries(options) is empty, for a message ("" when it is not): the setting ("none", or
// NCCL_NET_PLUGIN set but empty) names no external plugin, and NCCL would run on its internal nets, which are not
// part of this SDK. Callers add what to do instead (their defaults differ).
std::string noPluginReason(const LoadOptions& options);

// The file names handed to dlopen for one entry, in order: a bare name in `searchDirs` first, then as given; a NAME
// (no '/', not lib*.so) then as libnccl-net-NAME.so; after all of them each bare name in `fallbackDirs`. An entry
// that is a prefix of "STATIC_PLUGIN" (any case) is kProgramItself, as in NCCL.
std::vector<std::string> candidateFiles(const std::string& entry, const std::vector<std::string>& searchDirs,
                                        const std::vector<std::string>& fallbackDirs = {});
// What candidateFiles lists, and openLibrary opens, for the program itself (dlopen(NULL)).
inline constexpr const char* kProgramItself = "(the program itself: NCCL opens a prefix of STATIC_PLUGIN so)";

// The net name NCCL_NET asks for under `options` (LoadOptions::netName), or nullopt for any.
std::optional<std::string> requiredNetName(const LoadOptions& options);

// dlopen(file, RTLD_NOW | RTLD_LOCAL), refusing first what is not a regular file: a FIFO (whose open waits for a
// writer, so dlopen would hang), a device, a directory. A bare name is looked up in LD_LIBRARY_PATH's directories as
// the dynamic linker would, and refused if the first entry of that name is not a regular file. nullptr with `error`
// set (dlopen's text, or what the file is) when it does not open.
void* openLibrary(const std::string& file, std::string* error);

// The dynamic symbols a library defines for others beyond the tables NCCL looks up (ncclNetPlugin_vN,
// ncclCollNetPlugin_vN, ncclTunerPlugin_vN, ncclProfiler_vN) and the linker's own markers, read from its file: names
// the host's own definitions take the place of (interposition), and GNU-unique ones, which every library of the process
// shares and which keep dlclose from unloading it. ELF64 little-endian; false with `error` set for anything else or a
// table outside the file.
struct ElfExports {
  std::vector<std::string> other;   // global or weak, default or protected visibility
  std::vector<std::string> unique;  // STB_GNU_UNIQUE
};
bool readElfExports(const unsigned char* data, size_t size, ElfExports* out, std::string* error);
bool readElfExports(const std::string& path, ElfExports* out, std::string* error);
// The versions N of the tables named `prefix`N (ncclNetPlugin_v, ncclCollNetPlugin_v) a library defines without
// exporting them, newest first: local (static) or hidden in its static symbol table (.symtab), as a C table defined
// without NCCL_NET_EXPORT under -fvisibility=hidden is; dlsym finds none of them, and neither does NCCL. Empty for
// a stripped library (no .symtab: nothing to tell) and for a file that cannot be read.
std::vector<int> unexportedVersions(const unsigned char* data, size_t size, const std::string& prefix);
std::vector<int> unexportedVersions(const std::string& path, const std::string& prefix);
// The first `shown` of `names` (each made printable and cut to 60 characters), joined by ", ", with ", ..." after
// them when there are more: how nccl-net-info and nccl-net-check name a library's leaked symbols.
std::string namesPreview(const std::vector<std::string>& names, size_t shown = 3);

// What one library exports, found without initialising it.
struct LibraryExports {
  std::string path;
  std::vector<int> netVersions;      // ncclNetPlugin_vN, newest first
  std::vector<int> collNetVersions;  // ncclCollNetPlugin_vN, newest first
  std::string error;                 // dlopen's text when it did not open
  ElfExports symbols;                // the rest of what it exports (withSymbols, when it opened)
  std::string symbolsError;          // why those could not be read
};
// withSymbols: also read the file's dynamic symbols (the whole file: only nccl-net-info asks).
LibraryExports inspectLibrary(const std::string& path, bool withSymbols = false);

// LD_LIBRARY_PATH's directories as the dynamic linker splits it: on ':' and ';', every field kept, an empty one (a
// leading, doubled or trailing separator) being the working directory ("."). Set but empty, it names none (the linker
// ignores it; it is not the working directory).
std::vector<std::string> libraryPathDirs();

// Every libnccl-net*.so in `dirs` (and the directories of LD_LIBRARY_PATH, where an empty entry is the working
// directory, as for the dynamic linker, and an empty value names none), sorted, without duplicates.
std::vector<std::string> findPluginLibraries(const std::vector<std::string>& dirs);

// Opens `path` through exactly ncclNetPlugin_v<version> (e.g. to compare versions of one plugin). nullptr and
// `error` set when the library or that symbol is missing.
std::unique_ptr<Net> openNetVersion(const std::string& path, int version, std::string* error);

// Why a library's collNet was taken or not. NCCL looks for ncclCollNetPlugin_vN in the library its net came from;
// a missing or failing collNet only disables collNet, the net is still used.
struct CollNetReport {
  std::string path;                   // the library probed
  std::vector<int> exportedVersions;  // ncclCollNetPlugin_vN found, newest first
  int chosenVersion = 0;              // 0 when none was taken
  std::string rejectReason;           // empty when chosen; says why otherwise (none exported, init, devices)
};

// Loads the collNet of the library `net` was loaded from: probes ncclCollNetPlugin_v12..v6 newest first, adapts the
// chosen version to the v12 view, then calls init and devices as NCCL does (a failure or no device rejects it).
// nullptr, with the reason in `report`, when there is none to use. As with loadNet, the probe's init is kept for the
// first init that asks for the same (comm id 0, hostLogger), and finalized with the CollNet when none took it.
std::unique_ptr<CollNet> loadCollNet(const Net& net, CollNetReport* report);

// Opens `path` through exactly ncclCollNetPlugin_v<version>. nullptr and `error` set when the library or that
// symbol is missing.
std::unique_ptr<CollNet> openCollNetVersion(const std::string& path, int version, std::string* error);

// The versions this host understands, newest first: 12 .. 6.
const std::vector<int>& knownNetVersions();

// The logger the loader gives the plugins it loads (at the probe's init, which they keep): NCCL_DEBUG's levels on
// stderr, as the SDK's stderr logger, each line led by the rank it came from where one is known, as NCCL's lines
// carry their device: "[rank 2] WARN NET/nns-socket : ...". A thread's own rank (a communicator's progress thread)
// wins over the process's; a process whose communicators have different ranks has none, and a plugin's own threads
// then print no label rather than a wrong one.
void hostLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
void setProcessLogRank(int rank);  // each communicator's rank: one rank is the process's, two are none
int setThreadLogRank(int rank);    // -1: none of its own; returns the thread's rank before
int logRank();                     // the rank this thread's lines are led by, -1 for none

}  // namespace nns::core
