// cpu_shares.hpp: the CPUs this process may use, split into `parts` shares along the machine's topology (hwloc's
// distribution: whole packages, caches and cores before the threads of one core), for a tool that runs several
// processes that each busy-wait: nccl-net-run's ranks, as mpirun binds by default, and nccl-net-perf's two sides.
// Header-only; hwloc is used when the including target defines NNS_TOOLS_HWLOC and links hwloc.
#pragma once

#include <sched.h>

#include <climits>
#include <string>
#include <vector>

#ifdef NNS_TOOLS_HWLOC
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#endif

namespace nns::tools {

// One cpu_set_t per part, or none (and `why` says why: fewer CPUs than parts, no hwloc) when the parts cannot each
// have CPUs of their own. `plural` names the parts in `why` ("ranks", "processes").
inline std::vector<cpu_set_t> cpuShares(int parts, const std::string& plural, std::string* why) {
  std::vector<cpu_set_t> sets;
#ifdef NNS_TOOLS_HWLOC
  hwloc_topology_t topology;
  if (hwloc_topology_init(&topology) != 0) {
    *why = "hwloc could not start";
    return sets;
  }
  hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
  if (hwloc_topology_load(topology) != 0 || hwloc_get_cpubind(topology, allowed, HWLOC_CPUBIND_PROCESS) != 0 ||
      hwloc_topology_restrict(topology, allowed, 0) != 0) {
    *why = "hwloc could not read this machine's topology";
  } else if (int cpus = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_PU); parts > cpus) {
    *why = std::to_string(parts) + " " + plural + " on " + std::to_string(cpus) + " CPU" + (cpus == 1 ? "" : "s");
  } else {
    std::vector<hwloc_cpuset_t> shares(static_cast<size_t>(parts));
    hwloc_obj_t root = hwloc_get_root_obj(topology);
    if (hwloc_distrib(topology, &root, 1, shares.data(), static_cast<unsigned>(parts), INT_MAX, 0) != 0) {
      *why = "hwloc could not spread the " + plural;
    } else {
      for (hwloc_cpuset_t share : shares) {
        cpu_set_t set;
        hwloc_cpuset_to_glibc_sched_affinity(topology, share, &set, sizeof(set));
        sets.push_back(set);
      }
    }
    for (hwloc_cpuset_t share : shares) hwloc_bitmap_free(share);
  }
  hwloc_bitmap_free(allowed);
  hwloc_topology_destroy(topology);
#else
  (void)parts;
  (void)plural;
  *why = "built without hwloc";
#endif
  return sets;
}

}  // namespace nns::tools
