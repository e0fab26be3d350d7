// executable_dir.hpp: where the running tool lives, and the plugin folder beside it (../lib in a build tree and in
// an install), so that the tools find the project's plugins and each other without PATH or LD_LIBRARY_PATH.
#pragma once

#include <climits>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace nns::tools {

// The directory of this executable (from /proc/self/exe); "" when it cannot be read.
inline std::string executableDir() {
  char path[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "";
  path[length] = '\0';
  std::string text(path);
  return text.substr(0, text.rfind('/'));
}

// ../lib beside this executable, resolved where it exists; "../lib" when the executable's place is unknown.
inline std::string libDirBesideExecutable() {
  const std::string self = executableDir();
  if (self.empty()) return "../lib";
  std::string dir = self + "/../lib";
  char resolved[PATH_MAX];
  return realpath(dir.c_str(), resolved) != nullptr ? resolved : dir;
}

}  // namespace nns::tools
