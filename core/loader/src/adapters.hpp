// adapters.hpp: one nns::core::Net (and one nns::core::CollNet) per ABI version, each turning an ncclNet_vN
// (ncclCollNet_vN) table into the v12 view — the only place in the host where version differences live (filled the
// way NCCL 2.30 fills them, see net-abi.md §5.3).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "nns/core/collnet.hpp"
#include "nns/core/net.hpp"

namespace nns::core::detail {

// Keeps the dlopen'ed library alive as long as any Net made from it.
struct Library {
  explicit Library(void* handle, std::string path) : handle(handle), path(std::move(path)) {}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* handle;
  std::string path;
  // Never dlclose'd (kept for the process): a plugin whose init succeeded and that was then rejected stays loaded, as
  // in NCCL, which only disables it. One before v11 has no finalize to stop the threads its init started.
  bool keepLoaded = false;
};

// Called once a Library's dlclose unloaded the library: the loader forgets what it recorded against the handle (a
// collNet disabled for the process, which NCCL forgets when it unloads the plugin with its last communicator).
void libraryUnloaded(void* handle);

// Wraps the table `table` (what dlsym gave for ncclNetPlugin_v<version>) of `library`. Returns nullptr, with the
// reason in *defect, for an unknown version or a table that must not be used: an exported symbol that is a function
// or an object smaller than the table, a NULL name, or NULL entries that NCCL calls without a check (net-abi.md
// §5.5). NCCL would crash on such a table rather than try an older version, so callers stop probing there.
std::unique_ptr<Net> makeNetAdapter(int version, const void* table, std::shared_ptr<Library> library,
                                    std::string* defect);

// The same for an ncclCollNet_v<version>_t.
std::unique_ptr<CollNet> makeCollNetAdapter(int version, const void* table, std::shared_ptr<Library> library,
                                            std::string* defect);

// NCCL calls a plugin's init, makeVDevice and finalize (and probes a plugin: init, devices, finalize) under one
// process-wide lock, so a plugin written for NCCL may keep unsynchronised state there; communicators made on several
// threads at once ran a v11+ plugin's init concurrently. The adapters hold this lock in those calls, the loader
// across a whole probe. Recursive: the probe's own calls take it again.
std::unique_lock<std::recursive_mutex> lockPluginLifecycle();

// Keeps `text` (a WARN of the adapters' own: a getProperties that wrote past its version's struct, say) for the
// rejection of the plugin being probed on this thread, if one is; the adapters also print it.
void noteAdapterWarning(const char* text);

// The host-side ceiling NCCL puts on v6..v8 plugins' messages (MAX_NET_SIZE) and collectives (MAX_COLLNET_SIZE).
inline constexpr size_t kLegacyMaxP2pBytes = 1ull << 30;
inline constexpr size_t kLegacyMaxCollBytes = 512ull << 20;

}  // namespace nns::core::detail
