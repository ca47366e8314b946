#pragma once
// What a layer above lends an NVRTC compile. program/ compiles and knows nothing of keys, caches or
// the compile server; the cached-compile layer (cached/nvrtc_services.cpp) hands each compile
// cucore's automatic precompiled headers (pch/) and the user's compile server (server/) through
// this interface. Without it (nullptr) a compile is plain and runs here: what verify mode's replay
// wants.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cucore/options.hpp"
#include "cucore/program.hpp"

struct _nvrtcProgram;  // nvrtc.h's nvrtcProgram is a pointer to it

namespace cucore::detail {

struct nvrtc_api;

// One compile's automatic PCH session (pch/auto_pch.hpp): flags for NVRTC only, never for a key;
// told each attempt's outcome, it says whether the compile must run again without them.
class nvrtc_pch_session {
 public:
  virtual ~nvrtc_pch_session() = default;
  virtual const std::vector<std::string>& flags() const noexcept = 0;
  virtual auto_pch_status status() const noexcept = 0;
  virtual bool succeeded(_nvrtcProgram* prog, const std::string& log) = 0;
  virtual bool failed(const std::string& log) = 0;
  virtual void retry_succeeded() = 0;
};

// A compile another process answered (the compile server, docs/compile-server.md).
struct served_compile {
  bool compiled = false;        // false: NVRTC rejected the code
  std::string backend, status;  // of that compile_error
  std::string log;
  auto_pch_status auto_pch = auto_pch_status::off;
  pch_status pch = pch_status::not_requested;
  std::vector<std::byte> code;
  std::vector<std::string> symbols;  // expression, lowered, ...
  std::optional<std::vector<std::byte>> tile_ir;
};

class nvrtc_services {
 public:
  virtual ~nvrtc_services() = default;
  // The compile done elsewhere, or nullopt: compile here. Asked only of a compile without the
  // caller's own PCH and without options that write files.
  virtual std::optional<served_compile> compile_elsewhere(
      const std::string& code, const program_options& options,
      const std::vector<std::string>& flags, code_type target,
      std::span<const std::string> name_expressions) = 0;
  // This compile's automatic PCH session (constructed before the compile: it may hold the heap).
  virtual std::unique_ptr<nvrtc_pch_session> automatic_pch(const nvrtc_api& api,
                                                           const std::string& code,
                                                           const program_options& options,
                                                           code_type target) = 0;
};

}  // namespace cucore::detail
