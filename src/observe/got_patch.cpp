#include "observe/got_patch.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace cucore::detail {
namespace {

#if defined(__x86_64__)
constexpr std::uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr std::uint32_t kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr std::uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr std::uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
#else
#define CUCORE_NO_GOT_PATCH 1
#endif

struct relro_range {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};

struct relro_search {
  std::uintptr_t base;
  relro_range found;
  bool matched = false;
};

// The object's PT_GNU_RELRO range: made read-only after relocation, so its slots need an
// mprotect around the write.
int find_relro(dl_phdr_info* info, std::size_t, void* data) {
  auto* s = static_cast<relro_search*>(data);
  if (info->dlpi_addr != s->base) return 0;
  s->matched = true;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_GNU_RELRO) {
      s->found.begin = s->base + ph.p_vaddr;
      s->found.end = s->found.begin + ph.p_memsz;
    }
  }
  return 1;
}

}  // namespace

bool patch_imports(void* handle, const std::vector<got_replacement>& replacements,
                   std::string& error) {
#ifdef CUCORE_NO_GOT_PATCH
  (void)handle;
  (void)replacements;
  error = "patching a library's imports is implemented for x86-64 and AArch64 only";
  return false;
#else
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_ld == nullptr) {
    error = "dlinfo found no link map";
    return false;
  }
  const auto base = static_cast<std::uintptr_t>(map->l_addr);
  // glibc relocates the address entries of the dynamic section in place; other loaders may not.
  const auto address = [base](ElfW(Addr) value) {
    return value < base ? base + value : static_cast<std::uintptr_t>(value);
  };
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  std::uintptr_t jmprel = 0;
  std::size_t jmprel_size = 0;
  std::uintptr_t rela = 0;
  std::size_t rela_size = 0;
  bool plt_is_rela = true;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symbols = reinterpret_cast<const ElfW(Sym)*>(address(d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strings = reinterpret_cast<const char*>(address(d->d_un.d_ptr));
        break;
      case DT_JMPREL:
        jmprel = address(d->d_un.d_ptr);
        break;
      case DT_PLTRELSZ:
        jmprel_size = d->d_un.d_val;
        break;
      case DT_PLTREL:
        plt_is_rela = d->d_un.d_val == DT_RELA;
        break;
      case DT_RELA:
        rela = address(d->d_un.d_ptr);
        break;
      case DT_RELASZ:
        rela_size = d->d_un.d_val;
        break;
      default:
        break;
    }
  }
  if (symbols == nullptr || strings == nullptr || !plt_is_rela) {
    error = "its dynamic section has no symbol table, or REL relocations (RELA expected)";
    return false;
  }
  relro_search relro{base, {}, false};
  ::dl_iterate_phdr(&find_relro, &relro);

  std::unordered_map<std::string_view, void*> wanted;
  for (const auto& r : replacements) wanted.emplace(r.symbol, r.replacement);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));

  const auto patch_table = [&](std::uintptr_t table, std::size_t bytes) {
    const auto* rel = reinterpret_cast<const ElfW(Rela)*>(table);
    for (std::size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
      const auto type = static_cast<std::uint32_t>(ELF64_R_TYPE(rel[i].r_info));
      if (type != kJumpSlot && type != kGlobDat) continue;
      const ElfW(Sym)& sym = symbols[ELF64_R_SYM(rel[i].r_info)];
      if (sym.st_shndx != SHN_UNDEF) continue;  // the library's own definition
      const auto it = wanted.find(std::string_view(strings + sym.st_name));
      if (it == wanted.end()) continue;
      auto** slot = reinterpret_cast<void**>(base + rel[i].r_offset);
      if (*slot == it->second) continue;
      const auto at = reinterpret_cast<std::uintptr_t>(slot);
      const bool read_only = at >= relro.found.begin && at < relro.found.end;
      void* first_page = reinterpret_cast<void*>(at & ~(page - 1));
      if (read_only && ::mprotect(first_page, page, PROT_READ | PROT_WRITE) != 0) {
        error = std::string("mprotect of its GOT failed: ") + std::strerror(errno);
        return false;
      }
      *slot = it->second;
      if (read_only) ::mprotect(first_page, page, PROT_READ);
    }
    return true;
  };
  if (jmprel != 0 && !patch_table(jmprel, jmprel_size)) return false;
  if (rela != 0 && !patch_table(rela, rela_size)) return false;
  return true;
#endif
}

}  // namespace cucore::detail
