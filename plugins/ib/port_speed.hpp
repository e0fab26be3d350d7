// port_speed.hpp: an IB/RoCE port's speed in Mbps, from the verbs codes or from the kernel's sysfs rate text.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

namespace nns_ib {

// Mbps from the port's active_speed/active_width codes (0 when a code is unknown).
inline int portSpeedMbps(int activeSpeed, int activeWidth) {
  int laneMbps = 0;
  switch (activeSpeed) {
    case 1: laneMbps = 2500; break;  // SDR
    case 2: laneMbps = 5000; break;  // DDR
    case 4:                          // QDR
    case 8:                          // FDR10
      laneMbps = 10000;
      break;
    case 16: laneMbps = 14000; break;    // FDR
    case 32: laneMbps = 25000; break;    // EDR
    case 64: laneMbps = 50000; break;    // HDR
    case 128: laneMbps = 100000; break;  // NDR
    default: return 0;
  }
  int lanes = 0;
  switch (activeWidth) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
  }
  return laneMbps * lanes;
}

// Mbps from /sys/class/infiniband/DEV/ports/N/rate ("800 Gb/sec (4X XDR)", "2.5 Gb/sec (1X SDR)"); 0 when the text
// does not start with a positive number. The kernel knows speeds newer than the 8-bit active_speed code (XDR is
// reported only in active_speed_ex, which the compat ibv_query_port leaves out).
inline int rateTextMbps(const std::string& rate) {
  char* end = nullptr;
  double gbps = std::strtod(rate.c_str(), &end);
  if (end == rate.c_str() || !(gbps > 0) || gbps > 1e6) return 0;
  return static_cast<int>(std::lround(gbps * 1000));
}

}  // namespace nns_ib
