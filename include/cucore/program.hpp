// Run-time compilation of CUDA C++ (NVRTC), PTX (nvJitLink or the driver linker) and NVVM IR
// (libNVVM).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cucore/object_code.hpp"
#include "cucore/options.hpp"

namespace cucore {

// What became of a precompiled header request on the last NVRTC compile.
enum class pch_status { not_requested, created, not_attempted, failed };
std::string_view to_string(pch_status status) noexcept;

// A program: source code, its type and options. compile() may be called many times (each call is an
// independent compilation); a program is not meant to be compiled from two threads at once, but
// distinct programs compile concurrently. The program owns every string it hands to a compiler.
class program {
 public:
  program(std::string code, source_type type, program_options options = {});

  // Compiles to `target`. For c++, each name expression (e.g. "my_kernel<float>") is resolved to
  // its mangled name in the result's symbol_mapping(). Throws compile_error with the log when the
  // compiler rejects the code; invalid_argument for an unsupported target or option.
  object_code compile(code_type target, std::span<const std::string> name_expressions = {});

  // The log of the last compile (warnings on success; also carried by compile_error).
  const std::string& log() const noexcept { return log_; }
  // The backend that compiles this program (for ptx: nvJitLink, or the driver when it is missing).
  compiler_backend backend() const;
  pch_status last_pch_status() const noexcept { return pch_status_; }

  const std::string& code() const noexcept { return code_; }
  source_type type() const noexcept { return type_; }
  const program_options& options() const noexcept { return options_; }

 private:
  object_code compile_nvrtc(code_type target, std::span<const std::string> name_expressions);
  object_code compile_nvvm(code_type target);
  object_code compile_ptx(code_type target);

  std::string code_;
  source_type type_;
  program_options options_;
  std::string log_;
  pch_status pch_status_ = pch_status::not_requested;
};

// NVRTC's process-wide precompiled-header heap size (nvrtcGetPCHHeapSize / nvrtcSetPCHHeapSize).
// compile() grows it on its own when a PCH does not fit.
std::size_t nvrtc_pch_heap_size();
void set_nvrtc_pch_heap_size(std::size_t bytes);

}  // namespace cucore
