// NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE / NCCL_GRAPH_FILE) as a small DOM: read, edit, write.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nns::topo {

// Every error of the topology engine: one line that names the input (file:line when known) and what is wrong.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One element. Attributes keep their insertion order because NCCL's dump format is order-sensitive and a round trip
// must give the same text back.
struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<XmlElement> children;
  int line = 0;  // 1-based line in the source text, 0 when created in memory

  // First attribute with that name (NCCL reads the first occurrence), or nullptr.
  const std::string* attr(std::string_view key) const;
  bool hasAttr(std::string_view key) const { return attr(key) != nullptr; }
  // Sets (replaces the first occurrence or appends) an attribute.
  void setAttr(std::string_view key, std::string value);
  void removeAttr(std::string_view key);
  // First child with that element name, or nullptr.
  const XmlElement* child(std::string_view childName) const;
  XmlElement* child(std::string_view childName);
  XmlElement& addChild(std::string childName);
};

struct XmlDocument {
  XmlElement root;
  std::string sourceName;  // file name or "<memory>", used in error messages
};

// Bounds that keep a hostile file from exhausting memory or the stack; real machine dumps are far below them.
inline constexpr std::size_t kMaxXmlBytes = 16u << 20;
inline constexpr int kMaxXmlDepth = 64;
inline constexpr std::size_t kMaxXmlElements = 1u << 18;

// NCCL's XML reader limits (graph/xml.h, topo.h): attributes per element (MAX_ATTR_COUNT), children per element
// (MAX_SUBS), and elements in a topology file (NCCL_TOPO_XML_MAX_NODES) and a graph file (NCCL_GRAPH_XML_MAX_NODES).
// The first two are enforced by parseXml for every file; the element counts by the callers that know the kind.
inline constexpr std::size_t kNcclMaxAttributes = 16;
inline constexpr std::size_t kNcclMaxChildren = 640;
inline constexpr std::size_t kNcclMaxTopologyNodes = 256;
inline constexpr std::size_t kNcclMaxGraphNodes = 65536;
// Elements in the document, the root included (what NCCL's node count counts).
std::size_t countElements(const XmlElement& root);
// Throws TopologyError when `doc` has more elements than NCCL's reader holds for its kind of file (`limit`, one of
// the two above, named by `limitName`; `kind` is "topology" or "graph").
void requireNcclNodeLimit(const XmlDocument& doc, std::size_t limit, const char* limitName, const char* kind);

// Parses text; throws TopologyError("<source>:<line>: ...") on malformed XML.
XmlDocument parseXml(std::string_view text, std::string sourceName = "<memory>");
// Reads and parses a file; throws TopologyError when it cannot be read or parsed. `kind` ("topology" or "graph") is
// what the error calls the file the path should have named, when it names something else. Only a regular file, or
// the pipe of a shell's process substitution, is opened: a directory, a FIFO (whose open would wait for a writer) or
// a device is refused up front; a UTF-16 or binary file is refused as such, not as malformed XML.
XmlDocument readXmlFile(const std::string& path, const char* kind = "topology");
// Writes in NCCL's dump format: 2-space indentation, attributes in order, leaf elements as <x .../>, no declaration.
std::string writeXml(const XmlElement& root);
void writeXmlFile(const XmlElement& root, const std::string& path);

// Strict numeric attribute reading with NCCL's base auto-detection (strtol base 0: 0x.. hex, a leading 0 octal, else
// decimal). Errors name the line.
std::int64_t parseIntAttr(const XmlElement& element, std::string_view key, const std::string& source);
std::optional<std::int64_t> parseOptionalIntAttr(const XmlElement& element, std::string_view key,
                                                 const std::string& source);
// A finite number that fits a float (NCCL keeps these as floats); anything else is the file's error at its line.
std::optional<float> parseOptionalFloatAttr(const XmlElement& element, std::string_view key, const std::string& source);
const std::string& requireAttr(const XmlElement& element, std::string_view key, const std::string& source);

}  // namespace nns::topo
