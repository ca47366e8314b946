// Every answer NVRTC's getters give about one compiled program: what `cucore run`'s drop-in stores
// as a cache entry and answers a hit from, and what a compile server's worker returns for a
// drop-in's request (the program is then never compiled in the client, as for a hit).
#pragma once

#include <nvrtc.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace cucore::detail {

struct nvrtc_api;

struct nvrtc_output {
  nvrtcResult size_code = NVRTC_SUCCESS;
  std::size_t size = 0;
  nvrtcResult get_code = NVRTC_SUCCESS;
  std::string bytes;
  friend bool operator==(const nvrtc_output&, const nvrtc_output&) = default;
};

struct nvrtc_lowered_name {
  std::string expression;
  nvrtcResult code = NVRTC_SUCCESS;
  std::string name;
  friend bool operator==(const nvrtc_lowered_name&, const nvrtc_lowered_name&) = default;
};

struct nvrtc_record {
  nvrtc_output ptx, cubin, ltoir, optix, log;
  std::vector<nvrtc_lowered_name> names;
  nvrtcResult unknown_name_code = NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
  nvrtcResult add_after_code = NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION;
  nvrtcResult pch_status = NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED;
  nvrtcResult pch_required_code = NVRTC_SUCCESS;
  std::size_t pch_required = 0;
  // The Tile IR getters' answers (NVRTC 13.1+, which has nvrtcGetTileIR). Absent in a record an
  // older drop-in wrote (no Tile compile then, all bypassed), or made with an older NVRTC.
  std::optional<nvrtc_output> tile;
  friend bool operator==(const nvrtc_record&, const nvrtc_record&) = default;
};

// Asks every getter of `prog`, compiled (or failed) just now: outputs, log, each of `expressions`'
// lowered name (once each), an unknown expression's answer, nvrtcAddNameExpression's refusal after
// a compile (nothing is added), the PCH status and heap size required, and the Tile IR where the
// library has its getters. OptiX IR's getters are looked up in the library when it has them.
nvrtc_record record_nvrtc_program(const nvrtc_api& api, nvrtcProgram prog,
                                  const std::vector<std::string>& expressions);

}  // namespace cucore::detail
