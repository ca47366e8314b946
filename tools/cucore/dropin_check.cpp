// Before `cucore run` puts a drop-in in a program's way: which real library the program would load
// for each drop-in's soname, and whether the drop-in exports everything that library does
// (docs/transparent-cache.md, "A library newer than the drop-ins"), and the copy of a drop-in that
// exports exactly what the real library does ("Exactly the real library's API"). Reads the ELF
// dynamic symbol table through mmap (a few pages per library, well under a millisecond).
#include "dropin_check.hpp"

#include "dropin/run_environment.hpp"

#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string_view>

namespace cucore::cli {
namespace {

namespace fs = std::filesystem;

// What each drop-in exports: {soname, names} (scripts/gen-dropin-api.py).
struct dropin_api {
  std::string_view soname;
  std::vector<std::string_view> names;
};
const std::vector<dropin_api>& dropin_apis() {
  static const std::vector<dropin_api> apis = {
#include "dropin/generated/exports.inc"
  };
  return apis;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> glob_all(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t found{};
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0) {
    for (std::size_t i = 0; i < found.gl_pathc; ++i) out.emplace_back(found.gl_pathv[i]);
  }
  ::globfree(&found);
  return out;
}

// The program file `name` runs (PATH search for a bare name).
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  for (const auto& dir : dropin::split_path_list(path ? path : "/usr/bin:/bin")) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && is_file(candidate)) return candidate;
  }
  return name;
}

// The Python interpreter that runs `program` (itself, or its #! line's), or "".
std::string python_of(const std::string& program) {
  const std::string file = resolve_program(program);
  if (fs::path(file).filename().string().starts_with("python")) return file;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  if (!in || !std::getline(in, line) || !line.starts_with("#!")) return "";
  if (line.find("python") == std::string::npos) return "";
  std::string interpreter = line.substr(2);
  interpreter.erase(0, interpreter.find_first_not_of(" \t"));
  interpreter = interpreter.substr(0, interpreter.find_first_of(" \t\r"));
  if (interpreter.ends_with("/env")) {  // #!/usr/bin/env python3
    const auto at = line.find("python");
    return resolve_program(line.substr(at, line.find_first_of(" \t\r", at) - at));
  }
  return interpreter;
}

// The site-packages directories of `python` (site.getsitepackages() and the user site, as
// cuda.pathfinder searches them), without starting it: a venv's own (its pyvenv.cfg beside bin/),
// else the installation's.
std::vector<std::string> site_packages_of(const std::string& python) {
  std::vector<std::string> sites;
  const fs::path prefix = fs::path(python).parent_path().parent_path();
  std::error_code ec;
  if (fs::is_regular_file(prefix / "pyvenv.cfg", ec)) {
    return glob_all(prefix.string() + "/lib/python3*/site-packages");
  }
  const fs::path real = fs::canonical(python, ec);
  const std::string base = ec ? prefix.string() : real.parent_path().parent_path().string();
  for (const char* home = std::getenv("HOME"); home != nullptr && *home;) {
    for (auto& s : glob_all(std::string(home) + "/.local/lib/python3*/site-packages")) {
      sites.push_back(std::move(s));
    }
    break;
  }
  for (const char* kind : {"site-packages", "dist-packages"}) {
    for (auto& s : glob_all(base + "/lib/python3*/" + kind)) sites.push_back(std::move(s));
  }
  for (auto& s : glob_all(base + "/lib/python3/dist-packages")) sites.push_back(std::move(s));
  return sites;
}

// cuda.pathfinder 1.9's wheel directories per soname (descriptor_catalog.py).
std::vector<std::string_view> wheel_dirs(std::string_view soname) {
  if (soname == "libnvrtc.so.13" || soname == "libnvJitLink.so.13") return {"nvidia/cu13/lib"};
  if (soname == "libnvrtc.so.12") return {"nvidia/cuda_nvrtc/lib"};
  if (soname == "libnvJitLink.so.12") return {"nvidia/nvjitlink/lib"};
  if (soname == "libnvvm.so.4") return {"nvidia/cu13/lib", "nvidia/cuda_nvcc/nvvm/lib64"};
  return {};
}

}  // namespace

std::optional<std::vector<std::string>> elf_exports(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return std::nullopt;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  // Unmapped on every way out, a throwing emplace_back included.
  const std::unique_ptr<void, std::function<void(void*)>> mapping(
      map, [size](void* p) { ::munmap(p, size); });
  const auto* bytes = static_cast<const unsigned char*>(map);
  std::optional<std::vector<std::string>> names;
  const auto& eh = *reinterpret_cast<const Elf64_Ehdr*>(bytes);
  const auto in_file = [&](std::uint64_t offset, std::uint64_t length) {
    return offset <= size && length <= size - offset;
  };
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_shentsize == sizeof(Elf64_Shdr) &&
      in_file(eh.e_shoff, std::uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr))) {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes + eh.e_shoff);
    for (unsigned i = 0; i < eh.e_shnum && !names; ++i) {
      const auto& sym = sections[i];
      if (sym.sh_type != SHT_DYNSYM || sym.sh_link >= eh.e_shnum) continue;
      const auto& str = sections[sym.sh_link];
      if (!in_file(sym.sh_offset, sym.sh_size) || !in_file(str.sh_offset, str.sh_size)) break;
      names.emplace();
      const auto* symbols = reinterpret_cast<const Elf64_Sym*>(bytes + sym.sh_offset);
      const char* strings = reinterpret_cast<const char*>(bytes + str.sh_offset);
      for (std::size_t k = 0; k < sym.sh_size / sizeof(Elf64_Sym); ++k) {
        const auto& s = symbols[k];
        const int bind = ELF64_ST_BIND(s.st_info);
        // Defined global names; SHN_ABS ones are the version nodes' own symbols.
        if (s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS) continue;
        if (bind != STB_GLOBAL && bind != STB_WEAK) continue;
        if (s.st_name >= str.sh_size) continue;
        names->emplace_back(strings + s.st_name,
                            strnlen(strings + s.st_name, str.sh_size - s.st_name));
      }
    }
  }
  return names;
}

// Appends to `out` each of `names` that `others` lacks, in order.
template <class Names, class Others>
void append_absent(const Names& names, const Others& others, std::vector<std::string>& out) {
  for (const auto& name : names) {
    if (std::find(others.begin(), others.end(), name) == others.end()) out.emplace_back(name);
  }
}

std::vector<std::string> missing_exports(std::string_view soname,
                                         const std::vector<std::string>& real_exports) {
  std::vector<std::string> missing;
  for (const auto& api : dropin_apis()) {
    if (api.soname == soname) append_absent(real_exports, api.names, missing);
  }
  return missing;
}

std::vector<std::string> extra_exports(std::string_view soname,
                                       const std::vector<std::string>& real_exports) {
  std::vector<std::string> extra;
  for (const auto& api : dropin_apis()) {
    if (api.soname == soname) append_absent(api.names, real_exports, extra);
  }
  return extra;
}

// The symbol keeps its name and version (no string of .dynstr changes, so names that share its
// bytes are safe) but has no value and no section: glibc's lookup skips such an entry (st_value 0
// outside SHN_ABS, or SHN_UNDEF), and objdump -T lists it as *UND*. A relocation of the shim that
// names it would make the loader bind it elsewhere: refused (the shims have none).
std::string write_without_exports(const std::string& shim, const std::string& out,
                                  const std::vector<std::string>& hide) {
  std::string bytes;
  {
    std::ifstream in(shim, std::ios::binary);
    if (!in) return "cannot read " + shim;
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::size_t size = bytes.size();
  const auto in_file = [&](std::uint64_t offset, std::uint64_t length) {
    return offset <= size && length <= size - offset;
  };
  Elf64_Ehdr eh{};
  if (size < sizeof eh) return shim + " is not an ELF64 library";
  std::memcpy(&eh, bytes.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_file(eh.e_shoff, std::uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr))) {
    return shim + " is not an ELF64 library";
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), bytes.data() + eh.e_shoff, sections.size() * sizeof(Elf64_Shdr));
  std::size_t dynsym = sections.size();
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].sh_type == SHT_DYNSYM) dynsym = i;
  }
  if (dynsym == sections.size() || sections[dynsym].sh_link >= sections.size()) {
    return shim + " has no dynamic symbol table";
  }
  const Elf64_Shdr& sym = sections[dynsym];
  const Elf64_Shdr& str = sections[sym.sh_link];
  if (!in_file(sym.sh_offset, sym.sh_size) || !in_file(str.sh_offset, str.sh_size)) {
    return shim + " has a damaged dynamic symbol table";
  }
  std::vector<bool> hidden(sym.sh_size / sizeof(Elf64_Sym));
  std::size_t found = 0;
  for (std::size_t k = 0; k < hidden.size(); ++k) {
    Elf64_Sym s{};
    char* at = bytes.data() + sym.sh_offset + k * sizeof s;
    std::memcpy(&s, at, sizeof s);
    if (s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS || s.st_name >= str.sh_size) continue;
    const std::string_view name(
        bytes.data() + str.sh_offset + s.st_name,
        strnlen(bytes.data() + str.sh_offset + s.st_name, str.sh_size - s.st_name));
    if (std::find(hide.begin(), hide.end(), name) == hide.end()) continue;
    hidden[k] = true;
    ++found;
    s.st_value = 0;
    s.st_size = 0;
    s.st_shndx = SHN_UNDEF;
    std::memcpy(at, &s, sizeof s);
  }
  if (found != hide.size()) {
    return shim + " defines " + std::to_string(found) + " of the " + std::to_string(hide.size()) +
           " names to leave out (is it the drop-in it should be?)";
  }
  for (const auto& section : sections) {
    if ((section.sh_type != SHT_RELA && section.sh_type != SHT_REL) || section.sh_link != dynsym) {
      continue;
    }
    const std::size_t entry = section.sh_type == SHT_RELA ? sizeof(Elf64_Rela) : sizeof(Elf64_Rel);
    if (!in_file(section.sh_offset, section.sh_size)) return shim + " has damaged relocations";
    for (std::size_t r = 0; r < section.sh_size / entry; ++r) {
      Elf64_Rel rel{};  // r_offset and r_info lead both kinds
      std::memcpy(&rel, bytes.data() + section.sh_offset + r * entry, sizeof rel);
      const auto index = ELF64_R_SYM(rel.r_info);
      if (index < hidden.size() && hidden[index]) {
        return shim + " has a relocation of its own to a name to leave out";
      }
    }
  }
  const std::string temp = out + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream o(temp, std::ios::binary | std::ios::trunc);
    o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    o.close();
    if (!o) {
      ::unlink(temp.c_str());
      return "cannot write " + temp;
    }
  }
  if (::chmod(temp.c_str(), 0755) != 0 || ::rename(temp.c_str(), out.c_str()) != 0) {
    ::unlink(temp.c_str());
    return "cannot write " + out;
  }
  return {};
}

program_libraries::program_libraries(const std::string& program, const std::string& dropin_dir,
                                     const std::string& original_ld_library_path)
    : dropin_dir_(dropin_dir) {
  if (const auto python = python_of(program); !python.empty()) {
    python_ = true;
    sites_ = site_packages_of(python);
  }
  for (auto& dir : dropin::split_path_list(original_ld_library_path))
    loader_.push_back(std::move(dir));
  dropin::add_ld_so_conf("/etc/ld.so.conf", loader_);
  for (const char* dir :
       {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}) {
    loader_.emplace_back(dir);
  }
}

std::optional<std::pair<std::string, std::string>> program_libraries::find(
    std::string_view soname) const {
  const std::string so(soname);
  for (const auto& site : sites_) {
    for (auto wheel : wheel_dirs(soname)) {
      if (const auto f = site + "/" + std::string(wheel) + "/" + so; is_file(f)) {
        return std::pair(f, std::string("NVIDIA's wheel in the program's site-packages"));
      }
    }
  }
  if (const char* conda = std::getenv("CONDA_PREFIX"); python_ && conda && *conda == '/') {
    if (const auto f = std::string(conda) + "/lib/" + so; is_file(f)) {
      return std::pair(f, std::string("$CONDA_PREFIX"));
    }
  }
  for (const auto& dir : loader_) {
    if (dir == dropin_dir_) continue;
    if (const auto f = dir + "/" + so; is_file(f)) {
      return std::pair(f, std::string("the loader's search"));
    }
  }
  for (const char* variable : {"CUDA_PATH", "CUDA_HOME"}) {
    const char* root = std::getenv(variable);
    if (root == nullptr || *root == '\0') continue;
    for (const char* sub : {"lib64", "lib", "nvvm/lib64"}) {
      if (const auto f = std::string(root) + "/" + sub + "/" + so; is_file(f)) {
        return std::pair(f, "$" + std::string(variable));
      }
    }
  }
  return std::nullopt;
}

}  // namespace cucore::cli
