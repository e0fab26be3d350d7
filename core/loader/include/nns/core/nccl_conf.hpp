// nns/core/nccl_conf.hpp: NCCL's configuration files. NCCL reads its variables through ncclGetEnv, which first
// copies the lines of $NCCL_CONF_FILE (or, without it, the user's ~/.nccl.conf) and then of /etc/nccl.conf into the
// environment, never over a variable already set.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nns::core {

// Applies those files to the environment as NCCL does (KEY=VALUE per line, split at the first '=', lines starting
// with '#' skipped, nothing trimmed), once per process: later calls do nothing. Call it before other threads read
// the environment (the loader calls it when it is loaded).
void applyNcclConfFiles();

// The file that set `variable`, or "" when it came from the environment or is unset.
std::string ncclConfOrigin(const std::string& variable);
// Every variable the files set, with the file, in the order they were applied.
const std::vector<std::pair<std::string, std::string>>& ncclConfVariables();

}  // namespace nns::core
