#include "command_line.hpp"

#include <algorithm>
#include <charconv>
#include <system_error>

#include <CLI/CLI.hpp>

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

// A name of more than two characters with a single dash ("-Xnvrtc", as nvcc's -Xptxas): CLI11
// knows only "-x" and "--name", so parse() hands it to CLI11 as "--Xnvrtc".
bool single_dash_long(std::string_view name) {
  return name.size() > 2 && name[0] == '-' && name[1] != '-';
}

std::string in_quotes(std::string_view text) {
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

const arguments::option_values* arguments::find(std::string_view name) const {
  for (const auto& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

bool arguments::has(std::string_view name) const {
  return find(name) != nullptr;
}

std::optional<std::string> arguments::last(std::string_view name) const {
  const option_values* o = find(name);
  if (o == nullptr) return std::nullopt;
  return o->values.back();
}

std::vector<std::string> arguments::all(std::string_view name) const {
  const option_values* o = find(name);
  return o == nullptr ? std::vector<std::string>() : o->values;
}

namespace {

// A single-dash long option given with "=VALUE" or alone ("-Xnvrtc=-w", "-Xnvrtc"), if `arg` is
// one of `specs`.
const option_spec* find_single_dash_long(std::span<const option_spec> specs, std::string_view arg) {
  for (const auto& spec : specs) {
    if (!single_dash_long(spec.name) || !arg.starts_with(spec.name)) continue;
    if (arg.size() == spec.name.size() || arg[spec.name.size()] == '=') return &spec;
  }
  return nullptr;
}

// What parse() gives CLI11.
struct scanned_line {
  std::vector<const option_spec*> named;
  std::vector<std::string> args;  // the line, with "-Xnvrtc" as "--Xnvrtc"
};

// The options the command line names, each once: the only ones parse() gives CLI11. A parser of
// every option costs a fresh process more than the rest of a cache hit (CLI11 checks each new
// option against all before it); one of those named parses the same line the same way, since an
// option that is not named cannot match. Also checks what CLI11 would word its own way or accept:
// a flag given a value ("--json=x"; CLI11 takes "--json=true"), a flag with letters attached
// ("-Gx"; CLI11 reads -G -x), "--arch=" (CLI11 takes the next argument), and a value option last
// on the line; and spells single-dash long options as CLI11 knows them.
scanned_line scan(std::span<const std::string> line, std::span<const option_spec> specs) {
  scanned_line out;
  out.args.assign(line.begin(), line.end());
  std::vector<const option_spec*>& named = out.named;
  auto name = [&](const option_spec* spec) {
    if (std::find(named.begin(), named.end(), spec) == named.end()) named.push_back(spec);
  };
  for (std::size_t i = 0; i < line.size(); ++i) {
    const std::string& arg = line[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const option_spec* single_dash =
        arg.starts_with("--") ? nullptr : find_single_dash_long(specs, arg);
    if (arg.starts_with("--") || single_dash != nullptr) {
      const auto eq = arg.find('=');
      const std::string_view spelling = std::string_view(arg).substr(0, eq);
      const option_spec* spec = single_dash != nullptr ? single_dash : find(specs, spelling);
      if (spec == nullptr) {
        // "--Xnvrtc" is CLI11's spelling of -Xnvrtc, not the tool's.
        const std::string_view one_dash = spelling.substr(1);
        if (single_dash_long(one_dash) && find(specs, one_dash) != nullptr) {
          throw usage_error("unknown option " + in_quotes(spelling) + " (the option is " +
                            std::string(one_dash) + ", with one dash)");
        }
        continue;  // unknown: CLI11 leaves it over, and parse() names it
      }
      if (single_dash != nullptr) out.args[i].insert(0, "-");
      name(spec);
      if (eq != std::string::npos) {
        if (!spec->takes_value()) {
          throw usage_error("option " + std::string(spelling) + " takes no value");
        }
        if (eq + 1 == arg.size()) {
          throw usage_error("option " + std::string(spelling) + " needs a non-empty value (" +
                            std::string(spec->value_name) + ")");
        }
        continue;
      }
      if (!spec->takes_value()) continue;
      if (i + 1 == line.size()) {
        throw usage_error("option " + std::string(spelling) + " needs a value (" +
                          std::string(spec->value_name) + ")");
      }
      ++i;  // its value, whatever it looks like
      continue;
    }
    const option_spec* spec = find(specs, std::string_view(arg).substr(0, 2));
    if (spec == nullptr) continue;
    name(spec);
    if (!spec->takes_value()) {
      if (arg.size() > 2) throw usage_error("unknown option " + in_quotes(arg));
      continue;
    }
    if (arg.size() > 2) continue;  // -IDIR
    if (i + 1 == line.size()) {
      throw usage_error("option " + arg + " needs a value (" + std::string(spec->value_name) + ")");
    }
    ++i;
  }
  return out;
}

// CLI11's name list for a spec: "-I,--include-path"; "--Xnvrtc" for "-Xnvrtc".
std::string cli11_names(const option_spec& spec) {
  std::string names =
      single_dash_long(spec.name) ? "-" + std::string(spec.name) : std::string(spec.name);
  if (!spec.alias.empty()) names += "," + std::string(spec.alias);
  return names;
}

}  // namespace

arguments parse(std::span<const std::string> line, std::span<const option_spec> specs) {
  const scanned_line scanned = scan(line, specs);
  const std::vector<const option_spec*>& named = scanned.named;
  const std::vector<std::string>& args = scanned.args;

  // Built per call, for the one command being run, from the options its line names.
  CLI::App app;
  app.set_help_flag();  // -h/--help is an ordinary flag here: commands answer it themselves
  app.allow_extras();   // unknown options are reported below, in the tool's words
  std::vector<std::pair<const option_spec*, CLI::Option*>> added;
  auto add = [&](const option_spec& spec) {
    CLI::Option* option = spec.takes_value()
                              ? app.add_option(cli11_names(spec))->expected(1)
                              : app.add_flag(cli11_names(spec))->disable_flag_override();
    // Every occurrence is kept, in order; commands decide whether the last one wins.
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    added.emplace_back(&spec, option);
  };
  for (const option_spec* spec : named) add(*spec);
  arguments out;
  app.add_option("positionals", out.positionals_);

  // CLI11 reads its arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw usage_error(e.what());
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;
    // "--frob=1": the option is "--frob".
    const std::string_view spelling =
        extra.starts_with("--") ? std::string_view(extra).substr(0, extra.find('=')) : extra;
    throw usage_error("unknown option " + in_quotes(spelling));
  }

  for (const auto& [spec, option] : added) {
    if (option->count() == 0) continue;
    arguments::option_values given{spec->name, {}};
    if (spec->takes_value()) {
      given.values = option->results();
      // An empty value is always a mistake (an unset shell variable); say so here rather than
      // let a compiler flag come out empty.
      for (const auto& value : given.values) {
        if (value.empty()) {
          throw usage_error("option " + std::string(spec->name) + " needs a non-empty value (" +
                            std::string(spec->value_name) + ")");
        }
      }
    } else {
      given.values.assign(option->count(), std::string());
    }
    out.options_.push_back(std::move(given));
  }
  return out;
}

int parse_int(std::string_view option, std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    throw usage_error(std::string(option) + ": " + in_quotes(text) + " is out of range");
  }
  if (ec != std::errc() || ptr != end) {
    throw usage_error(std::string(option) + ": " + in_quotes(text) + " is not an integer");
  }
  return value;
}

bool parse_bool(std::string_view option, std::string_view text, std::string_view yes,
                std::string_view no) {
  if (text == yes) return true;
  if (text == no) return false;
  throw usage_error(std::string(option) + ": " + in_quotes(text) + " is neither " + in_quotes(yes) +
                    " nor " + in_quotes(no));
}

std::string options_help(std::span<const option_spec> specs) {
  // The help texts start in one column, after the longest spelling up to this width; a longer one
  // ("--instantiate-templates-in-pch true|false") has its text on the next line.
  constexpr std::size_t max_width = 32;
  std::size_t width = spellings(help_option).size();
  for (const auto& spec : specs) {
    if (!spec.name.empty()) width = std::max(width, spellings(spec).size());
  }
  width = std::min(width, max_width);
  auto line = [&](const option_spec& spec) {
    std::string left = spellings(spec);
    if (left.size() > width) {
      return "  " + left + "\n" + std::string(width + 4, ' ') + std::string(spec.help) + "\n";
    }
    return "  " + left + std::string(width + 2 - left.size(), ' ') + std::string(spec.help) + "\n";
  };
  std::string out = line(help_option);
  for (const auto& spec : specs) {
    out += spec.name.empty() ? "\n" + std::string(spec.help) + ":\n" : line(spec);
  }
  return out;
}

}  // namespace cucore::cli
