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

// One file's settings in file order, as applyNcclConfFiles reads them: whole lines (a NUL ends a line's text; a CR
// before the newline is kept, as NCCL keeps it), '#' lines and lines without a name before the first '=' skipped,
// names and values cut at 1023 bytes (NCCL's buffers). False when the file cannot be opened. The environment is not
// read or changed.
bool readNcclConfFile(const std::string& path, std::vector<std::pair<std::string, std::string>>* settings);

// The engine's log level (NCCL_LOG_WARN, NCCL_LOG_INFO, ...): $NNS_DEBUG's when it names one, else $NCCL_DEBUG's,
// else WARN; NCCL's words in any case (VERSION, WARN, INFO, TRACE: TRACE shows INFO too). Read at each call. Its own
// lines and the plugins' (through the loader's logger) follow it alike.
int debugLevel();
// Whether debugLevel() shows INFO lines.
bool debugInfo();

// The file that set `variable`, or "" when it came from the environment or is unset.
std::string ncclConfOrigin(const std::string& variable);
// Every variable the files set, with the file, in the order they were applied.
const std::vector<std::pair<std::string, std::string>>& ncclConfVariables();

}  // namespace nns::core
