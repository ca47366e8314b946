// The header corpus of tests/data/corpus (corpus.json) for the oracle tests: where the fetched
// headers are (scripts/fetch-corpus.sh), each kernel's spec, and the oracle_case it compiles as.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cucore/toolkit.hpp"
#include "oracle_case.hpp"
#include "test_support.hpp"

namespace cucore::oracle {

inline std::filesystem::path corpus_dir() {
  if (const char* d = std::getenv("CUCORE_CORPUS_DIR"); d != nullptr && *d != '\0') return d;
  return CUCORE_CORPUS_DIR;
}

inline std::filesystem::path spec_dir() {
  return std::filesystem::path(CUCORE_TEST_DATA_DIR) / "corpus";
}

// The toolkit root whose include directories cucore searches by default.
inline std::string cuda_root() {
  for (const auto& d : toolkit::include_directories()) {
    const std::filesystem::path p(d);
    if (p.filename() == "include") return p.parent_path().string();
  }
  return "/usr/local/cuda";
}

inline std::string substituted(std::string text) {
  const std::pair<std::string, std::string> placeholders[] = {
      {"${CUTLASS}", (corpus_dir() / "cutlass" / "include").string()},
      {"${CUPY}", (corpus_dir() / "cupy").string()},
      {"${CUDA}", cuda_root()}};
  for (const auto& [from, to] : placeholders) {
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
      text.replace(at, from.size(), to);
      at += to.size();
    }
  }
  return text;
}

struct corpus_kernel {
  std::string name;
  nlohmann::json spec;
  friend void PrintTo(const corpus_kernel& k, std::ostream* out) { *out << k.name; }
};

inline std::vector<corpus_kernel> corpus_kernels() {
  std::ifstream in(spec_dir() / "corpus.json");
  std::vector<corpus_kernel> out;
  if (!in) return out;
  const auto spec = nlohmann::json::parse(in);
  for (const auto& k : spec.at("kernels")) out.push_back({k.at("name").get<std::string>(), k});
  return out;
}

// Why corpus.json says the kernel's library does not compile with NVRTC `version` ("13.5"), or
// nothing.
inline std::optional<std::string> unsupported_with(const nlohmann::json& kernel,
                                                   const std::string& version) {
  std::ifstream in(spec_dir() / "corpus.json");
  if (!in) return std::nullopt;
  const auto spec = nlohmann::json::parse(in);
  for (const auto& u : spec.value("unsupported", nlohmann::json::array())) {
    if (u.at("library") == kernel.value("library", "") && u.at("nvrtc") == version) {
      return u.at("why").get<std::string>();
    }
  }
  return std::nullopt;
}

inline oracle_case case_of(const nlohmann::json& k, const std::filesystem::path& cwd) {
  oracle_case c;
  c.code = cucore::testing::read_text(spec_dir() / k.at("file").get<std::string>());
  c.name = k.at("program_name").get<std::string>();
  c.cwd = cwd;
  c.arch = k.at("arch").get<std::string>();
  c.target = k.at("target").get<std::string>();
  c.name_expressions = k.value("name_expressions", std::vector<std::string>{});
  const auto& o = k.at("options");
  for (const auto& d : o.value("include_path", std::vector<std::string>{})) {
    c.include_path.push_back(substituted(d));
  }
  if (o.contains("std")) c.std = o.at("std").get<std::string>();
  c.default_device = o.value("device_as_default_execution_space", false);
  c.toolkit_include_path = o.value("toolkit_include_path", true);
  c.ftz = o.value("ftz", false);
  for (const auto& d : o.value("define_macro", std::vector<std::string>{})) {
    const auto eq = d.find('=');
    c.defines.emplace_back(
        d.substr(0, eq), eq == std::string::npos ? std::nullopt : std::optional(d.substr(eq + 1)));
  }
  return c;
}

}  // namespace cucore::oracle
