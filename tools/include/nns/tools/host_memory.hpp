// host_memory.hpp: how much memory this host can give a process now, for the tools that refuse up front the buffers
// that would not fit (rather than failing later with std::bad_alloc, or waking the OOM killer).
#pragma once

#include <unistd.h>

#include <cstdio>

namespace nns::tools {

// Bytes this host can give a process now without swapping: MemAvailable (what other processes hold is not free),
// else (kernels before 3.14) the physical total; 0 when neither is known, and no check is made.
inline double hostAvailableBytes() {
  if (FILE* meminfo = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof(line), meminfo) != nullptr)
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(meminfo);
    if (found) return static_cast<double>(kib) * 1024.0;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGESIZE);
  return pages > 0 && pageBytes > 0 ? static_cast<double>(pages) * static_cast<double>(pageBytes) : 0;
}

}  // namespace nns::tools
