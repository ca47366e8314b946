#include "cached/nvrtc_services.hpp"

#include "common/trace.hpp"
#include "pch/auto_pch.hpp"
#include "server/client.hpp"

namespace cucore::detail {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  const auto* data = reinterpret_cast<const std::byte*>(text.data());
  return std::vector<std::byte>(data, data + text.size());
}

}  // namespace

std::optional<served_compile> library_nvrtc_services::compile_elsewhere(
    const std::string& code, const program_options& options, const std::vector<std::string>& flags,
    code_type target, std::span<const std::string> name_expressions) {
  const auto mode = server::effective_mode(options);
  if (mode == compile_server_mode::off) return std::nullopt;
  trace_span round_trip("server", "round trip");
  auto reply = server::compile_through_server(mode, code, options, flags, target, name_expressions);
  round_trip.arg("answered", reply && reply->compiled ? "compiled" : reply ? "failed" : "no");
  if (!reply) return std::nullopt;
  served_compile out;
  out.compiled = reply->compiled;
  out.backend = std::move(reply->backend);
  out.status = std::move(reply->status);
  out.log = std::move(reply->log);
  out.auto_pch = reply->auto_pch;
  out.pch = reply->pch;
  out.code = bytes_of(reply->code);
  out.symbols = std::move(reply->symbols);
  if (reply->tile_ir) out.tile_ir = bytes_of(*reply->tile_ir);
  return out;
}

std::unique_ptr<nvrtc_pch_session> library_nvrtc_services::automatic_pch(
    const nvrtc_api& api, const std::string& code, const program_options& options,
    code_type target) {
  return std::make_unique<auto_pch_compile>(api, code, options, target, header_memo_);
}

}  // namespace cucore::detail
