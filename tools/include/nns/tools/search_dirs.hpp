// search_dirs.hpp: the tools' -L folders checked once parsed: a mistyped one would otherwise look like a folder
// without the plugin (the loader then finds it elsewhere, or not at all, without a word about -L).
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace nns::tools {

// A warning on stderr, "TOOL: warning: search directory DIR: ...", for each of `dirs` that is missing or is not a
// folder; the run goes on (the loader tries the other places, as NCCL would).
inline void warnUnusableSearchDirs(const char* tool, const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    struct stat status {};
    if (stat(dir.c_str(), &status) != 0) {
      std::fprintf(stderr, "%s: warning: search directory %s: %s\n", tool, dir.c_str(), std::strerror(errno));
    } else if (!S_ISDIR(status.st_mode)) {
      std::fprintf(stderr, "%s: warning: search directory %s is not a directory\n", tool, dir.c_str());
    }
  }
}

}  // namespace nns::tools
