// verbs_loader.hpp: libibverbs opened at run time, so the plugin loads on hosts without it and init can say why.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace nns_ib {

// The libibverbs entry points the plugin calls. Data-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq) are
// inline in verbs.h and go through the context's provider table, so they need no symbol here.
struct Verbs {
  ibv_device** (*getDeviceList)(int* count) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  // The exported ibv_query_port symbol fills the whole ibv_port_attr through the provider (verbs.h wraps it in a
  // macro that we cannot use without linking the library).
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) = nullptr;
  // IBVERBS_1.8 (rdma-core >= 28): the registration that honours optional access flags such as
  // IBV_ACCESS_RELAXED_ORDERING. Absent on older libraries.
  ibv_mr* (*regMrIova2)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) = nullptr;
  // Called once in init, before any device is opened, as NCCL's IB transport does: on older kernels, which do not
  // copy pinned pages at fork, it keeps a fork() (or system()) from leaving registered pages copy-on-write,
  // where the NIC would go on using the old page; rdma-core makes it a no-op where the kernel needs none.
  int (*forkInit)() = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;
  // Asynchronous events (a port down, a QP or CQ in error, a device failure), read from the context's async_fd.
  int (*getAsyncEvent)(ibv_context* context, ibv_async_event* event) = nullptr;
  void (*ackAsyncEvent)(ibv_async_event* event) = nullptr;
  const char* (*eventTypeStr)(ibv_event_type type) = nullptr;
};

// Loads libibverbs.so.1 once per process. Returns nullptr and sets *error (dlerror text, missing symbol) on failure.
// Optional symbols (ibv_reg_dmabuf_mr: rdma-core >= 34; ibv_reg_mr_iova2: rdma-core >= 28) stay nullptr when absent.
const Verbs* loadVerbs(std::string* error);

// "IBV_WC_RETRY_EXC_ERR (12): transport retry counter exceeded"-style text for a completion status.
std::string completionStatusText(const Verbs& verbs, ibv_wc_status status);

}  // namespace nns_ib
