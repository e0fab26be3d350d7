// gid_choice.hpp: which GID of a RoCE port the plugin uses when NCCL_IB_GID_INDEX is not set, by NCCL's variables
// NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and NCCL_IB_ROCE_VERSION_NUM, in NCCL's order of preference. Pure logic on
// a GID table read elsewhere, so it is tested without a verbs device.
#pragma once

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace nns_ib {

// One entry of a port's GID table.
struct GidEntry {
  int index = 0;
  uint8_t raw[16] = {};
  int roceVersion = 0;  // 1 or 2 from sysfs gid_attrs/types, 0 where it does not say
};

inline bool gidIsIpv4Mapped(const uint8_t* raw) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(raw, prefix, sizeof(prefix)) == 0;
}

// fe80::/10: not routed, so connections through it never leave the subnet (NCCL skips such GIDs).
inline bool gidIsLinkLocal(const uint8_t* raw) {
  return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

// "RoCE v2" -> 2, "IB/RoCE v1" or "RoCE v1" -> 1, anything else 0.
inline int roceVersionOfType(const std::string& type) {
  if (type.find("RoCE v2") != std::string::npos) return 2;
  if (type.find("RoCE v1") != std::string::npos) return 1;
  return 0;
}

// What NCCL's variables ask for. Text that does not parse is named in `problems` and the default kept, as NCCL
// warns and goes on.
struct GidPreference {
  int family = AF_INET;   // NCCL_IB_ADDR_FAMILY: AF_INET (IPv4-mapped GIDs) or AF_INET6 (the others)
  bool hasRange = false;  // NCCL_IB_ADDR_RANGE: address/bits, in that family
  uint8_t prefix[16] = {};
  int prefixBits = 0;
  int roceVersion = 2;  // NCCL_IB_ROCE_VERSION_NUM
  std::vector<std::string> problems;

  static GidPreference fromSettings(const char* family, const char* range, const char* version) {
    GidPreference p;
    if (family != nullptr && *family != '\0') {
      if (std::string(family) == "AF_INET6")
        p.family = AF_INET6;
      else if (std::string(family) != "AF_INET")
        p.problems.push_back(std::string("NCCL_IB_ADDR_FAMILY=") + family + " is neither AF_INET nor AF_INET6");
    }
    if (version != nullptr && *version != '\0') {
      const std::string text = version;
      if (text == "1" || text == "2")
        p.roceVersion = text[0] - '0';
      else
        p.problems.push_back("NCCL_IB_ROCE_VERSION_NUM=" + text + " is neither 1 nor 2");
    }
    if (range != nullptr && *range != '\0') {
      const std::string text = range;
      const size_t slash = text.find('/');
      const int maxBits = p.family == AF_INET ? 32 : 128;
      int bits = -1;
      if (slash != std::string::npos && slash + 1 < text.size() && slash + 4 >= text.size() &&
          text.find_first_not_of("0123456789", slash + 1) == std::string::npos)
        bits = std::stoi(text.substr(slash + 1));
      uint8_t address[16] = {};
      if (bits < 0 || bits > maxBits || inet_pton(p.family, text.substr(0, slash).c_str(), address) != 1) {
        p.problems.push_back("NCCL_IB_ADDR_RANGE=" + text + " is not an " +
                             (p.family == AF_INET ? "AF_INET" : "AF_INET6") + " prefix (address/bits, up to " +
                             std::to_string(maxBits) + " bits)");
      } else {
        p.hasRange = true;
        p.prefixBits = bits;
        std::memcpy(p.prefix, address, p.family == AF_INET ? 4 : 16);
      }
    }
    return p;
  }

  int familyOf(const GidEntry& gid) const { return gidIsIpv4Mapped(gid.raw) ? AF_INET : AF_INET6; }

  bool inRange(const GidEntry& gid) const {
    if (!hasRange) return true;
    const uint8_t* address = family == AF_INET ? gid.raw + 12 : gid.raw;
    for (int bit = 0; bit < prefixBits; ++bit) {
      const uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
      if ((address[bit / 8] & mask) != (prefix[bit / 8] & mask)) return false;
    }
    return true;
  }

  // A GID of the asked family and range that is not link-local: what NCCL's choice looks for.
  bool fits(const GidEntry& gid) const { return familyOf(gid) == family && inRange(gid) && !gidIsLinkLocal(gid.raw); }
};

// The entry to use, in NCCL's order: of the asked family and range before any other, routable before link-local,
// the asked RoCE version before the other, then the lowest index. All-zero entries (no address) are never taken.
// -1 when every entry is zero. *fitted says whether the choice is of the asked family and range.
inline int chooseGid(const std::vector<GidEntry>& table, const GidPreference& preference, bool* fitted) {
  int best = -1;
  int bestRank = -1;
  for (size_t i = 0; i < table.size(); ++i) {
    const GidEntry& gid = table[i];
    bool zero = true;
    for (uint8_t byte : gid.raw) zero = zero && byte == 0;
    if (zero) continue;
    const bool familyAndRange = preference.familyOf(gid) == preference.family && preference.inRange(gid);
    const int rank = (familyAndRange ? 4 : 0) + (gidIsLinkLocal(gid.raw) ? 0 : 2) +
                     (gid.roceVersion == preference.roceVersion ? 1 : 0);
    if (rank > bestRank) {  // strictly better: the lowest index wins a tie
      best = static_cast<int>(i);
      bestRank = rank;
    }
  }
  if (fitted != nullptr) *fitted = best >= 0 && preference.fits(table[static_cast<size_t>(best)]);
  return best < 0 ? -1 : table[static_cast<size_t>(best)].index;
}

}  // namespace nns_ib
