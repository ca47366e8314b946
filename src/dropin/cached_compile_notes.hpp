#pragma once
// How the drop-ins speak of the one cached compile (cached/cached_compile.hpp): through note(), at
// the levels a program under `cucore run` heard before (CUCORE_LOG=info: one line per compile).

#include <string>
#include <string_view>

#include "cached/cached_compile.hpp"
#include "dropin/support.hpp"
#include "key/miss_explanation.hpp"

namespace cucore::dropin {

class cached_compile_notes final : public detail::cached_compile_voice {
 public:
  // `what` names the compile in each line: the program's name, "an NVVM compile", "a link".
  explicit cached_compile_notes(std::string_view what) : what_(what) {}

  void bypassed(const cache_bypass& bypass) override {
    note(log_level::info, "bypass " + what_ + ": " + bypass.why);
  }
  void explained(const miss_explanation& miss) override {
    if (log_enabled(log_level::debug)) {
      note(log_level::debug, "miss " + what_ + " explained: " + detail::describe_reasons(miss));
    }
  }
  void not_stored(const store_refusal& refusal) override {
    note(log_level::info, "not storing " + what_ + ": " + refusal.message);
  }
  void store_failed(const std::exception& e) override {
    note(log_level::warning, "could not store " + what_ + ": " + e.what());
  }
  void stored(const std::optional<std::filesystem::path>&) override {}

 private:
  std::string what_;
};

}  // namespace cucore::dropin
