// NIC fusion (vNIC) grouping as NCCL's ncclTopoMakeVNics would form it, from XML distances between <net> devices.
#pragma once

#include <string>
#include <vector>

#include "nns/topology/xml.h"

namespace nns::topo {

struct FusionDevice {
  int dev = -1;
  std::string name;
  const XmlElement* net = nullptr;
};

struct FusionGroup {
  std::vector<int> devs;  // physical NET devs fused into one virtual NIC
  int distance = 0;       // worst pairwise distance inside the group (PATH_* value, PORT == NVL)
  std::string reason;
};

inline constexpr int kMaxDevsPerNic = 4;  // NCCL_NET_MAX_DEVS_PER_NIC

// Every <net> with a dev attribute, in document order; dev is read as the system builder reads numbers (0x.. hex),
// and one that is not a number in 0..INT32_MAX throws TopologyError naming sourceName and the line.
std::vector<FusionDevice> listNetDevices(const XmlElement& systemRoot, const std::string& sourceName = "<memory>");
// NCCL's XML path distance between two <net> elements: PORT, PIX, PXB, PHB, SYS or DIS.
int netDistance(const XmlElement& systemRoot, const XmlElement& a, const XmlElement& b);
// Auto-merge at mergeLevel (LOC disables fusion); forceMerge is NCCL_NET_FORCE_MERGE ("a,b;c,d"), applied first.
// Only groups of more than one device are returned: a forced group of one device is no vNIC in NCCL either (its
// ncclTopoMakeVnic skips it) but keeps that device out of the automatic fusion, which is said in `notes` when given.
// Throws TopologyError when a forced group does not match.
std::vector<FusionGroup> computeFusionGroups(const XmlElement& systemRoot, int mergeLevel,
                                             const std::string& forceMerge = "",
                                             const std::string& sourceName = "<memory>",
                                             std::vector<std::string>* notes = nullptr);

}  // namespace nns::topo
