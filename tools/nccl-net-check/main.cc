// nccl-net-check: the conformance harness a vendor runs against their plugin: one line per rule (PASS, FAIL or SKIP
// with the evidence), --json and --junit FILE, --netns to put the two sides in two network namespaces; exit status 1
// on any FAIL, 2 when the plugin does not load, 3 when --netns setup fails, 4 when --netns cannot run here.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "harness.hpp"
#include "netns.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/isolated_probe.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/search_dirs.hpp"

namespace {

constexpr int kExitNetnsSetupFailed = 3;
constexpr int kExitNetnsUnavailable = 4;

// The copies of the plugin and their folders, in the order made, kept in buffers a signal handler can remove them
// from without allocating: removed in the reverse order (files unlinked, folders removed).
struct MadePath {
  char path[PATH_MAX];
  bool folder;
};
MadePath gMadePaths[4];
volatile sig_atomic_t gMadeCount = 0;

void removePeerCopy() {
  for (int i = gMadeCount - 1; i >= 0; --i)
    gMadePaths[i].folder ? rmdir(gMadePaths[i].path) : unlink(gMadePaths[i].path);
  gMadeCount = 0;
}
void noteMade(const std::string& path, bool folder) {
  MadePath& made = gMadePaths[gMadeCount];
  std::snprintf(made.path, sizeof(made.path), "%s", path.c_str());
  made.folder = folder;
  gMadeCount = gMadeCount + 1;
}

// Appends `text` to `out` (async-signal-safe pieces for onTerminate).
char* append(char* out, const char* end, const char* text) {
  while (*text != '\0' && out < end) *out++ = *text++;
  return out;
}

// `sig` in decimal, into `number` (async-signal-safe; signal numbers have at most two digits).
const char* signalNumberText(int sig, char (&number)[4]) {
  number[0] = static_cast<char>('0' + sig / 10 % 10);
  number[1] = static_cast<char>('0' + sig % 10);
  number[2] = '\0';
  return sig >= 10 ? number : number + 1;
}

// The --junit report must be a complete testsuite however the run ends: the plugin not loading, every rule done, or
// a SIGTERM from a CI job's timeout in the middle of a rule. The signal arrives while the main flow waits inside
// runRules for the rule's process, which the handler kills, and the handler must exit then (the run does not go
// on), so "the handler sets a flag and the main flow writes the report" would need runRules to return early; and
// the handler may make async-signal-safe calls only (no allocation, no stdio or iostreams). So the main flow renders
// the report after every rule, in memory and to the file, rewritten atomically (a temporary file beside it, then
// rename): the file is complete up to the last finished rule at every moment. Each such rendering ends in an error
// case standing for what is still to come ("unfinished"), so a run killed outright (SIGKILL, no handler) reads as
// unfinished in CI, never as a short green run. The handler only writes out the latest rendering with that case
// replaced by the rule in progress, "interrupted by signal N", through open, write, close and rename. The rendering
// reaches it through an atomic pointer, and every rendering stays allocated while the handler may read it.
struct JUnitSnapshot {
  std::string head;       // the XML declaration, <testsuite ...> counting the open case as an error, finished cases
  std::string caseStart;  // `  <testcase classname="PLUGIN" name="`
  const char* openCase;   // the open case's name when no rule runs: "load" before the plugin loaded, else "run"
};
std::atomic<const JUnitSnapshot*> gJUnitSnapshot{nullptr};
static_assert(std::atomic<const JUnitSnapshot*>::is_always_lock_free, "read from a signal handler");
char gJUnitPath[PATH_MAX] = "";  // the report
char gJUnitTemp[PATH_MAX] = "";  // written first, then renamed onto the report; "" writes the report in place
pid_t gHarnessPid = 0;           // the processes the harness forks inherit its handler, and must not clean up for it
volatile sig_atomic_t gLoading = 1;

constexpr std::string_view kJUnitEnd = "</testsuite>\n";
// The rest of the open case's line, while the run goes on.
constexpr std::string_view kJUnitUnfinished =
    "\"><error message=\"unfinished: nccl-net-check was stopped (or is still running) before it completed this "
    "report\" type=\"unfinished\"/></testcase>\n";

// Writes all of `text` to `fd` (async-signal-safe). False with errno set on failure (EIO for a write of nothing).
bool writeAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Writes `pieces` as the report (async-signal-safe: called from onTerminate too). False with errno set on failure,
// the temporary file removed.
bool writeJUnitFile(const std::string_view* pieces, size_t count) {
  const bool atomic = gJUnitTemp[0] != '\0';
  const char* target = atomic ? gJUnitTemp : gJUnitPath;
  int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  bool written = true;
  for (size_t i = 0; written && i < count; ++i) written = writeAll(fd, pieces[i]);
  int saved = errno;
  if (close(fd) != 0 && written) {
    written = false;
    saved = errno;
  }
  if (written && atomic && rename(gJUnitTemp, gJUnitPath) != 0) {
    written = false;
    saved = errno;
  }
  if (!written && atomic) unlink(gJUnitTemp);
  errno = saved;
  return written;
}

// --json's object likewise: a pipeline reading stdout gets one object however the run ends. After every rule the
// main flow renders the object so far (the rules finished, their counts) without its closing brace; the handler
// writes it out with `"interrupted": {"signal": N, "rule": NAME or null}` to close it. Every rendering stays
// allocated while the handler may read it (JsonOutput owns them).
std::atomic<const std::string*> gJsonSnapshot{nullptr};
static_assert(std::atomic<const std::string*>::is_always_lock_free, "read from a signal handler");

// From onTerminate: the --json object so far, closed as interrupted by `sig`.
void writeJsonInterrupted(int sig) {
  const std::string* snapshot = gJsonSnapshot.load();
  if (snapshot == nullptr) return;  // no --json, or the object is printed already
  const char* running = nns::check::runningRuleName();
  char number[4];
  // Rule names are rules.cc's fixed names (letters, digits, dashes): no escaping needed.
  writeAll(STDOUT_FILENO, *snapshot);
  writeAll(STDOUT_FILENO, ",\n  \"interrupted\": {\n    \"signal\": ");
  writeAll(STDOUT_FILENO, signalNumberText(sig, number));
  writeAll(STDOUT_FILENO, ",\n    \"rule\": ");
  if (running != nullptr) {
    writeAll(STDOUT_FILENO, "\"");
    writeAll(STDOUT_FILENO, running);
    writeAll(STDOUT_FILENO, "\"");
  } else {
    writeAll(STDOUT_FILENO, "null");
  }
  writeAll(STDOUT_FILENO, "\n  }\n}\n");
}

// From onTerminate: the latest rendering with the case in progress as interrupted by `sig`.
void writeJUnitInterrupted(int sig) {
  const JUnitSnapshot* snapshot = gJUnitSnapshot.load();
  if (snapshot == nullptr) return;  // no --junit, or the final report is written already
  const char* running = nns::check::runningRuleName();
  // Rule names are rules.cc's fixed names (letters, digits, dashes), the open case's a literal: no escaping needed.
  const char* name = running != nullptr ? running : snapshot->openCase;
  char number[4];
  const std::string_view pieces[] = {snapshot->head,
                                     snapshot->caseStart,
                                     name,
                                     "\"><error message=\"interrupted by signal ",
                                     signalNumberText(sig, number),
                                     "\" type=\"interrupted\"/></testcase>\n",
                                     kJUnitEnd};
  writeJUnitFile(pieces, std::size(pieces));
}

// Interrupted: say which rule was running, stop it, write the --junit report, remove the namespaces and the copy,
// and go.
void onTerminate(int sig) {
  // A probe, rule or peer process forked from the harness inherits this handler (and, for the probes, a terminal's
  // or `timeout`'s signal to the whole process group): it just goes, leaving the report and the cleanup to the
  // harness.
  if (getpid() != gHarnessPid) _exit(128 + sig);
  const char* rule = nns::check::runningRuleName();
  if (rule != nullptr || gLoading) {
    char text[256];
    char number[4];
    char* end = text + sizeof(text) - 1;
    char* out = append(text, end, "nccl-net-check: interrupted by signal ");
    out = append(out, end, signalNumberText(sig, number));
    out = append(out, end, rule != nullptr ? " in rule " : " while loading the plugin");
    if (rule != nullptr) out = append(out, end, rule);
    out = append(out, end, "\n");
    (void)!write(STDERR_FILENO, text, static_cast<size_t>(out - text));
  }
  nns::check::killRunningRule();
  writeJUnitInterrupted(sig);
  writeJsonInterrupted(sig);
  nns::check::removeNetnsFromSignalHandler();
  removePeerCopy();
  _exit(128 + sig);
}

// Copies the plugin into a fresh directory so that each peer opens a distinct instance (dlopen of the same file
// would return the already-initialised one), and once more into a folder of that one for every-version-agrees, which
// opens each version on a fresh instance (and whose peers, with --netns, open the first copy). The peers' copy, or
// empty on failure with the reason in `error`; `versionsCopy` is empty when only the second copy failed.
std::string copyPluginForPeers(const std::string& path, std::string* error, std::string* versionsCopy) {
  versionsCopy->clear();
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/nccl-net-check-XXXXXX";
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (mkdtemp(dir.data()) == nullptr) {
    *error = "mkdtemp " + pattern + ": " + std::strerror(errno);
    return "";
  }
  noteMade(dir.data(), true);
  const std::string file = std::filesystem::path(path).filename().string();
  std::string copy = std::string(dir.data()) + "/" + file;
  std::error_code failed;
  std::filesystem::copy_file(path, copy, failed);
  if (failed) {
    *error = "copying " + path + " to " + copy + ": " + failed.message();
    removePeerCopy();
    return "";
  }
  noteMade(copy, false);
  const std::string versions = std::string(dir.data()) + "/versions";
  if (mkdir(versions.c_str(), 0700) == 0) {
    noteMade(versions, true);
    if (std::filesystem::copy_file(path, versions + "/" + file, failed)) {
      *versionsCopy = versions + "/" + file;
      noteMade(*versionsCopy, false);
    } else {
      // A copy cut short (a full disk) is removed, or the directory would stay behind with it.
      std::remove((versions + "/" + file).c_str());
      std::fprintf(stderr, "nccl-net-check: copying %s to %s/: %s (every-version-agrees runs on the rule's instance)\n",
                   path.c_str(), versions.c_str(), failed.message().c_str());
    }
  }
  return copy;
}

// `text` made safe in an XML attribute: markup characters as entities, line breaks and tabs as character
// references (which an attribute keeps), and every other byte outside printable ASCII as \xNN (as
// nns::core::printable writes a plugin's text), since XML 1.0 forbids control characters and a garbled plugin's
// bytes need not be UTF-8: the report always parses.
std::string xmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      default:
        if (nns::core::isPrintableByte(static_cast<unsigned char>(c))) {
          out += c;
        } else {
          char escaped[5];
          std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned char>(c));
          out += escaped;
        }
    }
  }
  return out;
}

// The --junit report (see JUnitSnapshot for why it is rewritten after every rule). Without --junit every call does
// nothing.
class JUnitReport {
 public:
  JUnitReport() = default;
  JUnitReport(const JUnitReport&) = delete;
  JUnitReport& operator=(const JUnitReport&) = delete;
  ~JUnitReport() { gJUnitSnapshot.store(nullptr); }  // before the renderings it may point to go

  // Checks that `path` can be written by writing the first rendering there (or, for what is not a regular file,
  // by access()): a path that cannot be written is a bad argument, not a report silently missing after a run that
  // exits 0. False with the reason otherwise.
  bool start(const std::string& path, const std::string& suite, std::string* error) {
    suite_ = suite;
    // Renamed onto a regular file only: renamed onto a link, a temporary file would replace the link (or, through
    // /dev/stdout, the file the shell's descriptor is open on) rather than write where it points. A link, a FIFO or
    // a device gets the report written in place, once, at the end (or from the handler).
    struct stat status {};
    bool atomic = true;
    if (lstat(path.c_str(), &status) == 0) {
      atomic = S_ISREG(status.st_mode);
      std::error_code unreadable;
      if (std::filesystem::is_directory(path, unreadable)) {  // through a link too
        *error = "it is a directory";
        return false;
      }
      // rename() would replace a read-only file: refuse it as writing it would.
      if (access(path.c_str(), W_OK) != 0) {
        *error = std::strerror(errno);
        return false;
      }
    }
    std::string temp = atomic ? path + ".tmp." + std::to_string(getpid()) : "";
    if (path.size() >= sizeof(gJUnitPath) || temp.size() >= sizeof(gJUnitTemp)) {
      *error = "the path is too long";
      return false;
    }
    std::snprintf(gJUnitPath, sizeof(gJUnitPath), "%s", path.c_str());
    std::snprintf(gJUnitTemp, sizeof(gJUnitTemp), "%s", temp.c_str());
    enabled_ = true;
    if (render(false)) return true;
    *error = std::strerror(errno);
    enabled_ = false;
    gJUnitSnapshot.store(nullptr);
    return false;
  }

  void setSuite(const std::string& suite) { suite_ = suite; }
  void setOpenCase(const char* name) { openCase_ = name; }

  // `kind` is "failure", "error" or "skipped" (nullptr for a pass); `details` becomes its text, when not empty.
  void add(const std::string& name, const char* kind, const std::string& message, const std::string& details = "",
           double seconds = -1) {
    if (!enabled_) return;
    std::string text = "  <testcase classname=\"" + xmlEscape(suite_) + "\" name=\"" + xmlEscape(name) + "\"";
    if (seconds >= 0) {
      char time[32];
      std::snprintf(time, sizeof(time), " time=\"%.3f\"", seconds);
      text += time;
    }
    text += ">";
    if (kind != nullptr) {
      text += std::string("<") + kind + " message=\"" + xmlEscape(message) + "\"";
      text += details.empty() ? "/>" : ">" + xmlEscape(details) + "</" + kind + ">";
    }
    text += "</testcase>\n";
    cases_ += text;
    ++tests_;
    if (kind != nullptr) {
      failures_ += std::strcmp(kind, "failure") == 0;
      errors_ += std::strcmp(kind, "error") == 0;
      skipped_ += std::strcmp(kind, "skipped") == 0;
    }
  }

  void add(const nns::check::RuleResult& r) {
    const char* kind = r.status == nns::check::Status::kFail   ? "failure"
                       : r.status == nns::check::Status::kSkip ? "skipped"
                                                               : nullptr;
    add(r.rule, kind, r.evidence, "", r.seconds);
  }

  // Writes the report: the cases so far and the open one (`final` false: what a signal handler completes), or the
  // whole report. A failure is printed, once: the run goes on, and its verdicts are on stdout.
  void write(bool final) {
    if (enabled_ && !render(final) && !warned_) {
      std::fprintf(stderr, "nccl-net-check: --junit %s: cannot write there: %s\n", gJUnitPath, std::strerror(errno));
      warned_ = true;
    }
  }

 private:
  // write()'s work; false with errno set when the file could not be written.
  bool render(bool final) {
    const int pending = final ? 0 : 1;
    char counts[160];
    std::snprintf(counts, sizeof(counts), "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\">\n",
                  tests_ + pending, failures_, errors_ + pending, skipped_);
    auto snapshot = std::make_unique<JUnitSnapshot>();
    snapshot->head = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"nccl-net-check " +
                     xmlEscape(suite_) + counts + cases_;
    snapshot->caseStart = "  <testcase classname=\"" + xmlEscape(suite_) + "\" name=\"";
    snapshot->openCase = openCase_;
    bool written;
    if (final) {
      const std::string_view pieces[] = {snapshot->head, kJUnitEnd};
      written = writeJUnitFile(pieces, std::size(pieces));
      gJUnitSnapshot.store(nullptr);  // complete: a later signal has nothing to add
    } else {
      gJUnitSnapshot.store(snapshot.get());
      // A link, FIFO or device gets one report, at the end (or from the handler), not one per rule.
      const std::string_view pieces[] = {snapshot->head, snapshot->caseStart, openCase_, kJUnitUnfinished, kJUnitEnd};
      written = gJUnitTemp[0] == '\0' || writeJUnitFile(pieces, std::size(pieces));
      renderings_.push_back(std::move(snapshot));
    }
    return written;
  }

  bool enabled_ = false;
  bool warned_ = false;
  std::string suite_;
  const char* openCase_ = "load";
  std::string cases_;
  int tests_ = 0, failures_ = 0, errors_ = 0, skipped_ = 0;
  std::vector<std::unique_ptr<JUnitSnapshot>> renderings_;  // each one the handler may be reading
};

// --json's object for the signal handler (see gJsonSnapshot), and its printing. Without --json nothing is rendered.
class JsonOutput {
 public:
  explicit JsonOutput(bool enabled) : enabled_(enabled) {}
  JsonOutput(const JsonOutput&) = delete;
  JsonOutput& operator=(const JsonOutput&) = delete;
  ~JsonOutput() { gJsonSnapshot.store(nullptr); }  // before the renderings it may point to go

  // The object as it stands, which an interruption completes.
  void update(const nlohmann::json& object) {
    if (!enabled_) return;
    auto text = std::make_unique<std::string>(dump(object));
    text->pop_back();  // an object dumped with an indent ends in "\n}"
    text->pop_back();
    gJsonSnapshot.store(text.get());
    renderings_.push_back(std::move(text));
  }
  // The final object, on stdout; an interruption after this adds nothing.
  void print(const nlohmann::json& object) {
    gJsonSnapshot.store(nullptr);
    std::printf("%s\n", dump(object).c_str());
    std::fflush(stdout);
  }

 private:
  static std::string dump(const nlohmann::json& object) {
    return object.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  bool enabled_;
  std::vector<std::unique_ptr<std::string>> renderings_;  // each one the handler may be reading
};

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-check: conformance rules for an ncclNet plugin, each side in its own process"};
  nns::check::Options options;
  std::string plugin;
  bool asJson = false;
  bool list = false;
  std::string junit;
  app.add_option("plugin", plugin,
                 "plugin name (libnccl-net-NAME.so) or path, NCCL_NET_PLUGIN semantics (default: $NCCL_NET_PLUGIN)");
  // One directory per -L (repeat it for more): taking several, -L DIR PLUGIN took the plugin as a second directory.
  app.add_option("-L,--search-dir", options.load.searchDirs,
                 "directory searched first for the plugin, one per -L, repeatable (default ../lib beside this tool, "
                 "searched before the dynamic linker's path; nccl-net-info searches it last, as NCCL would not)")
      ->allow_extra_args(false);
  app.add_option("--rules", options.only, "run only these rules")->delimiter(',');
  app.add_option("--skip", options.skip, "run every rule but these (applied after --rules)")->delimiter(',');
  // Zero or less would fail every rule as "hung" and blame the plugin for a typo.
  app.add_option("--call-timeout", options.callTimeoutSeconds, "seconds any one plugin call may take (default 5)")
      ->transform(nns::tools::integerIn(1, 3600));
  app.add_option("--rule-timeout", options.ruleTimeoutSeconds, "seconds one rule may take (default 60)")
      ->transform(nns::tools::integerIn(1, 24 * 3600));
  app.add_option("--peer-death-timeout", options.peerDeathSeconds,
                 "seconds a pending test may take to report a killed peer (default 30: an RDMA NIC's retry timeout)")
      ->transform(nns::tools::integerIn(1, 3600));
  app.add_option("--thread-messages", options.threadMessages,
                 "messages per comm in comms-on-threads (default 30000; fewer where every call is slow, as under "
                 "ThreadSanitizer or an emulated NIC)")
      ->transform(nns::tools::integerIn(100, 10000000));
  app.add_option("--coll-ranks", options.collRanks,
                 "processes (ranks) in each collective of the collnet-* rules, which run when the library exports "
                 "ncclCollNetPlugin_vN (default 3)")
      ->transform(nns::tools::integerIn(1, 8));
  app.add_flag("--json", asJson, "machine-readable output");
  app.add_option("--junit", junit, "also write JUnit XML to this file");
  app.add_flag("--list", list, "list the rules and what each checks");
  bool netns = false;
  app.add_flag("--netns", netns,
               "run the two sides in two network namespaces joined by a veth pair (needs root and iproute2); "
               "sets NCCL_SOCKET_IFNAME and NNS_SOCKET_IFNAME to the veth names unless already set");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  nns::tools::warnUnusableSearchDirs("nccl-net-check", options.load.searchDirs);

  if (list) {
    for (const auto& rule : nns::check::allRules()) std::printf("%-30s %s\n", rule.name, rule.checks);
    return 0;
  }
  // As the other tools: $NCCL_NET_PLUGIN when no plugin is named.
  if (const char* env = std::getenv("NCCL_NET_PLUGIN"); plugin.empty() && env != nullptr) plugin = env;
  if (plugin.empty()) {
    std::fprintf(stderr,
                 "nccl-net-check: no plugin given: name one (a name or a path) before --rules, which takes the "
                 "words after it as rule names, or set NCCL_NET_PLUGIN\n");
    return 2;
  }
  for (const auto* names : {&options.only, &options.skip}) {
    for (const auto& wanted : *names) {
      bool known = false;
      for (const auto& rule : nns::check::allRules()) known = known || wanted == rule.name;
      if (!known) {
        std::fprintf(stderr, "nccl-net-check: no rule named '%s' (--list shows them)\n", wanted.c_str());
        return 2;
      }
    }
  }
  // A selection that leaves nothing to run would report "0 passed, 0 failed" and exit 0: a green run that tested
  // nothing.
  {
    bool any = false;
    for (const auto& rule : nns::check::allRules()) any = any || nns::check::ruleSelected(options, rule.name);
    if (!any) {
      std::fprintf(stderr, "nccl-net-check: --rules and --skip leave no rule to run\n");
      return 2;
    }
  }
  // The JUnit file is written before any rule runs: a path that cannot be written is refused here.
  JUnitReport report;
  if (!junit.empty()) {
    if (std::string error; !report.start(junit, plugin, &error)) {
      std::fprintf(stderr, "nccl-net-check: --junit %s: cannot write there: %s\n", junit.c_str(), error.c_str());
      return 2;
    }
  }
  // With --json, one object on stdout however the run ends (an interruption closes the one so far).
  JsonOutput json(asJson);
  json.update({{"plugin", plugin}, {"loaded", false}, {"rules", nlohmann::json::array()}});
  // Interrupted (Ctrl-C, a CI job's timeout): the rule in progress goes with the harness, with its peers (each rule
  // is a process group of its own, which a terminal's SIGINT does not reach), the --junit report is completed, the
  // --json object closed, and --netns's namespaces are removed. Set before the plugin is loaded, so that a plugin slow
  // to load, interrupted, still leaves a report saying so.
  gHarnessPid = getpid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, onTerminate);
  options.load.plugin = plugin;
  options.load.readNcclNet = false;  // the plugin named is the one tested, whatever NCCL_NET asks of NCCL
  if (options.load.searchDirs.empty()) options.load.searchDirs.push_back(nns::tools::libDirBesideExecutable());
  // Loaded first in a child process, as each rule loads it again in its own: a plugin that crashes or hangs in its
  // constructors, init, devices or getProperties is reported as not loading, naming the call, and never takes the
  // harness down or holds it.
  constexpr const char* kLoaderProbe = "the loader's probe (dlopen, init, devices, getProperties(0), finalize)";
  std::string name, path, filePath;
  int version = 0;
  std::vector<int> collNetVersions;
  std::vector<nns::core::CandidateReport> rejected;
  std::string loadFailure, failedEntry;
  for (const auto& entry : nns::core::pluginSpecEntries(options.load)) {
    auto probe = nns::tools::runIsolated(
        [&](nns::tools::ProbeChannel& channel) {
          nns::core::LoadOptions one = options.load;
          one.plugin = entry + ",";  // a list of one, as the entry is within the list
          nns::core::LoadReport report;
          channel.call(kLoaderProbe);
          auto net = nns::core::loadNet(one, &report);
          for (const auto& c : report.candidates) channel.send({{"candidate", nns::tools::candidateJson(c)}});
          if (net != nullptr) {
            // The file the dynamic linker opened (the loader resolves a bare name found on its search path).
            std::string file = net->path();
            for (const auto& c : report.candidates)
              if (c.rejectReason.empty() && c.chosenVersion != 0 && !c.openedFile.empty()) file = c.openedFile;
            channel.send({{"name", nns::core::printable(net->name())},
                          {"path", net->path()},
                          {"version", net->version()},
                          {"filePath", file},
                          {"collNetVersions", nns::core::inspectLibrary(net->path()).collNetVersions}});
          }
        },
        options.callTimeoutSeconds);
    for (const auto& record : probe.records) {
      if (record.contains("candidate")) rejected.push_back(nns::tools::candidateFromJson(record["candidate"]));
      if (record.contains("version")) {
        name = record["name"].get<std::string>();
        path = record["path"].get<std::string>();
        version = record["version"].get<int>();
        filePath = record["filePath"].get<std::string>();
        collNetVersions = record["collNetVersions"].get<std::vector<int>>();
      }
    }
    if (version != 0) break;
    if (!probe.failure.empty()) {
      loadFailure =
          nns::tools::pinpointFailure(entry, options.load.searchDirs, probe.failure, options.callTimeoutSeconds);
      failedEntry = entry;
      break;  // NCCL would crash or hang here too: it tries no later entry
    }
  }
  if (version == 0) {
    if (const std::string none = nns::core::noPluginReason(options.load); !none.empty()) {
      loadFailure = none;  // no entry to try: say why, where the candidates' reasons go
      failedEntry = plugin;
    }
    std::fprintf(stderr, "nccl-net-check: %s did not load:\n", plugin.c_str());
    for (const auto& c : rejected) std::fprintf(stderr, "  %s: %s\n", c.requested.c_str(), c.rejectReason.c_str());
    if (!loadFailure.empty()) std::fprintf(stderr, "  %s: %s\n", failedEntry.c_str(), loadFailure.c_str());
    if (asJson) {  // still one JSON object on stdout, for a pipeline that parses it
      nlohmann::json candidates = nlohmann::json::array();
      for (const auto& c : rejected)
        candidates.push_back({{"requested", c.requested}, {"rejectReason", c.rejectReason}});
      if (!loadFailure.empty()) candidates.push_back({{"requested", failedEntry}, {"rejectReason", loadFailure}});
      nlohmann::json out = {{"plugin", plugin},
                            {"loaded", false},
                            {"candidates", candidates},
                            {"rules", nlohmann::json::array()},
                            {"passed", 0},
                            {"failed", 0},
                            {"skipped", 0}};
      json.print(out);
    }
    // As in --json, one case saying so, with each candidate's reason.
    std::string reasons;
    for (const auto& c : rejected) reasons += c.requested + ": " + c.rejectReason + "\n";
    if (!loadFailure.empty()) reasons += failedEntry + ": " + loadFailure + "\n";
    std::string summary = plugin + " did not load";
    if (!reasons.empty()) summary += ": " + reasons.substr(0, reasons.find('\n'));
    report.add("load", "error", summary, reasons);
    report.write(true);
    return 2;
  }
  gLoading = 0;
  report.setSuite(name);
  report.setOpenCase("run");
  report.write(false);
  nns::check::NetnsPair namespaces;
  nlohmann::json netnsJson = nullptr;
  // --netns that cannot run: said on stdout (stderr with --json, whose stdout is still one JSON object, no rule run)
  // and in the report; `code` is the exit status.
  auto netnsFailure = [&](const std::string& text, const char* status, int code) {
    std::fprintf(asJson || code == kExitNetnsSetupFailed ? stderr : stdout, "nccl-net-check: %s\n", text.c_str());
    if (asJson) {
      nlohmann::json out = {{"plugin", name},
                            {"path", path},
                            {"version", version},
                            {"loaded", true},
                            {"netns", {{"status", status}, {"error", text}}},
                            {"rules", nlohmann::json::array()},
                            {"passed", 0},
                            {"failed", 0},
                            {"skipped", 0}};
      json.print(out);
    }
    report.add("netns", status, text);
    report.write(true);
    return code;
  };
  if (netns) {
    std::string reason = nns::check::NetnsPair::unavailableReason();
    if (!reason.empty()) return netnsFailure("--netns unavailable: " + reason, "skipped", kExitNetnsUnavailable);
    std::string error;
    bool unsupported = false;
    if (!namespaces.create(&error, &unsupported)) {
      if (unsupported)
        return netnsFailure("--netns unavailable: no network-namespace support here (" + error + ")", "skipped",
                            kExitNetnsUnavailable);
      return netnsFailure("--netns setup failed: " + error, "error", kExitNetnsSetupFailed);
    }
    options.peerLibrary = copyPluginForPeers(filePath, &error, &options.versionsLibrary);
    if (options.peerLibrary.empty()) return netnsFailure("--netns: " + error, "error", kExitNetnsSetupFailed);
    options.listenerNetns = namespaces.listenerNamespace();
    options.peerNetns = namespaces.peerNamespace();
    // Both veth ends share a prefix, so one value selects the right interface on either side.
    setenv("NCCL_SOCKET_IFNAME", namespaces.interfacePrefix().c_str(), 0);
    setenv("NNS_SOCKET_IFNAME", namespaces.interfacePrefix().c_str(), 0);
    netnsJson = {{"listener",
                  {{"namespace", namespaces.listenerNamespace()},
                   {"interface", namespaces.listenerInterface()},
                   {"address", nns::check::NetnsPair::kListenerAddress}}},
                 {"peer",
                  {{"namespace", namespaces.peerNamespace()},
                   {"interface", namespaces.peerInterface()},
                   {"address", nns::check::NetnsPair::kPeerAddress}}},
                 {"NCCL_SOCKET_IFNAME", std::getenv("NCCL_SOCKET_IFNAME")},
                 {"NNS_SOCKET_IFNAME", std::getenv("NNS_SOCKET_IFNAME")}};
  } else {
    // handle-is-self-contained's peer opens this copy: a second instance of the plugin.
    std::string error;
    options.peerLibrary = copyPluginForPeers(filePath, &error, &options.versionsLibrary);
    if (options.peerLibrary.empty())
      std::fprintf(stderr, "nccl-net-check: no second instance for handle-is-self-contained: %s\n", error.c_str());
  }

  if (!asJson) std::printf("nccl-net-check: %s (%s) through ncclNet_v%d\n", name.c_str(), path.c_str(), version);
  // The collnet-* rules apply to a library with a collNet: without one, they are left out of a run that did not
  // name them (a run that names one gets its SKIP, saying why).
  std::string collNetLine;
  if (collNetVersions.empty()) {
    int leftOut = 0;
    for (const auto& rule : nns::check::allRules())
      if (nns::check::isCollNetRule(rule.name) && nns::check::ruleSelected(options, rule.name) &&
          options.only.empty()) {
        options.skip.push_back(rule.name);
        ++leftOut;
      }
    if (leftOut > 0)
      collNetLine =
          "no ncclCollNetPlugin_vN in the library: its " + std::to_string(leftOut) + " collnet-* rules do not apply";
  } else {
    collNetLine = "collNet: the library exports ncclCollNetPlugin_v" + std::to_string(collNetVersions.front()) +
                  (collNetVersions.size() > 1 ? " .. v" + std::to_string(collNetVersions.back()) : "") +
                  "; its rules run " + std::to_string(options.collRanks) + " rank(s) (--coll-ranks)";
  }
  if (!asJson && !collNetLine.empty()) std::printf("%s\n", collNetLine.c_str());
  if (!asJson && netns)
    std::printf("netns: listener in %s (%s %s), peer in %s (%s %s), NCCL_SOCKET_IFNAME=%s NNS_SOCKET_IFNAME=%s\n",
                namespaces.listenerNamespace().c_str(), namespaces.listenerInterface().c_str(),
                nns::check::NetnsPair::kListenerAddress, namespaces.peerNamespace().c_str(),
                namespaces.peerInterface().c_str(), nns::check::NetnsPair::kPeerAddress,
                std::getenv("NCCL_SOCKET_IFNAME"), std::getenv("NNS_SOCKET_IFNAME"));
  // Each rule's line as soon as its verdict is known (a plugin that hangs in several rules holds the run for
  // minutes): on stdout in the text output, where the lines are the table; on stderr with --json, whose stdout is
  // the one object printed at the end.
  auto printLine = [](FILE* out, const nns::check::RuleResult& r) {
    std::fprintf(out, "%-4s %-30s %s (%.1f s)\n", nns::check::statusText(r.status), r.rule.c_str(), r.evidence.c_str(),
                 r.seconds);
    std::fflush(out);
  };
  nlohmann::json out = {{"plugin", name},
                        {"loaded", true},
                        {"path", path},
                        {"version", version},
                        {"netns", netnsJson},
                        {"collNetVersions", collNetVersions},
                        {"collRanks", options.collRanks},
                        {"rules", nlohmann::json::array()}};
  int failed = 0, passed = 0, skipped = 0;
  std::string firstBasicFailure;  // the summary names it: the later failures may be its bug
  auto count = [&]() {
    out["passed"] = passed;
    out["failed"] = failed;
    out["skipped"] = skipped;
  };
  count();
  json.update(out);
  nns::check::runRules(options, [&](const nns::check::RuleResult& r) {
    printLine(asJson ? stderr : stdout, r);
    report.add(r);
    report.write(false);
    failed += r.status == nns::check::Status::kFail;
    if (r.status == nns::check::Status::kFail && firstBasicFailure.empty() && nns::check::isBasicRule(r.rule))
      firstBasicFailure = r.rule;
    passed += r.status == nns::check::Status::kPass;
    skipped += r.status == nns::check::Status::kSkip;
    out["rules"].push_back({{"rule", r.rule},
                            {"status", nns::check::statusText(r.status)},
                            {"evidence", r.evidence},
                            {"seconds", r.seconds}});
    count();
    json.update(out);
  });
  std::string trafficLine;
  if (netns) {
    uint64_t rx = 0, tx = 0;
    std::string error;
    char text[256];
    if (namespaces.listenerTraffic(&rx, &tx, &error)) {
      netnsJson["listenerRxBytes"] = rx;
      netnsJson["listenerTxBytes"] = tx;
      std::snprintf(text, sizeof(text), "netns: %s received %.1f MB and sent %.1f MB across the veth pair\n",
                    namespaces.listenerInterface().c_str(), rx / 1e6, tx / 1e6);
      trafficLine = text;
    } else {
      trafficLine = "netns: no traffic counters: " + error + "\n";
    }
  }
  removePeerCopy();
  namespaces.remove();
  if (asJson) {
    if (netns) out["netns"] = netnsJson;  // with the traffic counters
    json.print(out);
  } else {
    // Before the counts, whose line CI jobs and the tests find where it always was (only --netns's traffic after).
    if (!firstBasicFailure.empty() && failed > 1)
      std::printf(
          "fix the first failing basic rule (%s) first: the other rules build on it, and their failures may be its "
          "bug\n",
          firstBasicFailure.c_str());
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    std::printf("%s", trafficLine.c_str());
  }
  report.write(true);
  return failed > 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-check", argc, argv, runTool);
}
