// libFuzzer target for the small parsers that take text or bytes from users (environment variables, nccl.conf,
// command-line sizes) or from peers (connection handles, unique ids). The first input byte picks the parser, the rest
// is its input. Every parser is checked against invariants (what its header promises, or a plain reference of the
// documented format) and a violated one traps, so a wrong answer is a finding just as a crash or a sanitizer report is.
//
// Deterministic: no clock, no randomness, no real interfaces or files; the environment the parsers read is set per
// input from the input alone (putenv on buffers owned here, or, for nccl.conf, a private map: see below).
#include <arpa/inet.h>
#include <fcntl.h>
#include <pwd.h>
#include <sanitizer/common_interface_defs.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gid_choice.hpp"
#include "hca_filter.hpp"
#include "nccl_net/sdk/env.hpp"
#include "nccl_net/sdk/handle.hpp"
#include "nccl_net/sdk/log.hpp"
#include "nccl_net/sdk/socket.hpp"
#include "nccl_net/sdk/sysfs.hpp"
#include "nns/core/bootstrap.hpp"
#include "nns/core/loader.hpp"
#include "nns/core/nccl_conf.hpp"
#include "nns/core/printable.hpp"
#include "port_speed.hpp"
#if NNS_FUZZ_WITH_CLI11
#include "nns/tools/size_option.hpp"
#endif

namespace {

namespace sdk = nccl_net::sdk;

// A violated invariant: say which, then trap (libFuzzer saves the input as a crash).
#define FUZZ_CHECK(cond)                                                                                  \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      std::fprintf(stderr, "fuzz_parsers: invariant violated at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fflush(stderr);                                                                                \
      __builtin_trap();                                                                                   \
    }                                                                                                     \
  } while (0)

// ---- helpers ---------------------------------------------------------------------------------------------------

// Text that came through the environment, argv or a NUL-terminated id holds no NUL: the part before the first one.
std::string cstr(const std::string& text) {
  return text.substr(0, text.find('\0'));
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// A host the bootstrap can resolve as given: an IPv6 address (a zone after '%' is getaddrinfo's), or a host name or
// IPv4 address made of letters, digits, '-', '.' and '_' (what parseRootAddress promises to have checked).
bool hostLooksValid(const std::string& host) {
  if (host.empty() || host.find('\0') != std::string::npos) return false;
  if (host.find(':') != std::string::npos) {
    in6_addr v6{};
    return inet_pton(AF_INET6, host.substr(0, host.find('%')).c_str(), &v6) == 1;
  }
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

void silentLogger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

// A variable of the real environment whose text lives in a buffer owned here (putenv keeps the pointer; setenv would
// copy, and glibc keeps every copy for the life of the process).
class EnvSlot {
 public:
  explicit EnvSlot(const char* name) : name_(name) {}
  void set(const std::string& value) {
    std::string text = name_ + "=" + value.substr(0, kMaxValue);
    std::memcpy(buffer_, text.c_str(), text.size() + 1);
    putenv(buffer_);
  }
  void unset() { unsetenv(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  static constexpr size_t kMaxValue = 1024;
  std::string name_;
  char buffer_[kMaxValue + 64] = {};
};

// stderr silenced around code that may print per input (a WARN the fuzzer would repeat thousands of times); the
// sanitizers report to a copy of the real stderr meanwhile.
int savedStderr = -1;
int devNull = -1;
struct QuietStderr {
  QuietStderr() {
    if (savedStderr < 0 || devNull < 0) return;
    std::fflush(stderr);
    dup2(devNull, 2);
  }
  ~QuietStderr() {
    if (savedStderr < 0 || devNull < 0) return;
    std::fflush(stderr);
    dup2(savedStderr, 2);
  }
};

// A NCCL_SOCKET_IFNAME or NCCL_IB_HCA spec's prefixes: '^' (exclude), then '=' (exact names), and the list after them.
struct SpecPrefix {
  bool exclude;
  bool exact;
  std::string rest;
};
SpecPrefix specPrefix(const std::string& spec) {
  SpecPrefix p{false, false, spec};
  p.exclude = !p.rest.empty() && p.rest[0] == '^';
  if (p.exclude) p.rest.erase(0, 1);
  p.exact = !p.rest.empty() && p.rest[0] == '=';
  if (p.exact) p.rest.erase(0, 1);
  return p;
}

// ---- 0: NCCL_SOCKET_IFNAME (sdk::InterfaceFilter) --------------------------------------------------------------
// Input: the spec, then interface names to match, one a line.
void fuzzInterfaceFilter(const std::string& input) {
  std::vector<std::string> lines = split(input, '\n');
  const std::string spec = cstr(lines[0]);
  const sdk::InterfaceFilter filter(spec);

  // Reference: "[^][=]name[:port],name[:port],...", the ":port" suffix dropped (NCCL's list syntax), empty names
  // dropped, nothing else trimmed; a list left with no name matches every interface (NCCL's matchIfList).
  const SpecPrefix prefix = specPrefix(spec);
  const bool exclude = prefix.exclude, exact = prefix.exact;
  std::string rest = prefix.rest;
  std::vector<std::string> names;
  for (const std::string& part : split(rest, ',')) {
    const std::string name = part.substr(0, part.find(':'));
    if (!name.empty()) names.push_back(name);
  }
  FUZZ_CHECK(filter.excludes() == exclude);
  FUZZ_CHECK(filter.exact() == exact);
  FUZZ_CHECK(filter.names() == names);

  auto expected = [&](const std::string& name) {
    bool listed = names.empty();
    for (const std::string& n : names) listed = listed || (exact ? name == n : startsWith(name, n));
    return exclude ? !listed : listed;
  };
  for (const std::string& n : names) FUZZ_CHECK(filter.matches(n) == !exclude);  // a listed name is always hit
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string name = cstr(lines[i]);
    FUZZ_CHECK(filter.matches(name) == expected(name));
  }
  FUZZ_CHECK(filter.matches("") == expected(""));
}

// ---- 1: the connection-handle codec (sdk::HandleCodec) ----------------------------------------------------------
// The payloads of the socket/UCX plugins (an id and an address) and of the IB plugin (an address and two words).
struct SocketPayload {
  uint64_t listenId;
  sdk::SocketAddress controlAddress;
};
struct IbPayload {
  sdk::SocketAddress address;
  uint32_t ndevs;
  uint32_t reserved;
};
struct NoStage {};

void checkAddressText(const sdk::SocketAddress& address) {
  const std::string text = address.toString();
  FUZZ_CHECK(!text.empty() && text.size() < INET6_ADDRSTRLEN + 24);
  FUZZ_CHECK(text.find('\0') == std::string::npos);
  if (!address.valid()) FUZZ_CHECK(text == "<invalid>");
  (void)address.isLoopback();
  (void)address.isLinkLocal();
  (void)address.port();
  FUZZ_CHECK(address.length() == sizeof(sockaddr_in) || address.length() == sizeof(sockaddr_in6));
}
void checkPayloadText(const SocketPayload& p) {
  checkAddressText(p.controlAddress);
}
void checkPayloadText(const IbPayload& p) {
  checkAddressText(p.address);
}

// Input: a mode byte, then the handle (or payload) bytes and, for corruption, a position and an xor byte.
template <class Payload>
void fuzzCodec(const std::string& bytes, unsigned mode, uint32_t magic) {
  constexpr size_t kMax = NCCL_NET_HANDLE_MAXSIZE;
  using Codec = sdk::HandleCodec<Payload>;
  constexpr size_t kEncoded = Codec::kEncodedSize;
  const Codec codec(magic, 1);
  unsigned char handle[kMax] = {};
  std::memcpy(handle, bytes.data(), std::min(bytes.size(), kMax));

  if (mode == 0) {
    // Any 128 bytes from a peer: refused, or accepted only as exactly what encode() writes for that payload.
    Payload payload;
    std::memset(&payload, 0xa5, sizeof(payload));
    const ncclResult_t result = codec.decode(handle, &payload);
    FUZZ_CHECK(result == ncclSuccess || result == ncclInternalError || result == ncclInvalidUsage);
    if (result != ncclSuccess) return;
    unsigned char again[kMax];
    FUZZ_CHECK(codec.encode(payload, again) == ncclSuccess);
    FUZZ_CHECK(std::memcmp(again, handle, kEncoded) == 0);
    checkPayloadText(payload);
    return;
  }

  // A payload of the fuzzer's bytes: encode, decode, the same bytes back.
  Payload payload;
  std::memcpy(&payload, handle, sizeof(payload));
  unsigned char encoded[kMax];
  std::memset(encoded, 0xcc, sizeof(encoded));
  FUZZ_CHECK(codec.encode(payload, encoded) == ncclSuccess);
  for (size_t i = kEncoded; i < kMax; ++i) FUZZ_CHECK(encoded[i] == 0);  // the connect stage starts cleared
  FUZZ_CHECK(sdk::ConnectStage<NoStage>::get(encoded) == nullptr);
  Payload back;
  std::memset(&back, 0x5a, sizeof(back));
  FUZZ_CHECK(codec.decode(encoded, &back) == ncclSuccess);
  FUZZ_CHECK(std::memcmp(&back, &payload, sizeof(payload)) == 0);
  checkPayloadText(back);

  if (mode == 1) {
    // One corrupted byte: refused when it lies in the header or payload (FNV-1a changes with any one byte), ignored
    // after them.
    const size_t at = bytes.size() > kMax ? static_cast<unsigned char>(bytes[kMax]) % kMax : 0;
    const unsigned char flip = bytes.size() > kMax + 1 ? static_cast<unsigned char>(bytes[kMax + 1]) | 1 : 1;
    unsigned char corrupt[kMax];
    std::memcpy(corrupt, encoded, kMax);
    corrupt[at] ^= flip;
    Payload out;
    const ncclResult_t result = codec.decode(corrupt, &out);
    if (at < kEncoded) {
      FUZZ_CHECK(result != ncclSuccess);
    } else {
      FUZZ_CHECK(result == ncclSuccess);
      FUZZ_CHECK(std::memcmp(&out, &payload, sizeof(payload)) == 0);
    }
  } else {
    // Another plugin's handle, or another wire version of this one's: refused, the version with ncclInvalidUsage.
    const Codec other(magic ^ 0x01000000u, 1);
    const Codec newer(magic, 2);
    Payload out;
    FUZZ_CHECK(other.decode(encoded, &out) == ncclInternalError);
    FUZZ_CHECK(newer.decode(encoded, &out) == ncclInvalidUsage);
  }
}

void fuzzHandle(const std::string& input) {
  if (input.empty()) return;
  const auto mode = static_cast<unsigned char>(input[0]);
  const std::string bytes = input.substr(1);
  if (mode & 0x10)
    fuzzCodec<IbPayload>(bytes, mode % 3, sdk::handleMagic("nns-ib"));
  else
    fuzzCodec<SocketPayload>(bytes, mode % 3, sdk::handleMagic("nns-socket"));
}

// ---- 2: NNS_ROOT_ADDR and the unique id's host:port (nns::core::parseRootAddress) -------------------------------
void fuzzRootAddress(const std::string& input) {
  const std::string text = cstr(input);
  std::string host = "<untouched>", error;
  int port = -7;
  if (nns::core::parseRootAddress(text, &host, &port, &error)) {
    FUZZ_CHECK(port >= 1 && port <= 65535);
    FUZZ_CHECK(!host.empty());
    FUZZ_CHECK(hostLooksValid(host));
    // What the bootstrap writes back ("[v6]:port" or "host:port") reads as the same root.
    const std::string written =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    std::string host2, error2;
    int port2 = 0;
    FUZZ_CHECK(nns::core::parseRootAddress(written, &host2, &port2, &error2));
    FUZZ_CHECK(host2 == host && port2 == port);
  } else {
    FUZZ_CHECK(!error.empty());
    FUZZ_CHECK(host == "<untouched>" && port == -7);  // nothing written on failure
  }
}

// ---- 3: NCCL_IB_HCA (nns_ib::HcaFilter) --------------------------------------------------------------------------
// Input: the spec, then "device port" queries, one a line.
void fuzzHcaFilter(const std::string& input) {
  std::vector<std::string> lines = split(input, '\n');
  const std::string spec = cstr(lines[0]);
  const nns_ib::HcaFilter filter(spec);

  const SpecPrefix prefix = specPrefix(spec);
  const bool exclude = prefix.exclude, exact = prefix.exact;
  std::string rest = prefix.rest;
  FUZZ_CHECK(filter.excludes() == exclude);
  FUZZ_CHECK(filter.exact() == exact);
  size_t items = 0;
  for (std::string item : split(rest, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) ++items;
  }
  FUZZ_CHECK(filter.entries().size() + filter.invalid().size() == items);
  for (const auto& entry : filter.entries()) {
    FUZZ_CHECK(!entry.name.empty());
    FUZZ_CHECK(entry.name.find(':') == std::string::npos && entry.name.find(',') == std::string::npos);
    FUZZ_CHECK(entry.port == -1 || (entry.port >= 1 && entry.port <= 255));
    // A listed device and port is always hit: selected by an include list, refused by an exclude list.
    FUZZ_CHECK(filter.selects(entry.name, entry.port == -1 ? 1 : entry.port) == !exclude);
  }
  for (const std::string& bad : filter.invalid()) FUZZ_CHECK(!bad.empty());

  auto expected = [&](const std::string& device, int port) {
    // No entry: NCCL's empty list matches every device, inverted by '^'; only malformed entries: the list to select
    // from selects nothing, the one to exclude from excludes nothing.
    if (filter.entries().empty()) return exclude ? !filter.invalid().empty() : filter.invalid().empty();
    bool listed = false;
    for (const auto& entry : filter.entries()) {
      const bool nameHit = exact ? device == entry.name : startsWith(device, entry.name);
      listed = listed || (nameHit && (entry.port == -1 || entry.port == port));
    }
    return exclude ? !listed : listed;
  };
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string query = cstr(lines[i]);
    const size_t space = query.rfind(' ');
    const std::string device = query.substr(0, space);
    const int port = space == std::string::npos ? 1 : std::atoi(query.c_str() + space + 1);
    FUZZ_CHECK(filter.selects(device, port) == expected(device, port));
  }
}

// ---- 4: NCCL_IB_ADDR_FAMILY / NCCL_IB_ADDR_RANGE / NCCL_IB_ROCE_VERSION_NUM and the GID choice ---------------------
// Input: the three values, one a line, then a GID table of 18-byte entries (16 raw bytes, an index, a RoCE version).
void fuzzGidChoice(const std::string& input) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    fields.push_back(cstr(input.substr(start, end - start)));
    start = std::min(end + 1, input.size());
  }
  const std::string table = input.substr(start);
  const std::string& family = fields[0];
  const std::string& range = fields[1];
  const std::string& version = fields[2];
  const auto pref = nns_ib::GidPreference::fromSettings(family.c_str(), range.c_str(), version.c_str());

  const int wantFamily = family == "AF_INET6" ? AF_INET6 : AF_INET;
  const bool familyOk = family.empty() || family == "AF_INET" || family == "AF_INET6";
  const bool versionOk = version.empty() || version == "1" || version == "2";
  FUZZ_CHECK(pref.family == wantFamily);
  FUZZ_CHECK(pref.roceVersion == (version == "1" ? 1 : 2));
  // NCCL_IB_ADDR_RANGE: address/bits, 1 to 3 digits, bits up to the family's width.
  bool rangeOk = range.empty();
  int bits = -1;
  unsigned char address[16] = {};
  if (!range.empty()) {
    const size_t slash = range.find('/');
    if (slash != std::string::npos) {
      const std::string digits = range.substr(slash + 1);
      if (!digits.empty() && digits.size() <= 3 && digits.find_first_not_of("0123456789") == std::string::npos) {
        bits = std::atoi(digits.c_str());
        rangeOk = bits <= (wantFamily == AF_INET ? 32 : 128) &&
                  inet_pton(wantFamily, range.substr(0, slash).c_str(), address) == 1;
      }
    }
  }
  FUZZ_CHECK(pref.hasRange == (!range.empty() && rangeOk));
  if (pref.hasRange) {
    FUZZ_CHECK(pref.prefixBits == bits);
    FUZZ_CHECK(std::memcmp(pref.prefix, address, wantFamily == AF_INET ? 4 : 16) == 0);
  }
  FUZZ_CHECK(pref.problems.empty() == (familyOk && versionOk && rangeOk));

  std::vector<nns_ib::GidEntry> gids;
  for (size_t at = 0; at + 18 <= table.size() && gids.size() < 32; at += 18) {
    nns_ib::GidEntry entry;
    std::memcpy(entry.raw, table.data() + at, 16);
    entry.index = static_cast<unsigned char>(table[at + 16]);
    entry.roceVersion = static_cast<unsigned char>(table[at + 17]) % 3;
    gids.push_back(entry);
  }
  bool fitted = true;
  const int chosen = nns_ib::chooseGid(gids, pref, &fitted);
  // Reference: the best of (asked family and range, routable, asked RoCE version), the first entry on a tie.
  int best = -1, bestRank = -1;
  for (size_t i = 0; i < gids.size(); ++i) {
    const auto& g = gids[i];
    if (std::all_of(std::begin(g.raw), std::end(g.raw), [](uint8_t b) { return b == 0; })) continue;
    const bool ipv4 = nns_ib::gidIsIpv4Mapped(g.raw);
    const int gidFamily = ipv4 ? AF_INET : AF_INET6;
    bool inRange = true;
    if (pref.hasRange) {
      const uint8_t* a = pref.family == AF_INET ? g.raw + 12 : g.raw;
      for (int bit = 0; bit < pref.prefixBits; ++bit) {
        const int mask = 0x80 >> (bit % 8);
        if ((a[bit / 8] & mask) != (pref.prefix[bit / 8] & mask)) inRange = false;
      }
    }
    const bool linkLocal = g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
    const int rank = (gidFamily == pref.family && inRange ? 4 : 0) + (linkLocal ? 0 : 2) +
                     (g.roceVersion == pref.roceVersion ? 1 : 0);
    if (rank > bestRank) {
      best = static_cast<int>(i);
      bestRank = rank;
    }
  }
  FUZZ_CHECK(chosen == (best < 0 ? -1 : gids[static_cast<size_t>(best)].index));
  FUZZ_CHECK(fitted == (best >= 0 && bestRank >= 6));
  for (const auto& g : gids) (void)nns_ib::roceVersionOfType(std::string(reinterpret_cast<const char*>(g.raw), 16));
}

// ---- 5: sysfs text of an IB port (rate, GID type) ----------------------------------------------------------------
void fuzzIbSysfsText(const std::string& input) {
  const std::string text = cstr(input);
  const int mbps = nns_ib::rateTextMbps(text);
  FUZZ_CHECK(mbps >= 0 && mbps <= 1000000000);
  char* end = nullptr;
  const double gbps = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && gbps >= 0.001 && gbps <= 1e6) FUZZ_CHECK(mbps == std::lround(gbps * 1000));
  if (end == text.c_str()) FUZZ_CHECK(mbps == 0);
  const int version = nns_ib::roceVersionOfType(text);
  FUZZ_CHECK(version == 0 || version == 1 || version == 2);
  if (text.find("RoCE") == std::string::npos) FUZZ_CHECK(version == 0);
  if (input.size() >= 2) {
    const int speed = nns_ib::portSpeedMbps(static_cast<unsigned char>(input[0]), static_cast<unsigned char>(input[1]));
    FUZZ_CHECK(speed >= 0 && speed <= 100000 * 12);
  }
}

// ---- 6: nccl.conf (nns::core::readNcclConfFile) ----------------------------------------------------------------
int confFd = -1;
std::string confPath;

void fuzzNcclConf(const std::string& input) {
  if (confFd < 0) return;
  if (ftruncate(confFd, 0) != 0) return;
  if (pwrite(confFd, input.data(), input.size(), 0) != static_cast<ssize_t>(input.size())) return;
  std::vector<std::pair<std::string, std::string>> settings;
  FUZZ_CHECK(nns::core::readNcclConfFile(confPath, &settings));

  // Reference, as nccl_conf.hpp documents it: KEY=VALUE per line, split at the first '=', lines starting with '#'
  // skipped, nothing trimmed (a CR before the newline kept), a NUL ending the line's text, name and value cut at
  // 1023 bytes; every line of any length read whole, in file order.
  std::vector<std::pair<std::string, std::string>> expected;
  std::vector<std::string> lines = split(input, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (std::string line : lines) {
    line = cstr(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t equals = line.find('=');
    if (equals == std::string::npos || equals == 0) continue;
    expected.emplace_back(line.substr(0, std::min<size_t>(equals, 1023)), line.substr(equals + 1, 1023));
  }
  FUZZ_CHECK(settings == expected);
}

// ---- 7: NCCL_NET_PLUGIN lists (nns::core::pluginSpecEntries, candidateFiles)
// -----------------------------------------
void fuzzPluginSpec(const std::string& input) {
  const std::string spec = cstr(input);
  if (spec.empty()) return;  // empty means "read NCCL_NET_PLUGIN", not a spec
  nns::core::LoadOptions options;
  options.plugin = spec;
  const std::vector<std::string> entries = nns::core::pluginSpecEntries(options);
  std::vector<std::string> expected;
  if (strcasecmp(spec.c_str(), "none") != 0) {
    for (const std::string& part : split(spec, ',')) {
      if (expected.size() >= NCCL_NET_MAX_PLUGINS - 2) break;
      if (!part.empty() && part.size() < 255) expected.push_back(part);
    }
  }
  FUZZ_CHECK(entries == expected);

  const std::vector<std::string> dirs{"/fuzz/a", "/fuzz/b/"};
  for (const std::string& entry : entries) {
    const std::vector<std::string> files = nns::core::candidateFiles(entry, dirs);
    std::vector<std::string> want;
    if (entry.size() <= 13 && strncasecmp(entry.c_str(), "STATIC_PLUGIN", entry.size()) == 0) {
      want = {nns::core::kProgramItself};
    } else {
      std::vector<std::string> names{entry};
      const bool libSo =
          entry.size() >= 6 && startsWith(entry, "lib") && entry.compare(entry.size() - 3, 3, ".so") == 0;
      if (entry.find('/') == std::string::npos && !libSo) names.push_back("libnccl-net-" + entry + ".so");
      for (const std::string& name : names) {
        if (name.find('/') == std::string::npos)
          for (const std::string& dir : dirs) want.push_back(dir + "/" + name);
        want.push_back(name);
      }
    }
    FUZZ_CHECK(files == want);
  }
}

// ---- 8: the launcher's environment (nns::core::launchInfoFromEnvironment)
// --------------------------------------------- Input: NAME=VALUE lines; names outside this list are ignored.
std::vector<EnvSlot>& launchSlots() {
  static std::vector<EnvSlot> slots = [] {
    std::vector<EnvSlot> s;
    for (const char* name : {"NNS_RANK",
                             "NNS_WORLD_SIZE",
                             "NNS_LOCAL_RANK",
                             "RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "TORCHELASTIC_RUN_ID",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_MCA_ess_base_jobid",
                             "PMIX_NAMESPACE",
                             "PMI_JOBID",
                             "PMI_RANK",
                             "PMI_SIZE",
                             "MPI_LOCALRANKID",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_LOCALID",
                             "SLURM_JOB_ID",
                             "SLURM_STEP_ID",
                             "NNS_ROOT_ADDR",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE"})
      s.emplace_back(name);
    return s;
  }();
  return slots;
}

void fuzzLaunchEnvironment(const std::string& input) {
  auto& slots = launchSlots();
  for (EnvSlot& slot : slots) slot.unset();
  bool rootGiven = false;
  for (const std::string& raw : split(input, '\n')) {
    const std::string line = cstr(raw);
    const size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = line.substr(0, equals);
    for (EnvSlot& slot : slots) {
      if (slot.name() != name) continue;
      slot.set(line.substr(equals + 1));
    }
  }
  // Set but empty is unset (a script's NNS_ROOT_ADDR=$ADDR with ADDR unset); a later line may have emptied it.
  for (const char* name : {"NNS_ROOT_ADDR", "MASTER_ADDR"}) {
    const char* value = std::getenv(name);
    rootGiven = rootGiven || (value != nullptr && *value != '\0');
  }
  nns::core::LaunchInfo info;
  std::string error;
  bool ok;
  {
    QuietStderr quiet;  // the stale-RANK WARN
    ok = nns::core::launchInfoFromEnvironment(&info, &error);
  }
  for (EnvSlot& slot : slots) slot.unset();
  if (!ok) {
    FUZZ_CHECK(!error.empty());
    return;
  }
  FUZZ_CHECK(info.size >= 1 && info.size <= (1 << 24));
  FUZZ_CHECK(info.rank >= 0 && info.rank < info.size);
  FUZZ_CHECK(info.localRank >= -1 && info.localRank <= (1 << 24));
  FUZZ_CHECK(!info.source.empty());
  if (rootGiven || info.size > 1) {
    // What Bootstrap's constructor requires of a root, and a host it can resolve as written.
    FUZZ_CHECK(info.rootPort >= 1 && info.rootPort <= 65535);
    FUZZ_CHECK(hostLooksValid(info.rootHost));
  } else {
    FUZZ_CHECK(info.rootHost == "127.0.0.1" && info.rootPort == 0);
  }
}

// ---- 9: size options of the tools (-b/-e/-i of nccl-net-bench and nccl-net-perf) -----------------------------------
#if NNS_FUZZ_WITH_CLI11
void fuzzSizeOption(const std::string& input) {
  if (input.empty()) return;
  const std::uint64_t minimum = static_cast<unsigned char>(input[0]) & 1;
  const std::string text = cstr(input.substr(1));
  CLI::App app{"fuzz"};
  std::uint64_t bytes = 0x5a5a;
  nns::tools::addSizeOption(app, "-b,--minbytes", bytes, "size", minimum);
  bool accepted = true;
  try {
    std::vector<std::string> args{"--minbytes=" + text};
    app.parse(args);
  } catch (const CLI::ParseError&) {
    accepted = false;
  }
  if (accepted) {
    FUZZ_CHECK(bytes >= minimum && bytes <= nns::tools::kMaxSizeOptionBytes);
    // Not a negative size read as a huge one, or wrapped around to a small one.
    FUZZ_CHECK(text.find('-') == std::string::npos || bytes == 0);
  }
  // Reference for the plain form: decimal digits (no leading zero) and an optional K/M/G/T, powers of 1024.
  std::string digits = text, unit;
  if (!digits.empty() && std::strchr("kKmMgGtT", digits.back()) != nullptr) {
    unit = digits.substr(digits.size() - 1);
    digits.pop_back();
  }
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return;
  unsigned __int128 value = std::strtoull(digits.c_str(), nullptr, 10);
  const int shift = unit.empty() ? 0 : std::string("kmgt").find(static_cast<char>(std::tolower(unit[0]))) * 10 + 10;
  value <<= shift;
  const bool inRange = value >= minimum && value <= nns::tools::kMaxSizeOptionBytes;
  FUZZ_CHECK(accepted == inRange);
  if (accepted) FUZZ_CHECK(bytes == static_cast<std::uint64_t>(value));
}
#endif

// ---- 10: SDK odds and ends: integer knobs (sdk::envInteger), printable text, PCI bus ids, address family
// -------------
EnvSlot& knobSlot() {
  static EnvSlot slot("NNS_FUZZ_KNOB");
  return slot;
}
EnvSlot& familySlot() {
  static EnvSlot slot("NNS_FUZZ_FAMILY");
  return slot;
}

void fuzzSdkMisc(const std::string& input) {
  const std::string text = cstr(input);

  struct Range {
    long fallback, minimum, maximum;
  };
  static const Range kRanges[] = {{64 << 10, 0, 1L << 30}, {-1, -1, 255}, {0, 0, 1}, {10000, 1000, 3600 * 1000}};
  knobSlot().set(text);
  for (const Range& r : kRanges) {
    const long value = sdk::envInteger("NNS_FUZZ_KNOB", r.fallback, r.minimum, r.maximum);
    FUZZ_CHECK(value == r.fallback || (value >= r.minimum && value <= r.maximum));
    // Plain decimal text in range is taken as it is.
    std::string digits = text;
    const bool negative = !digits.empty() && digits[0] == '-';
    if (negative) digits.erase(0, 1);
    if (!digits.empty() && digits.size() <= 12 && digits.find_first_not_of("0123456789") == std::string::npos &&
        (digits.size() == 1 || digits[0] != '0')) {
      const long parsed = (negative ? -1 : 1) * std::atol(digits.c_str());
      if (parsed >= r.minimum && parsed <= r.maximum) FUZZ_CHECK(value == parsed);
      if (parsed < r.minimum || parsed > r.maximum) FUZZ_CHECK(value == r.fallback);
    }
    if (text.empty()) FUZZ_CHECK(value == r.fallback);
  }
  knobSlot().unset();

  familySlot().set(text);
  bool unknown = true;
  const int family = sdk::socketFamilyFromEnv("NNS_FUZZ_FAMILY", &unknown);
  FUZZ_CHECK(family == (text == "AF_INET" ? AF_INET : text == "AF_INET6" ? AF_INET6 : AF_UNSPEC));
  FUZZ_CHECK(unknown == (!text.empty() && text != "AF_INET" && text != "AF_INET6"));
  familySlot().unset();

  const std::string shown = nns::core::printable(text.c_str());
  FUZZ_CHECK(nns::core::isPrintableText(shown));
  size_t firstBad = 0;
  if (nns::core::isPrintableText(text, &firstBad)) {
    FUZZ_CHECK(shown == text);
  } else {
    FUZZ_CHECK(firstBad < text.size() && !nns::core::isPrintableByte(static_cast<unsigned char>(text[firstBad])));
    FUZZ_CHECK(shown.size() > text.size());
  }

  // A PCI function's name: a domain of 4 to 8 hex digits, then ":bb:dd.f" (hex digits), told apart from the back.
  const size_t domainDigits = text.size() >= 8 ? text.size() - 8 : 0;
  bool busId = domainDigits >= 4 && domainDigits <= 8;
  for (size_t i = 0; busId && i < text.size(); ++i) {
    const char c = text[i];
    const size_t back = text.size() - i;  // 8 for the colon after the domain, 1 for the function
    busId = (back == 8 || back == 5) ? c == ':'
            : back == 2              ? c == '.'
                                     : std::isxdigit(static_cast<unsigned char>(c)) != 0;
  }
  FUZZ_CHECK(sdk::isPciBusId(text) == busId);
}

// A plugin file's dynamic symbols (nccl-net-info): any bytes give a verdict, never a read outside them. Inputs that
// start as an ELF64 header get a section-header table at its offset more often than random bytes would.
void fuzzElfExports(const std::string& input) {
  nns::core::ElfExports exports;
  std::string error;
  const bool read =
      nns::core::readElfExports(reinterpret_cast<const unsigned char*>(input.data()), input.size(), &exports, &error);
  FUZZ_CHECK(read == error.empty());
  for (const auto* names : {&exports.other, &exports.unique})
    for (const std::string& name : *names) FUZZ_CHECK(!name.empty() && name.size() < input.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sdk::setLogger(silentLogger);  // decode() and envInteger() WARN on every bad input
  savedStderr = dup(2);
  devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (savedStderr >= 0) __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(savedStderr)));
  // The launcher variables of whatever runs the fuzzer (a CI job under Slurm) must not leak into its inputs.
  for (EnvSlot& slot : launchSlots()) slot.unset();
  for (const char* name : {"NNS_DEBUG", "NCCL_DEBUG", "NNS_JOB_ID"}) unsetenv(name);
  confFd = memfd_create("fuzz-nccl-conf", MFD_CLOEXEC);
  if (confFd >= 0) confPath = "/proc/self/fd/" + std::to_string(confFd);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 12) {
    case 0: fuzzInterfaceFilter(input); break;
    case 1: fuzzHandle(input); break;
    case 2: fuzzRootAddress(input); break;
    case 3: fuzzHcaFilter(input); break;
    case 4: fuzzGidChoice(input); break;
    case 5: fuzzIbSysfsText(input); break;
    case 6: fuzzNcclConf(input); break;
    case 7: fuzzPluginSpec(input); break;
    case 8: fuzzLaunchEnvironment(input); break;
#if NNS_FUZZ_WITH_CLI11
    case 9: fuzzSizeOption(input); break;
#endif
    case 10: fuzzSdkMisc(input); break;
    case 11: fuzzElfExports(input); break;
    default: break;
  }
  return 0;
}
