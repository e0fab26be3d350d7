// cpus.hpp: the CPUs a process may run on, as text ("0-3,8"), for the launcher's and the bench's reports.
#pragma once

#include <sched.h>

#include <string>

namespace nns::core {

inline std::string cpuList(const cpu_set_t& set) {
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set) || (cpu > 0 && CPU_ISSET(cpu - 1, &set))) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!list.empty()) list += ',';
    list += std::to_string(cpu);
    if (last > cpu) list += '-' + std::to_string(last);
  }
  return list;
}

// This process's CPUs as text, and how many.
inline std::string ownCpus(int* count = nullptr) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "unknown";
  if (count != nullptr) *count = CPU_COUNT(&set);
  return cpuList(set);
}

}  // namespace nns::core
