#include "arguments.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace cucore::cli {
namespace {

const option_spec* find(std::span<const option_spec> specs, std::string_view spelling) {
  for (const auto& spec : specs) {
    if (spec.name.empty()) continue;  // a heading
    if (spec.name == spelling || (!spec.alias.empty() && spec.alias == spelling)) return &spec;
  }
  if (spelling == help_option.name || spelling == help_option.alias) return &help_option;
  return nullptr;
}

std::string quoted(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

// "-I, --include-path DIR": the short spelling first, as people scan for it.
std::string spellings(const option_spec& spec) {
  std::string_view first = spec.name;
  std::string_view second = spec.alias;
  if (!second.empty() && !second.starts_with("--") && first.starts_with("--")) {
    std::swap(first, second);
  }
  std::string out(first);
  if (!second.empty()) out += ", " + std::string(second);
  if (spec.takes_value()) out += " " + std::string(spec.value_name);
  return out;
}

}  // namespace

bool arguments::has(std::string_view name) const {
  return std::any_of(options_.begin(), options_.end(),
                     [&](const occurrence& o) { return o.name == name; });
}

std::optional<std::string> arguments::last(std::string_view name) const {
  for (auto it = options_.rbegin(); it != options_.rend(); ++it) {
    if (it->name == name) return it->value;
  }
  return std::nullopt;
}

std::vector<std::string> arguments::all(std::string_view name) const {
  std::vector<std::string> values;
  for (const auto& o : options_) {
    if (o.name == name) values.push_back(o.value);
  }
  return values;
}

arguments parse(std::span<const std::string> args, std::span<const option_spec> specs) {
  arguments out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.positionals_.insert(out.positionals_.end(), args.begin() + static_cast<long>(i) + 1,
                              args.end());
      break;
    }
    // "-" alone is a positional, as in most tools.
    if (arg.size() < 2 || arg[0] != '-') {
      out.positionals_.push_back(arg);
      continue;
    }

    std::string_view spelling = arg;
    std::optional<std::string> value;
    const option_spec* spec = nullptr;
    if (arg.starts_with("--")) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        spelling = std::string_view(arg).substr(0, eq);
        value = arg.substr(eq + 1);
      }
      spec = find(specs, spelling);
    } else if (spec = find(specs, spelling); spec == nullptr) {
      // -IDIR: a short option with its value attached. Flags never take one ("-Gx" is unknown).
      const option_spec* prefix = find(specs, spelling.substr(0, 2));
      if (prefix != nullptr && prefix->takes_value()) {
        spec = prefix;
        spelling = spelling.substr(0, 2);
        value = arg.substr(2);
      }
    }
    if (spec == nullptr) throw usage_error("unknown option " + quoted(spelling));

    if (spec->takes_value()) {
      if (!value) {
        if (i + 1 == args.size()) {
          throw usage_error("option " + std::string(spelling) + " needs a value (" +
                            std::string(spec->value_name) + ")");
        }
        value = args[++i];
      }
      // An empty value is always a mistake (an unset shell variable, "--arch="); say so here
      // rather than let a compiler flag come out empty.
      if (value->empty()) {
        throw usage_error("option " + std::string(spelling) + " needs a non-empty value (" +
                          std::string(spec->value_name) + ")");
      }
    } else if (value) {
      throw usage_error("option " + std::string(spelling) + " takes no value");
    }
    out.options_.push_back({std::string(spec->name), value.value_or(std::string())});
  }
  return out;
}

int parse_int(std::string_view option, std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    throw usage_error(std::string(option) + ": " + quoted(text) + " is out of range");
  }
  if (ec != std::errc() || ptr != end) {
    throw usage_error(std::string(option) + ": " + quoted(text) + " is not an integer");
  }
  return value;
}

bool parse_bool(std::string_view option, std::string_view text, std::string_view yes,
                std::string_view no) {
  if (text == yes) return true;
  if (text == no) return false;
  throw usage_error(std::string(option) + ": " + quoted(text) + " is neither " + quoted(yes) +
                    " nor " + quoted(no));
}

std::string options_help(std::span<const option_spec> specs) {
  std::size_t width = spellings(help_option).size();
  for (const auto& spec : specs) {
    if (!spec.name.empty()) width = std::max(width, spellings(spec).size());
  }
  auto line = [&](const option_spec& spec) {
    std::string left = spellings(spec);
    return "  " + left + std::string(width + 2 - left.size(), ' ') + std::string(spec.help) + "\n";
  };
  std::string out = line(help_option);
  for (const auto& spec : specs) {
    out += spec.name.empty() ? "\n" + std::string(spec.help) + ":\n" : line(spec);
  }
  return out;
}

}  // namespace cucore::cli
