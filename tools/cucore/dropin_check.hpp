// What `cucore run` checks before putting a drop-in in a program's way (dropin_check.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cucore::cli {

// The defined global names of an ELF shared library's dynamic symbol table; nullopt when `path`
// cannot be read as one.
std::optional<std::vector<std::string>> elf_exports(const std::string& path);

// The names of `real_exports` that the drop-in standing in for `soname` does not export.
std::vector<std::string> missing_exports(std::string_view soname,
                                         const std::vector<std::string>& real_exports);

// The names the drop-in standing in for `soname` exports that `real_exports` lacks (a 13.5 name
// where the real library is 13.0).
std::vector<std::string> extra_exports(std::string_view soname,
                                       const std::vector<std::string>& real_exports);

// Writes `out` (by a temporary file and rename): a copy of the shared library `shim` in which the
// dynamic symbols named `hide` are no longer defined, so that dlsym, dlvsym and the loader's
// binding find them no more than in a library that lacks them. Returns "" or why it cannot (not
// an ELF64 library, a name it does not define, a relocation of its own that refers to one).
std::string write_without_exports(const std::string& shim, const std::string& out,
                                  const std::vector<std::string>& hide);

// Where a program would load each CUDA library from, emulating its loaders without running it:
// for a Python program (the interpreter, or a script whose #! names one), cuda.pathfinder's order
// (NVIDIA's wheels in its site-packages, $CONDA_PREFIX, the loader, $CUDA_PATH/$CUDA_HOME); for
// any program, the loader's search by soname (its LD_LIBRARY_PATH, /etc/ld.so.conf, the system's;
// not its DT_RUNPATH), then $CUDA_PATH/$CUDA_HOME.
class program_libraries {
 public:
  program_libraries(const std::string& program, const std::string& dropin_dir,
                    const std::string& original_ld_library_path);
  // {path, why} of the library named `soname` the program would load, or nullopt.
  std::optional<std::pair<std::string, std::string>> find(std::string_view soname) const;
  bool python() const noexcept { return python_; }

 private:
  bool python_ = false;
  std::string dropin_dir_;
  std::vector<std::string> sites_;
  std::vector<std::string> loader_;
};

}  // namespace cucore::cli
