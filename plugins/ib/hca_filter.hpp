// hca_filter.hpp: NCCL_IB_HCA selection ("[^][=]dev[:port],..."), kept free of verbs so it is unit-tested anywhere.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace nns_ib {

// "mlx5" selects every port of every HCA whose name starts with mlx5; "mlx5_0:1" only port 1 of those;
// "=mlx5_0" the HCA named exactly mlx5_0 (not mlx5_01); a leading "^" turns the list into an exclusion list.
// An empty or unset spec selects everything; "^" with no name after it selects nothing, as in NCCL (its empty list
// matches every device, and the "^" inverts that). Entries with an unparsable port are reported through invalid()
// and left out; an include list left with no entry at all selects nothing.
class HcaFilter {
 public:
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };

  HcaFilter() = default;
  explicit HcaFilter(const std::string& spec) {
    std::string rest = spec;
    if (!rest.empty() && rest[0] == '^') {
      exclude_ = true;
      rest.erase(0, 1);
    }
    if (!rest.empty() && rest[0] == '=') {
      exact_ = true;
      rest.erase(0, 1);
    }
    size_t start = 0;
    while (start <= rest.size()) {
      size_t comma = rest.find(',', start);
      if (comma == std::string::npos) comma = rest.size();
      std::string item = rest.substr(start, comma - start);
      start = comma + 1;
      // Spaces around entries are a common typo in job scripts; NCCL's parser does not accept them either, but
      // dropping them is harmless and saves a confusing "no device".
      while (!item.empty() && item.front() == ' ') item.erase(0, 1);
      while (!item.empty() && item.back() == ' ') item.pop_back();
      if (item.empty()) continue;
      Entry entry;
      size_t colon = item.find(':');
      entry.name = item.substr(0, colon);
      if (colon != std::string::npos) {
        std::string portText = item.substr(colon + 1);
        char* end = nullptr;
        long port = std::strtol(portText.c_str(), &end, 10);
        if (portText.empty() || *end != '\0' || port < 1 || port > 255) {
          invalid_.push_back(item);
          continue;
        }
        entry.port = static_cast<int>(port);
      }
      if (entry.name.empty()) {
        invalid_.push_back(item);
        continue;
      }
      entries_.push_back(entry);
    }
  }

  bool selects(const std::string& device, int port) const {
    // Unset or empty: everything; "^" alone: nothing (NCCL's reading). A list to select from whose every entry was
    // malformed: nothing (a typo must not turn a restriction into "every HCA"; NCCL's parser selects nothing there
    // too); one to exclude from: everything (NCCL reads a bad port as 0, which no port has).
    if (entries_.empty()) return exclude_ ? !invalid_.empty() : invalid_.empty();
    bool listed = false;
    for (const Entry& entry : entries_) {
      bool nameHit = exact_ ? device == entry.name : device.compare(0, entry.name.size(), entry.name) == 0;
      if (nameHit && (entry.port == -1 || entry.port == port)) {
        listed = true;
        break;
      }
    }
    return exclude_ ? !listed : listed;
  }

  bool excludes() const { return exclude_; }
  // "^" (or "^=", "^,") with no entry at all: a list that excludes every device.
  bool excludesEverything() const { return exclude_ && entries_.empty() && invalid_.empty(); }
  bool exact() const { return exact_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const std::vector<std::string>& invalid() const { return invalid_; }

 private:
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<Entry> entries_;
  std::vector<std::string> invalid_;
};

}  // namespace nns_ib
