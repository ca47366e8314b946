// One compile the differential oracle runs: what is compiled, where (the working directory), and
// with which options. Written as JSON for oracle_compile (the traced process) and turned into
// the same program_options in the test process (for the key), so both see one set of inputs.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cucore/options.hpp"
#include "cucore/program.hpp"

namespace cucore::oracle {

struct oracle_case {
  std::string code;
  std::string name = "kernel.cu";  // options.name: quoted includes search beside it
  std::filesystem::path cwd;       // the compile's working directory
  std::string arch = "sm_90";
  std::string target = "cubin";  // "ptx", "cubin", "ltoir"
  std::vector<std::string> include_path;
  std::vector<std::string> pre_include;
  std::vector<std::pair<std::string, std::optional<std::string>>> defines;
  std::map<std::string, std::string> headers;  // in-memory headers: name -> contents
  std::vector<std::string> name_expressions;
  std::optional<std::string> std;
  bool default_device = false;
  bool no_source_include = false;
  bool toolkit_include_path = true;
  bool ftz = false;
};

inline void to_json(nlohmann::json& j, const oracle_case& c) {
  nlohmann::json defines = nlohmann::json::array();
  for (const auto& [name, value] : c.defines) {
    defines.push_back({{"name", name}, {"value", value ? nlohmann::json(*value) : nullptr}});
  }
  j = {{"code", c.code},
       {"name", c.name},
       {"cwd", c.cwd.string()},
       {"arch", c.arch},
       {"target", c.target},
       {"include_path", c.include_path},
       {"pre_include", c.pre_include},
       {"defines", defines},
       {"headers", c.headers},
       {"name_expressions", c.name_expressions},
       {"std", c.std ? nlohmann::json(*c.std) : nullptr},
       {"default_device", c.default_device},
       {"no_source_include", c.no_source_include},
       {"toolkit_include_path", c.toolkit_include_path},
       {"ftz", c.ftz}};
}

inline void from_json(const nlohmann::json& j, oracle_case& c) {
  c.code = j.at("code").get<std::string>();
  c.name = j.at("name").get<std::string>();
  c.cwd = j.at("cwd").get<std::string>();
  c.arch = j.at("arch").get<std::string>();
  c.target = j.at("target").get<std::string>();
  c.include_path = j.at("include_path").get<std::vector<std::string>>();
  c.pre_include = j.at("pre_include").get<std::vector<std::string>>();
  c.defines.clear();
  for (const auto& d : j.at("defines")) {
    const auto& v = d.at("value");
    c.defines.emplace_back(d.at("name").get<std::string>(),
                           v.is_null() ? std::nullopt : std::optional(v.get<std::string>()));
  }
  c.headers = j.at("headers").get<std::map<std::string, std::string>>();
  c.name_expressions = j.at("name_expressions").get<std::vector<std::string>>();
  const auto& s = j.at("std");
  c.std = s.is_null() ? std::nullopt : std::optional(s.get<std::string>());
  c.default_device = j.at("default_device").get<bool>();
  c.no_source_include = j.at("no_source_include").get<bool>();
  c.toolkit_include_path = j.at("toolkit_include_path").get<bool>();
  c.ftz = j.at("ftz").get<bool>();
}

inline program_options options_of(const oracle_case& c) {
  program_options o;
  o.name = c.name;
  o.arch = c.arch;
  o.include_path = c.include_path;
  o.pre_include = c.pre_include;
  for (const auto& [name, value] : c.defines) {
    o.define_macro.push_back(value ? macro(name, *value) : macro(name));
  }
  for (const auto& [name, contents] : c.headers) o.headers.push_back({name, contents});
  o.std = c.std;
  if (c.default_device) o.device_as_default_execution_space = true;
  if (c.no_source_include) o.no_source_include = true;
  o.toolkit_include_path = c.toolkit_include_path;
  if (c.ftz) o.ftz = true;
  return o;
}

inline code_type target_of(const oracle_case& c) {
  if (c.target == "ptx") return code_type::ptx;
  if (c.target == "ltoir") return code_type::ltoir;
  return code_type::cubin;
}

}  // namespace cucore::oracle
