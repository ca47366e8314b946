#pragma once
// What the library lends each NVRTC compile (program/nvrtc_services.hpp): the user's compile
// server (server/client.hpp) and cucore's automatic precompiled headers (pch/auto_pch.hpp), whose
// prefix keys read the header digest memo of the cache the compile goes through.

#include <filesystem>
#include <optional>

#include "program/nvrtc_services.hpp"

namespace cucore::detail {

class library_nvrtc_services final : public nvrtc_services {
 public:
  // `header_memo`: the cache's header digest memo, or nullopt (this process's).
  explicit library_nvrtc_services(std::optional<std::filesystem::path> header_memo = std::nullopt)
      : header_memo_(std::move(header_memo)) {}

  std::optional<served_compile> compile_elsewhere(
      const std::string& code, const program_options& options,
      const std::vector<std::string>& flags, code_type target,
      std::span<const std::string> name_expressions) override;
  std::unique_ptr<nvrtc_pch_session> automatic_pch(const nvrtc_api& api, const std::string& code,
                                                   const program_options& options,
                                                   code_type target) override;

 private:
  std::optional<std::filesystem::path> header_memo_;
};

}  // namespace cucore::detail
