// Linking object code (PTX, cubin, LTO-IR, fatbin, objects, libraries) into a cubin, PTX or
// LTO-IR, with nvJitLink, or the driver linker (cuLink*, which needs a GPU driver) where nvJitLink
// is missing.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cucore/object_code.hpp"
#include "cucore/options.hpp"

namespace cucore {

enum class linker_backend { nvjitlink, driver };
std::string_view to_string(linker_backend backend) noexcept;  // "nvJitLink", "driver"

class linker {
 public:
  explicit linker(std::vector<object_code> inputs, linker_options options = {});

  // Links to `target`: cubin, ptx (LTO-IR inputs and link_time_optimization), or ltoir (the
  // linked LTO-IR, nvJitLink 13.3+: nvJitLinkGetLinkedLTOIR; link_time_optimization is implied).
  // Throws compile_error with the linker's log on failure, invalid_argument for a target or an
  // option (relocatable under link_time_optimization) the loaded nvJitLink does not support.
  object_code link(code_type target);

  const std::string& log() const noexcept { return log_; }
  linker_backend backend() const noexcept { return backend_; }
  const linker_options& options() const noexcept { return options_; }

  // The backend a linker created now would use: nvJitLink when it loads and its version can be
  // probed, else the driver. Decided once per process.
  static linker_backend which_backend();

 private:
  object_code link_nvjitlink(code_type target);
  object_code link_driver(code_type target);

  std::vector<object_code> inputs_;
  linker_options options_;
  linker_backend backend_;
  std::string log_;
};

}  // namespace cucore
