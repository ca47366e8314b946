// Compiler probes that a persistent cache answers from its on-disk version memo, so that a fresh
// process whose lookups all hit never loads NVRTC, nvJitLink or libNVVM.
#pragma once

#include <filesystem>
#include <string>

#include "key/compiler_version_memo.hpp"
#include "cucore/cache/key.hpp"

namespace cucore::detail {

// The library file is found with stat() alone (as the loader would find it under the CUDA roots)
// and identified by path, inode, size and mtime; a remembered identity for exactly that file is
// used as is. Otherwise the installed probe runs (loading the library) and its answer is
// remembered, but only when the library it loaded is that same file.
class memoized_compiler_probes final : public compiler_probes {
 public:
  explicit memoized_compiler_probes(std::filesystem::path memo_file);
  version_probe nvrtc() const override;
  version_probe nvvm() const override;
  linker_probe linker() const override;
  // The header digest memo beside the version memo (include_tracking.hpp).
  std::optional<std::filesystem::path> header_digest_memo() const override { return header_memo_; }

 private:
  mutable compiler_version_memo memo_;
  std::filesystem::path header_memo_;
};

// The directory of the NVRTC library this process compiles with (loaded), or would load (found
// in the CUDA roots); empty when neither is known.
std::string nvrtc_library_directory();

// One memoized probe set per memo file, kept for the process's life (the memo is read once).
const compiler_probes& probes_with_memo(const std::filesystem::path& memo_file);

}  // namespace cucore::detail
