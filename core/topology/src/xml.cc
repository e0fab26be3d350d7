// XML DOM for topology files: parsing through pugixml with line numbers, NCCL-style writing, strict attribute reads.
#include "nns/topology/xml.h"

#include <sys/stat.h>
#include <pugixml.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <unordered_set>

namespace nns::topo {

const std::string* XmlElement::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

void XmlElement::setAttr(std::string_view key, std::string value) {
  for (auto& [k, v] : attrs) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(key), std::move(value));
}

void XmlElement::removeAttr(std::string_view key) {
  attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [&](const auto& kv) { return kv.first == key; }), attrs.end());
}

const XmlElement* XmlElement::child(std::string_view childName) const {
  for (const auto& c : children)
    if (c.name == childName) return &c;
  return nullptr;
}

XmlElement* XmlElement::child(std::string_view childName) {
  for (auto& c : children)
    if (c.name == childName) return &c;
  return nullptr;
}

XmlElement& XmlElement::addChild(std::string childName) {
  children.emplace_back();
  children.back().name = std::move(childName);
  return children.back();
}

namespace {

// Maps byte offsets to 1-based line numbers; pugixml only reports offsets.
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) {
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') newlines_.push_back(i);
  }
  int lineOf(std::ptrdiff_t offset) const {
    if (offset < 0) return 0;
    auto it = std::lower_bound(newlines_.begin(), newlines_.end(), static_cast<std::size_t>(offset));
    return static_cast<int>(it - newlines_.begin()) + 1;
  }

 private:
  std::vector<std::size_t> newlines_;
};

constexpr std::size_t kMaxNcclValueChars = 254;

struct ConvertState {
  const LineIndex& lines;
  const std::string& source;
  std::size_t elements = 0;
};

void convertElement(const pugi::xml_node& from, XmlElement& to, int depth, ConvertState& state) {
  if (depth > kMaxXmlDepth)
    throw TopologyError(state.source + ":" + std::to_string(state.lines.lineOf(from.offset_debug())) +
                        ": elements nested deeper than " + std::to_string(kMaxXmlDepth) + " levels");
  if (++state.elements > kMaxXmlElements)
    throw TopologyError(state.source + ": more than " + std::to_string(kMaxXmlElements) + " elements");
  to.name = from.name();
  to.line = state.lines.lineOf(from.offset_debug());
  // An attribute given twice is refused: NCCL's reader would take the first and ignore the other, whichever was meant.
  std::unordered_set<std::string_view> seen;
  for (const auto& a : from.attributes()) {
    if (!seen.insert(a.name()).second)
      throw TopologyError(state.source + ":" + std::to_string(to.line) + ": <" + to.name + "> has attribute " +
                          a.name() + " twice (\"" + *to.attr(a.name()) + "\" and \"" + a.value() + "\")");
    // NCCL's reader stops at 254 characters of a value (it keeps room for the closing quote in 255) and fails the
    // whole file: "value ... too long (max 255)". A file it refuses is refused here, rather than analysed.
    if (const std::size_t length = std::strlen(a.value()); length >= kMaxNcclValueChars)
      throw TopologyError(state.source + ":" + std::to_string(to.line) + ": <" + to.name + "> attribute " + a.name() +
                          " is " + std::to_string(length) + " characters long; NCCL refuses a value of " +
                          std::to_string(kMaxNcclValueChars) + " or more (\"value ... too long (max 255)\")");
    to.attrs.emplace_back(a.name(), a.value());
  }
  if (to.attrs.size() > kNcclMaxAttributes)
    throw TopologyError(state.source + ":" + std::to_string(to.line) + ": <" + to.name + "> has " +
                        std::to_string(to.attrs.size()) + " attributes; NCCL's XML reader takes at most " +
                        std::to_string(kNcclMaxAttributes) + " (MAX_ATTR_COUNT) and fails the file");
  for (const auto& c : from.children()) {
    if (c.type() == pugi::node_element) {
      if (to.children.size() == kNcclMaxChildren)
        throw TopologyError(state.source + ":" + std::to_string(state.lines.lineOf(c.offset_debug())) + ": <" +
                            to.name + "> (line " + std::to_string(to.line) + ") has more than " +
                            std::to_string(kNcclMaxChildren) +
                            " child elements; NCCL's XML reader takes at most that many (MAX_SUBS) and fails the file");
      to.children.emplace_back();
      convertElement(c, to.children.back(), depth + 1, state);
    } else if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) {
      // NCCL's reader has no text content; whitespace is normal, anything else is a sign of a wrong file.
      std::string_view text = c.value();
      if (text.find_first_not_of(" \t\r\n") != std::string_view::npos)
        throw TopologyError(state.source + ":" + std::to_string(state.lines.lineOf(c.offset_debug())) +
                            ": unexpected text inside <" + to.name + ">");
    }
  }
}

}  // namespace

std::size_t countElements(const XmlElement& root) {
  std::size_t count = 1;
  for (const auto& child : root.children) count += countElements(child);
  return count;
}

void requireNcclNodeLimit(const XmlDocument& doc, std::size_t limit, const char* limitName, const char* kind) {
  if (const std::size_t elements = countElements(doc.root); elements > limit)
    throw TopologyError(doc.sourceName + ": " + std::to_string(elements) + " elements; NCCL reads at most " +
                        std::to_string(limit) + " from a " + kind + " file (" + limitName +
                        ") and fails it (\"too many XML nodes\")");
}

XmlDocument parseXml(std::string_view text, std::string sourceName) {
  if (text.size() > kMaxXmlBytes)
    throw TopologyError(sourceName + ": file is larger than " + std::to_string(kMaxXmlBytes) + " bytes");
  pugi::xml_document doc;
  // parse_default without escapes of unusual kinds; comments and declarations are skipped like NCCL does.
  pugi::xml_parse_result result = doc.load_buffer(text.data(), text.size(), pugi::parse_default, pugi::encoding_utf8);
  LineIndex lines(text);
  if (!result)
    throw TopologyError(sourceName + ":" + std::to_string(lines.lineOf(result.offset)) +
                        ": malformed XML: " + result.description());
  pugi::xml_node rootNode;
  int roots = 0;
  for (const auto& c : doc.children()) {
    if (c.type() == pugi::node_element) {
      rootNode = c;
      ++roots;
    }
  }
  if (roots == 0) throw TopologyError(sourceName + ":1: no root element");
  if (roots > 1)
    throw TopologyError(sourceName + ":" + std::to_string(lines.lineOf(rootNode.offset_debug())) +
                        ": more than one root element");
  XmlDocument out;
  out.sourceName = std::move(sourceName);
  ConvertState state{lines, out.sourceName};
  convertElement(rootNode, out.root, 0, state);
  return out;
}

namespace {

// A pipe made by the shell (--topo-file <(ssh host cat dump.xml), or /dev/stdin of `cat dump.xml | ...`): a chain of
// links ending at /proc/self/fd/N, which the kernel shows as "pipe:[inode]". It has its writer (or had it: then it
// reads empty), where a named FIFO may have none.
bool isAnonymousPipe(const std::string& path) {
  std::filesystem::path at = path;
  for (int hops = 0; hops < 8; ++hops) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(at, ec);
    if (ec) return false;
    if (target.native().rfind("pipe:[", 0) == 0) return true;
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  return false;
}

// Refuses, before any open, what is no regular file (after links) nor such a pipe: a directory, a FIFO (its open
// waits for a writer, forever when none comes), a device (a read from one may wait or never end), a socket.
void requireReadableFile(const std::string& path, const char* kind) {
  struct stat status {};
  if (stat(path.c_str(), &status) != 0 || S_ISREG(status.st_mode)) return;  // a missing file: the open says so
  const std::string notA = std::string(", not a ") + kind + " file";
  if (S_ISDIR(status.st_mode)) throw TopologyError(path + ": is a directory" + notA);
  if (S_ISFIFO(status.st_mode) && isAnonymousPipe(path)) return;
  throw TopologyError(path + ": " +
                      (S_ISFIFO(status.st_mode)  ? "a FIFO" + notA + ": not opened, as its open would wait for a writer"
                       : S_ISCHR(status.st_mode) ? "a character device" + notA + ": not read, as a read may never end"
                       : S_ISBLK(status.st_mode) ? "a block device" + notA
                       : S_ISSOCK(status.st_mode) ? "a socket" + notA
                                                  : "no regular file" + notA) +
                      " (give a regular file)");
}

// NCCL and pugixml read the file as XML in UTF-8 (or ASCII): a UTF-16 file, which Windows tools write, failed with
// pugixml's "Could not determine tag type" at line 1. Said as what it is: a UTF-16 byte order mark, or NUL bytes near
// the start (UTF-16 without a mark, or a binary file).
void requireUtf8Text(const std::string& path, const std::string& text) {
  if (text.size() >= 2 && ((text[0] == '\xff' && text[1] == '\xfe') || (text[0] == '\xfe' && text[1] == '\xff')))
    throw TopologyError(path +
                        ": starts with a UTF-16 byte order mark: a UTF-16 file, not XML in UTF-8, which NCCL reads "
                        "(convert it: iconv -f UTF-16 -t UTF-8)");
  constexpr std::size_t kLooked = 512;
  if (text.find('\0') < kLooked)
    throw TopologyError(path +
                        ": NUL bytes in its first bytes: UTF-16 or a binary file, not XML in UTF-8, which NCCL " +
                        "reads (a UTF-16 file converts with iconv -f UTF-16LE -t UTF-8)");
}

}  // namespace

XmlDocument readXmlFile(const std::string& path, const char* kind) {
  requireReadableFile(path, kind);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TopologyError(path + ": cannot open: " + std::strerror(errno));
  // Read in pieces rather than by seeking to the end: a pipe (--topo-file <(...)) cannot seek. One byte past the limit
  // is enough to know the file is too large, and bounds what /dev/zero-like inputs cost.
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxXmlBytes)
      throw TopologyError(path + ": file is larger than " + std::to_string(kMaxXmlBytes) + " bytes");
  }
  if (in.bad()) throw TopologyError(path + ": cannot read: " + std::strerror(errno));
  requireUtf8Text(path, text);
  return parseXml(text, path);
}

namespace {

void appendEscaped(std::string& out, const std::string& value) {
  for (char c : value) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        // A raw newline or tab in an attribute reads back as a space (XML's attribute normalisation), and other
        // control characters are no XML characters at all: written as references, they read back as they were.
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "&#" + std::to_string(static_cast<int>(c)) + ";";
        } else {
          out += c;
        }
    }
  }
}

void writeElement(const XmlElement& e, int depth, std::string& out) {
  out.append(static_cast<std::size_t>(depth) * 2, ' ');
  out += '<';
  out += e.name;
  for (const auto& [k, v] : e.attrs) {
    out += ' ';
    out += k;
    out += "=\"";
    appendEscaped(out, v);
    out += '"';
  }
  if (e.children.empty()) {
    out += "/>\n";
    return;
  }
  out += ">\n";
  for (const auto& c : e.children) writeElement(c, depth + 1, out);
  out.append(static_cast<std::size_t>(depth) * 2, ' ');
  out += "</";
  out += e.name;
  out += ">\n";
}

}  // namespace

std::string writeXml(const XmlElement& root) {
  std::string out;
  writeElement(root, 0, out);
  return out;
}

void writeXmlFile(const XmlElement& root, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw TopologyError(path + ": cannot write: " + std::strerror(errno));
  errno = 0;
  out << writeXml(root);
  // A short file stays in the stream's buffer until close: its write error (a full disk) shows only there.
  out.close();
  if (!out) throw TopologyError(path + ": write failed" + (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
}

namespace {

std::string where(const XmlElement& e, const std::string& source) {
  return source + ":" + std::to_string(e.line) + ": <" + e.name + ">";
}

std::int64_t parseIntText(const XmlElement& e, std::string_view key, const std::string& text,
                          const std::string& source) {
  // Base auto-detection like NCCL's strtol(str, NULL, 0), but a value must be a whole number in range: silently
  // reading "12abc" as 12 (what strtol does) hides broken files.
  std::size_t first = text.find_first_not_of(" \t");
  std::size_t last = text.find_last_not_of(" \t");
  std::string trimmed = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  if (trimmed.empty())
    throw TopologyError(where(e, source) + " attribute " + std::string(key) + " is empty, expected an integer");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(trimmed.c_str(), &end, 0);
  if (errno == ERANGE)
    throw TopologyError(where(e, source) + " attribute " + std::string(key) + "=\"" + text + "\" is out of range");
  if (end == trimmed.c_str() || *end != '\0')
    throw TopologyError(where(e, source) + " attribute " + std::string(key) + "=\"" + text + "\" is not an integer");
  return v;
}

}  // namespace

const std::string& requireAttr(const XmlElement& element, std::string_view key, const std::string& source) {
  const std::string* v = element.attr(key);
  if (!v) throw TopologyError(where(element, source) + " is missing required attribute " + std::string(key));
  return *v;
}

std::int64_t parseIntAttr(const XmlElement& element, std::string_view key, const std::string& source) {
  return parseIntText(element, key, requireAttr(element, key, source), source);
}

std::optional<std::int64_t> parseOptionalIntAttr(const XmlElement& element, std::string_view key,
                                                 const std::string& source) {
  const std::string* v = element.attr(key);
  if (!v) return std::nullopt;
  return parseIntText(element, key, *v, source);
}

std::optional<float> parseOptionalFloatAttr(const XmlElement& element, std::string_view key,
                                            const std::string& source) {
  const std::string* v = element.attr(key);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d))
    throw TopologyError(where(element, source) + " attribute " + std::string(key) + "=\"" + *v +
                        "\" is not a finite number");
  // Kept as a float (as NCCL keeps it): a larger value would become inf, which is written as "inf" in a dump that no
  // reader then takes back.
  if (std::fabs(d) > std::numeric_limits<float>::max())
    throw TopologyError(where(element, source) + " attribute " + std::string(key) + "=\"" + *v +
                        "\" is out of range (a float, at most 3.40282e+38)");
  return static_cast<float>(d);
}

}  // namespace nns::topo
