/* fake_verbs.c: a TEST DOUBLE of libibverbs, built as libibverbs.so.1 and put first on LD_LIBRARY_PATH of a child
 * process. It stands in for libibverbs where no RDMA device exists, so the nns-ib plugin's device discovery and init
 * can be tested on any host (no root, no HCA, no ib_uverbs). Nothing in it moves data: its data-path calls (memory
 * registration, CQs, QPs) fail with errno ENOSYS or return NULL. It is never installed and never linked by the plugin.
 *
 * Its devices come from the environment variable NNS_FAKE_VERBS (unset or empty: a list of zero devices):
 *
 *   NNS_FAKE_VERBS = HCA [";" HCA]...
 *   HCA            = NAME [" " KEY "=" VALUE]...
 *     link=ib|roce              link layer of every port of the HCA (default ib)
 *     ports=PORT[,PORT]...      one entry per port, numbered from 1 (default: one port, "up")
 *       PORT = up|down [/SPEED/WIDTH]   state; active_speed and active_width as verbs codes (default 32/2: EDR 4x)
 *     node_guid=0x...           ibv_device_attr.node_guid (default 0x1000 + the HCA's position in the list)
 *     sys_image_guid=0x...      ibv_device_attr.sys_image_guid (default 0: not set)
 *     gids=GID[|GID]...         every port's GID table, as IPv6 text; "::" is an empty (all-zero) entry
 *                               (default: one entry, fe80::<position+1> on ib, ::ffff:10.0.0.<position+1> on roce)
 *
 *   e.g. NNS_FAKE_VERBS="mlx5_0 ports=up;mlx5_1 link=roce ports=up/64/2,down sys_image_guid=0xabc gids=::|::"
 *
 * GUIDs are stored as written (no byte-order conversion): the plugin passes them through unchanged.
 * Text that does not parse aborts the process with a message on stderr, so a typo in a test cannot pass unnoticed.
 *
 * Symbols: every mandatory one plugins/ib/verbs_loader.cc binds, except ibv_create_qp when built with
 * FAKE_VERBS_WITHOUT_CREATE_QP (the "libibverbs lacks a symbol" case). The optional ones (ibv_reg_dmabuf_mr,
 * ibv_reg_mr_iova2, ibv_fork_init) are left out on purpose, so the plugin takes its "absent on an old rdma-core" path.
 */
#define _POSIX_C_SOURCE 200809L /* strtok_r, strdup under -std=c99 */

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* verbs.h wraps some entry points in macros (to static inline helpers); the loader looks up the real symbol names. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define FAKE_EXPORT __attribute__((visibility("default")))

enum { kMaxHcas = 16, kMaxPorts = 8, kMaxGids = 16 };

struct FakePort {
  int up;
  int speed;
  int width;
};

struct FakeHca {
  struct ibv_device device; /* first: a struct ibv_device* of the list is a struct FakeHca* */
  int linkLayer;
  int portCount;
  struct FakePort ports[kMaxPorts];
  uint64_t nodeGuid;
  uint64_t sysImageGuid;
  int gidCount;
  union ibv_gid gids[kMaxGids];
};

static struct FakeHca hcas[kMaxHcas];
static int hcaCount = -1; /* -1: NNS_FAKE_VERBS not read yet */

__attribute__((noreturn)) static void fail(const char* what, const char* text) {
  fprintf(stderr, "fake libibverbs: NNS_FAKE_VERBS: %s: \"%s\"\n", what, text);
  abort();
}

static void parsePorts(struct FakeHca* hca, char* text) {
  hca->portCount = 0;
  char* save = NULL;
  for (char* item = strtok_r(text, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
    if (hca->portCount == kMaxPorts) fail("too many ports", item);
    struct FakePort* port = &hca->ports[hca->portCount++];
    port->speed = 32;
    port->width = 2;
    char* codes = strchr(item, '/');
    if (codes != NULL) {
      *codes++ = '\0';
      if (sscanf(codes, "%d/%d", &port->speed, &port->width) != 2) fail("PORT is up|down[/SPEED/WIDTH]", codes);
    }
    if (strcmp(item, "up") == 0)
      port->up = 1;
    else if (strcmp(item, "down") == 0)
      port->up = 0;
    else
      fail("a port state is up or down", item);
  }
  if (hca->portCount == 0) fail("ports= lists no port", text);
}

static void parseGids(struct FakeHca* hca, char* text) {
  hca->gidCount = 0;
  char* save = NULL;
  for (char* item = strtok_r(text, "|", &save); item != NULL; item = strtok_r(NULL, "|", &save)) {
    if (hca->gidCount == kMaxGids) fail("too many GIDs", item);
    if (inet_pton(AF_INET6, item, hca->gids[hca->gidCount++].raw) != 1) fail("a GID is IPv6 text", item);
  }
  if (hca->gidCount == 0) fail("gids= lists no GID", text);
}

static uint64_t parseGuid(const char* text) {
  char* end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0') fail("a GUID is a number such as 0x1234", text);
  return (uint64_t)value;
}

static void parseHca(struct FakeHca* hca, int position, char* text) {
  char* save = NULL;
  char* name = strtok_r(text, " ", &save);
  if (name == NULL) fail("an HCA has no name", text);
  if (strlen(name) >= sizeof(hca->device.name)) fail("HCA name too long", name);
  memset(hca, 0, sizeof(*hca));
  strcpy(hca->device.name, name);
  strcpy(hca->device.dev_name, name);
  hca->device.node_type = IBV_NODE_CA;
  hca->device.transport_type = IBV_TRANSPORT_IB;
  hca->linkLayer = IBV_LINK_LAYER_INFINIBAND;
  hca->portCount = 1;
  hca->ports[0].up = 1;
  hca->ports[0].speed = 32;
  hca->ports[0].width = 2;
  hca->nodeGuid = 0x1000u + (uint64_t)position;
  int gidsGiven = 0;
  for (char* field = strtok_r(NULL, " ", &save); field != NULL; field = strtok_r(NULL, " ", &save)) {
    char* value = strchr(field, '=');
    if (value == NULL) fail("a field is KEY=VALUE", field);
    *value++ = '\0';
    if (strcmp(field, "link") == 0) {
      if (strcmp(value, "ib") == 0)
        hca->linkLayer = IBV_LINK_LAYER_INFINIBAND;
      else if (strcmp(value, "roce") == 0)
        hca->linkLayer = IBV_LINK_LAYER_ETHERNET;
      else
        fail("link is ib or roce", value);
    } else if (strcmp(field, "ports") == 0) {
      parsePorts(hca, value);
    } else if (strcmp(field, "node_guid") == 0) {
      hca->nodeGuid = parseGuid(value);
    } else if (strcmp(field, "sys_image_guid") == 0) {
      hca->sysImageGuid = parseGuid(value);
    } else if (strcmp(field, "gids") == 0) {
      parseGids(hca, value);
      gidsGiven = 1;
    } else {
      fail("unknown key (link, ports, node_guid, sys_image_guid, gids)", field);
    }
  }
  if (!gidsGiven) {
    char gid[64];
    if (hca->linkLayer == IBV_LINK_LAYER_ETHERNET)
      snprintf(gid, sizeof(gid), "::ffff:10.0.0.%d", position + 1);
    else
      snprintf(gid, sizeof(gid), "fe80::%x", position + 1);
    parseGids(hca, gid);
  }
}

static void readEnvironment(void) {
  if (hcaCount >= 0) return;
  hcaCount = 0;
  const char* spec = getenv("NNS_FAKE_VERBS");
  if (spec == NULL || *spec == '\0') return;
  char* copy = strdup(spec);
  if (copy == NULL) abort();
  char* save = NULL;
  for (char* item = strtok_r(copy, ";", &save); item != NULL; item = strtok_r(NULL, ";", &save)) {
    if (hcaCount == kMaxHcas) fail("too many HCAs", item);
    parseHca(&hcas[hcaCount], hcaCount, item);
    ++hcaCount;
  }
  free(copy);
}

static struct FakeHca* hcaOf(struct ibv_context* context) {
  return (struct FakeHca*)context->device;
}

/* ---- discovery: what the double actually implements ---------------------------------------------------------- */

/* One list, NULL-terminated, for every caller (the plugin asks once per process); freeing it is a no-op. */
static struct ibv_device* deviceList[kMaxHcas + 1];

FAKE_EXPORT struct ibv_device** ibv_get_device_list(int* num_devices) {
  readEnvironment();
  for (int i = 0; i < hcaCount; ++i) deviceList[i] = &hcas[i].device;
  deviceList[hcaCount] = NULL;
  if (num_devices != NULL) *num_devices = hcaCount;
  return deviceList;
}

FAKE_EXPORT void ibv_free_device_list(struct ibv_device** list) {
  (void)list;
}

FAKE_EXPORT const char* ibv_get_device_name(struct ibv_device* device) {
  return device->name;
}

FAKE_EXPORT struct ibv_context* ibv_open_device(struct ibv_device* device) {
  struct ibv_context* context = calloc(1, sizeof(*context));
  if (context == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  context->device = device;
  context->cmd_fd = -1;
  context->num_comp_vectors = 1;
  /* A real fd, so the plugin's fcntl(async_fd, O_NONBLOCK) works; no event is ever written to it. */
  context->async_fd = eventfd(0, EFD_CLOEXEC);
  if (context->async_fd < 0) {
    free(context);
    return NULL;
  }
  return context;
}

FAKE_EXPORT int ibv_close_device(struct ibv_context* context) {
  close(context->async_fd);
  free(context);
  return 0;
}

FAKE_EXPORT int ibv_query_device(struct ibv_context* context, struct ibv_device_attr* attr) {
  const struct FakeHca* hca = hcaOf(context);
  memset(attr, 0, sizeof(*attr));
  snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake");
  attr->node_guid = hca->nodeGuid;
  attr->sys_image_guid = hca->sysImageGuid;
  attr->max_qp = 1024;
  attr->max_qp_wr = 1024;
  attr->max_cq = 1024;
  attr->max_cqe = 4096;
  attr->max_mr = 1024;
  attr->max_pd = 16;
  attr->max_sge = 16;
  attr->phys_port_cnt = (uint8_t)hca->portCount;
  return 0;
}

/* verbs.h declares the exported symbol with the prefix struct _compat_ibv_port_attr; like the real library, the
 * double fills the whole struct ibv_port_attr its caller passes (the plugin passes a full one). */
FAKE_EXPORT int ibv_query_port(struct ibv_context* context, uint8_t port_num, struct _compat_ibv_port_attr* compat) {
  const struct FakeHca* hca = hcaOf(context);
  if (port_num < 1 || port_num > hca->portCount) return EINVAL;
  const struct FakePort* port = &hca->ports[port_num - 1];
  struct ibv_port_attr* attr = (struct ibv_port_attr*)compat;
  memset(attr, 0, sizeof(*attr));
  attr->state = port->up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->phys_state = port->up ? 5 : 3; /* LinkUp : Disabled */
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = hca->gidCount;
  attr->pkey_tbl_len = 1;
  attr->lid = hca->linkLayer == IBV_LINK_LAYER_INFINIBAND ? (uint16_t)(port_num + 16 * (hca - hcas)) : 0;
  attr->active_speed = (uint8_t)port->speed;
  attr->active_width = (uint8_t)port->width;
  attr->link_layer = (uint8_t)hca->linkLayer;
  return 0;
}

FAKE_EXPORT int ibv_query_gid(struct ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  const struct FakeHca* hca = hcaOf(context);
  if (port_num < 1 || port_num > hca->portCount || index < 0 || index >= hca->gidCount) {
    errno = EINVAL;
    return -1;
  }
  *gid = hca->gids[index];
  return 0;
}

FAKE_EXPORT struct ibv_pd* ibv_alloc_pd(struct ibv_context* context) {
  struct ibv_pd* pd = calloc(1, sizeof(*pd));
  if (pd == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  pd->context = context;
  pd->handle = 1;
  return pd;
}

FAKE_EXPORT int ibv_dealloc_pd(struct ibv_pd* pd) {
  free(pd);
  return 0;
}

/* ---- the data path: present so the loader binds it, and fails (this double moves no data) --------------------- */

FAKE_EXPORT struct ibv_mr* ibv_reg_mr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  (void)pd, (void)addr, (void)length, (void)access;
  errno = ENOSYS;
  return NULL;
}

FAKE_EXPORT int ibv_dereg_mr(struct ibv_mr* mr) {
  (void)mr;
  return ENOSYS;
}

FAKE_EXPORT struct ibv_cq* ibv_create_cq(struct ibv_context* context, int cqe, void* cq_context,
                                         struct ibv_comp_channel* channel, int comp_vector) {
  (void)context, (void)cqe, (void)cq_context, (void)channel, (void)comp_vector;
  errno = ENOSYS;
  return NULL;
}

FAKE_EXPORT int ibv_destroy_cq(struct ibv_cq* cq) {
  (void)cq;
  return ENOSYS;
}

#ifndef FAKE_VERBS_WITHOUT_CREATE_QP
FAKE_EXPORT struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr) {
  (void)pd, (void)qp_init_attr;
  errno = ENOSYS;
  return NULL;
}
#endif

FAKE_EXPORT int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask) {
  (void)qp, (void)attr, (void)attr_mask;
  return ENOSYS;
}

FAKE_EXPORT int ibv_destroy_qp(struct ibv_qp* qp) {
  (void)qp;
  return ENOSYS;
}

FAKE_EXPORT const char* ibv_wc_status_str(enum ibv_wc_status status) {
  return status == IBV_WC_SUCCESS ? "success" : "failure (fake libibverbs)";
}

/* No asynchronous event is ever pending: the answer of a non-blocking async_fd with nothing to read. */
FAKE_EXPORT int ibv_get_async_event(struct ibv_context* context, struct ibv_async_event* event) {
  (void)context, (void)event;
  errno = EAGAIN;
  return -1;
}

FAKE_EXPORT void ibv_ack_async_event(struct ibv_async_event* event) {
  (void)event;
}

FAKE_EXPORT const char* ibv_event_type_str(enum ibv_event_type event) {
  (void)event;
  return "event (fake libibverbs)";
}
