// verbs_loader.cc: dlopen of libibverbs.so.1 and lookup of every symbol the plugin uses.
#include "verbs_loader.hpp"

#include <dlfcn.h>

#include <mutex>

namespace nns_ib {
namespace {

template <class Function>
bool bind(void* library, const char* symbol, Function* slot, std::string* missing) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
    return false;
  }
  *slot = reinterpret_cast<Function>(address);
  return true;
}

struct LoadedVerbs {
  Verbs verbs;
  bool ok = false;
  std::string error;
};

LoadedVerbs load() {
  LoadedVerbs loaded;
  // RTLD_LOCAL: the verbs symbols stay out of the host's namespace (NCCL may load its own copy for its IB net).
  void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* text = dlerror();
    loaded.error = std::string("cannot load libibverbs.so.1 (install rdma-core/libibverbs1): ") +
                   (text != nullptr ? text : "unknown dlopen error");
    return loaded;
  }
  Verbs& v = loaded.verbs;
  std::string missing;
  bool all = true;
  all &= bind(library, "ibv_get_device_list", &v.getDeviceList, &missing);
  all &= bind(library, "ibv_free_device_list", &v.freeDeviceList, &missing);
  all &= bind(library, "ibv_get_device_name", &v.getDeviceName, &missing);
  all &= bind(library, "ibv_open_device", &v.openDevice, &missing);
  all &= bind(library, "ibv_close_device", &v.closeDevice, &missing);
  all &= bind(library, "ibv_query_device", &v.queryDevice, &missing);
  all &= bind(library, "ibv_query_port", &v.queryPort, &missing);
  all &= bind(library, "ibv_query_gid", &v.queryGid, &missing);
  all &= bind(library, "ibv_alloc_pd", &v.allocPd, &missing);
  all &= bind(library, "ibv_dealloc_pd", &v.deallocPd, &missing);
  all &= bind(library, "ibv_reg_mr", &v.regMr, &missing);
  all &= bind(library, "ibv_dereg_mr", &v.deregMr, &missing);
  all &= bind(library, "ibv_create_cq", &v.createCq, &missing);
  all &= bind(library, "ibv_destroy_cq", &v.destroyCq, &missing);
  all &= bind(library, "ibv_create_qp", &v.createQp, &missing);
  all &= bind(library, "ibv_modify_qp", &v.modifyQp, &missing);
  all &= bind(library, "ibv_destroy_qp", &v.destroyQp, &missing);
  all &= bind(library, "ibv_wc_status_str", &v.wcStatusStr, &missing);
  all &= bind(library, "ibv_get_async_event", &v.getAsyncEvent, &missing);
  all &= bind(library, "ibv_ack_async_event", &v.ackAsyncEvent, &missing);
  all &= bind(library, "ibv_event_type_str", &v.eventTypeStr, &missing);
  if (!all) {
    loaded.error = "libibverbs.so.1 lacks " + missing + " (rdma-core too old?)";
    dlclose(library);
    return loaded;
  }
  std::string optional;
  bind(library, "ibv_reg_dmabuf_mr", &v.regDmabufMr, &optional);  // absent before rdma-core 34: no DMA-BUF
  bind(library, "ibv_reg_mr_iova2", &v.regMrIova2, &optional);    // absent before rdma-core 28: no relaxed ordering
  bind(library, "ibv_fork_init", &v.forkInit, &optional);
  // Never dlclose a working library: MRs and QPs created through it live until the process ends.
  loaded.ok = true;
  return loaded;
}

}  // namespace

const Verbs* loadVerbs(std::string* error) {
  static const LoadedVerbs loaded = load();
  if (!loaded.ok) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.verbs;
}

std::string completionStatusText(const Verbs& verbs, ibv_wc_status status) {
  const char* text = verbs.wcStatusStr != nullptr ? verbs.wcStatusStr(status) : "unknown";
  return std::string(text) + " (ibv_wc_status " + std::to_string(static_cast<int>(status)) + ")";
}

}  // namespace nns_ib
