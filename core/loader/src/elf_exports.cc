// elf_exports.cc: the dynamic symbols a plugin library defines beyond NCCL's tables, read from its file (.dynsym), so
// that nccl-net-info can say when a plugin leaks its code's names (interposable by the host's own) or holds GNU-unique
// symbols (shared by every library of the process, and the reason dlclose cannot unload it); and the NCCL tables it
// defines without exporting them (.symtab), so that the loader can say why dlsym found none. Reads ELF64
// little-endian only, every offset and size checked against the bytes there are: the file is the user's input.
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "nns/core/loader.hpp"
#include "nns/core/printable.hpp"

namespace nns::core {

namespace {

// The names NCCL itself looks up in a net plugin's library (the SDK's export map keeps exactly these).
bool isNcclTable(const std::string& name) {
  for (const char* prefix : {"ncclNetPlugin_v", "ncclCollNetPlugin_v", "ncclTunerPlugin_v", "ncclProfiler_v"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The markers GNU ld defines in every shared library (x86-64's, and aarch64's longer set).
bool isLinkerMarker(const std::string& name) {
  for (const char* marker :
       {"_init", "_fini", "_edata", "_end", "__bss_start", "__bss_start__", "_bss_end__", "__bss_end__", "__end__"})
    if (name == marker) return true;
  return false;
}

// Whether [offset, offset + length) lies within `size` bytes.
bool within(uint64_t offset, uint64_t length, size_t size) {
  return offset <= size && length <= size - offset;
}

// Calls `each(symbol, name)` for every symbol of the file's first section of `type` (SHT_DYNSYM, SHT_SYMTAB) whose
// name lies within its string table, from the bytes of the file; `table` names the section in an error ("dynamic",
// "static"). True also when there is no such section (`each` is then never called); false with `error` set for what
// cannot be read.
template <class Each>
bool forEachSymbol(const unsigned char* data, size_t size, uint32_t type, const char* table, std::string* error,
                   Each each) {
  Elf64_Ehdr header;
  if (size < sizeof(header) || std::memcmp(data, ELFMAG, SELFMAG) != 0) {
    *error = "not an ELF file";
    return false;
  }
  std::memcpy(&header, data, sizeof(header));
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    *error = "not a 64-bit little-endian ELF file: its symbols were not read";
    return false;
  }
  if (header.e_shnum == 0) {  // stripped of them (sstrip): the loader goes by PT_DYNAMIC, which is not read here
    *error = "it has no section headers: its symbols were not read";
    return false;
  }
  if (header.e_shentsize != sizeof(Elf64_Shdr) ||
      !within(header.e_shoff, uint64_t{header.e_shnum} * sizeof(Elf64_Shdr), size)) {
    *error = "its section headers lie outside the file";
    return false;
  }
  auto section = [&](size_t index) {
    Elf64_Shdr s;
    std::memcpy(&s, data + header.e_shoff + index * sizeof(Elf64_Shdr), sizeof(s));
    return s;
  };
  for (size_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr symbols = section(i);
    if (symbols.sh_type != type) continue;
    if (symbols.sh_entsize != sizeof(Elf64_Sym) || !within(symbols.sh_offset, symbols.sh_size, size) ||
        symbols.sh_link >= header.e_shnum) {
      *error = std::string("its ") + table + " symbol table lies outside the file";
      return false;
    }
    const Elf64_Shdr strings = section(symbols.sh_link);
    if (!within(strings.sh_offset, strings.sh_size, size)) {
      *error = std::string("its ") + table + " string table lies outside the file";
      return false;
    }
    const char* names = reinterpret_cast<const char*>(data + strings.sh_offset);
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= symbols.sh_size; at += sizeof(Elf64_Sym)) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, data + symbols.sh_offset + at, sizeof(symbol));
      if (symbol.st_name >= strings.sh_size) continue;  // a name outside its table: nothing to say about it
      const size_t room = strings.sh_size - symbol.st_name;
      each(symbol, std::string(names + symbol.st_name, strnlen(names + symbol.st_name, room)));
    }
    return true;
  }
  return true;
}

// The whole file, or false with `error` set: only the headers and the tables are needed, but a plugin is a few MB at
// most (up to 1 GiB is read).
bool readWholeFile(const std::string& path, std::vector<unsigned char>* bytes, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) close(fd);
    *error = path + ": not a regular file that can be read";
    return false;
  }
  constexpr off_t kLargest = off_t{1} << 30;
  if (st.st_size > kLargest) {
    close(fd);
    *error = path + ": larger than 1 GiB, its symbols were not read";
    return false;
  }
  bytes->assign(static_cast<size_t>(st.st_size), 0);
  size_t done = 0;
  while (done < bytes->size()) {
    const ssize_t n = pread(fd, bytes->data() + done, bytes->size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  bytes->resize(done);
  return true;
}

}  // namespace

bool readElfExports(const unsigned char* data, size_t size, ElfExports* out, std::string* error) {
  *out = ElfExports{};
  const bool read =
      forEachSymbol(data, size, SHT_DYNSYM, "dynamic", error, [&](const Elf64_Sym& symbol, const std::string& name) {
        const unsigned binding = ELF64_ST_BIND(symbol.st_info);
        const unsigned visibility = ELF64_ST_VISIBILITY(symbol.st_other);
        // Defined here and visible to others: not an import, not a version name (absolute), not hidden or internal.
        if (symbol.st_shndx == SHN_UNDEF || symbol.st_shndx == SHN_ABS ||
            (binding != STB_GLOBAL && binding != STB_WEAK && binding != STB_GNU_UNIQUE) ||
            (visibility != STV_DEFAULT && visibility != STV_PROTECTED))
          return;
        if (name.empty() || isNcclTable(name) || isLinkerMarker(name)) return;
        (binding == STB_GNU_UNIQUE ? out->unique : out->other).push_back(name);
      });
  std::sort(out->other.begin(), out->other.end());  // the table's order is its hash's: sorted, the output is stable
  std::sort(out->unique.begin(), out->unique.end());
  return read;  // true also without a dynamic symbol table: it exports nothing
}

bool readElfExports(const std::string& path, ElfExports* out, std::string* error) {
  std::vector<unsigned char> bytes;
  if (!readWholeFile(path, &bytes, error)) return false;
  return readElfExports(bytes.data(), bytes.size(), out, error);
}

std::vector<int> unexportedVersions(const unsigned char* data, size_t size, const std::string& prefix) {
  std::vector<int> versions;
  std::string ignored;  // a file that cannot be read has nothing to add to the reason already given
  forEachSymbol(data, size, SHT_SYMTAB, "static", &ignored, [&](const Elf64_Sym& symbol, const std::string& name) {
    const unsigned binding = ELF64_ST_BIND(symbol.st_info);
    const unsigned visibility = ELF64_ST_VISIBILITY(symbol.st_other);
    // Defined here and kept from the dynamic symbols: static (local), or hidden, which the link made local.
    if (symbol.st_shndx == SHN_UNDEF ||
        (binding != STB_LOCAL && visibility != STV_HIDDEN && visibility != STV_INTERNAL))
      return;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || name.size() > prefix.size() + 3)
      return;
    int version = 0;
    for (size_t i = prefix.size(); i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') return;
      version = version * 10 + (name[i] - '0');
    }
    if (std::find(versions.begin(), versions.end(), version) == versions.end()) versions.push_back(version);
  });
  std::sort(versions.rbegin(), versions.rend());
  return versions;
}

std::vector<int> unexportedVersions(const std::string& path, const std::string& prefix) {
  std::vector<unsigned char> bytes;
  std::string ignored;
  if (!readWholeFile(path, &bytes, &ignored)) return {};
  return unexportedVersions(bytes.data(), bytes.size(), prefix);
}

std::string namesPreview(const std::vector<std::string>& names, size_t shown) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < shown; ++i) {
    std::string one = printable(names[i].c_str());
    if (one.size() > 60) one = one.substr(0, 57) + "...";
    text += (i == 0 ? "" : ", ") + one;
  }
  return names.size() > shown ? text + ", ..." : text;
}

}  // namespace nns::core
