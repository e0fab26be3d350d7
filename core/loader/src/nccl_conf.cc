// nccl_conf.cc: NCCL's configuration files applied to the environment, and which file set which variable.
#include "nns/core/nccl_conf.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include <nccl_net/sdk/log.hpp>

namespace nns::core {

namespace {

constexpr size_t kMaxConfText = 1023;

std::vector<std::pair<std::string, std::string>>& confOrigins() {
  static std::vector<std::pair<std::string, std::string>> origins;  // variable, file
  return origins;
}

void applyConfFile(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> settings;
  if (!readNcclConfFile(path, &settings)) return;
  for (const auto& [name, value] : settings) {
    if (std::getenv(name.c_str()) != nullptr) continue;  // the environment wins, and the first file over the later ones
    setenv(name.c_str(), value.c_str(), 0);
    confOrigins().emplace_back(name, path);
  }
}

}  // namespace

int debugLevel() {
  for (const char* name : {"NNS_DEBUG", "NCCL_DEBUG"})
    if (const int level = nccl_net::sdk::detail::debugLevelOf(std::getenv(name)); level >= 0) return level;
  return NCCL_LOG_WARN;
}

bool debugInfo() {
  return debugLevel() >= NCCL_LOG_INFO;
}

bool readNcclConfFile(const std::string& path, std::vector<std::pair<std::string, std::string>>* settings) {
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return false;
  // Whole lines, as NCCL reads them (getline): a fixed buffer cut a long line, and its tail, read as a line of its
  // own, could set a variable from inside a comment.
  char* line = nullptr;
  size_t capacity = 0;
  while (getline(&line, &capacity, file) >= 0) {
    size_t length = std::strlen(line);  // a NUL ends the line's text, as it would end the variable set from it
    if (length > 0 && line[length - 1] == '\n') line[--length] = '\0';
    // A CR before the newline stays in the value, as NCCL keeps it: a file with Windows line endings sets values
    // that end in '\r' (nccl-net-info points them out).
    if (line[0] == '#') continue;
    const char* equals = std::strchr(line, '=');
    if (equals == nullptr || equals == line) continue;
    // NCCL copies name and value into buffers of 1024 bytes: each is cut at 1023 bytes.
    const size_t nameLength = std::min<size_t>(static_cast<size_t>(equals - line), kMaxConfText);
    settings->emplace_back(std::string(line, nameLength), std::string(equals + 1).substr(0, kMaxConfText));
  }
  std::free(line);
  std::fclose(file);
  return true;
}

void applyNcclConfFiles() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* chosen = std::getenv("NCCL_CONF_FILE");
    if (chosen != nullptr && *chosen != '\0') {
      applyConfFile(chosen);
    } else if (const passwd* user = getpwuid(getuid()); user != nullptr && user->pw_dir != nullptr) {
      applyConfFile(std::string(user->pw_dir) + "/.nccl.conf");
    }
    applyConfFile("/etc/nccl.conf");
  });
}

const std::vector<std::pair<std::string, std::string>>& ncclConfVariables() {
  return confOrigins();
}

std::string ncclConfOrigin(const std::string& variable) {
  for (const auto& [name, file] : confOrigins())
    if (name == variable) return file;
  return {};
}

}  // namespace nns::core
