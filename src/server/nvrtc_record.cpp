#include "server/nvrtc_record.hpp"

#include "common/recorded_output.hpp"
#include "loader/libraries.hpp"

namespace cucore::detail {
namespace {

using size_fn = nvrtcResult (*)(nvrtcProgram, size_t*);
using get_fn = nvrtcResult (*)(nvrtcProgram, char*);

// What the real library says when a getter is missing from it.
constexpr nvrtcResult kNoGetter = NVRTC_ERROR_INTERNAL_ERROR;

nvrtc_output record_getter(nvrtcProgram prog, size_fn get_size, get_fn get) {
  nvrtc_output o;
  if (get_size == nullptr || get == nullptr) {
    o.size_code = o.get_code = kNoGetter;
    return o;
  }
  return recorded::record_output<nvrtc_output>(prog, get_size, get);
}

}  // namespace

nvrtc_record record_nvrtc_program(const nvrtc_api& api, nvrtcProgram prog,
                                  const std::vector<std::string>& expressions) {
  nvrtc_record out;
  out.ptx = record_getter(prog, api.nvrtcGetPTXSize, api.nvrtcGetPTX);
  out.cubin = record_getter(prog, api.nvrtcGetCUBINSize, api.nvrtcGetCUBIN);
  out.ltoir = record_getter(prog, api.nvrtcGetLTOIRSize, api.nvrtcGetLTOIR);
  const auto& lib = *api.library;
  out.optix = record_getter(prog, reinterpret_cast<size_fn>(lib.symbol("nvrtcGetOptiXIRSize")),
                            reinterpret_cast<get_fn>(lib.symbol("nvrtcGetOptiXIR")));
  out.log = record_getter(prog, api.nvrtcGetProgramLogSize, api.nvrtcGetProgramLog);
  for (const auto& e : expressions) {
    bool seen = false;
    for (const auto& n : out.names) seen = seen || n.expression == e;
    if (seen) continue;
    const char* lowered = nullptr;
    nvrtc_lowered_name n{e, api.nvrtcGetLoweredName(prog, e.c_str(), &lowered), {}};
    if (n.code == NVRTC_SUCCESS && lowered != nullptr) n.name = lowered;
    out.names.push_back(std::move(n));
  }
  const char* ignored = nullptr;
  out.unknown_name_code =
      api.nvrtcGetLoweredName(prog, "\x01 cucore: an expression never added", &ignored);
  out.pch_status = api.nvrtcGetPCHCreateStatus(prog);
  // Refused after a compile (NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION): nothing is added.
  out.add_after_code = api.nvrtcAddNameExpression(prog, "cucore_never_used_expression");
  out.pch_required_code = api.nvrtcGetPCHHeapSizeRequired(prog, &out.pch_required);
  if (api.nvrtcGetTileIRSize != nullptr && api.nvrtcGetTileIR != nullptr) {
    out.tile = record_getter(prog, api.nvrtcGetTileIRSize, api.nvrtcGetTileIR);
  }
  return out;
}

}  // namespace cucore::detail
