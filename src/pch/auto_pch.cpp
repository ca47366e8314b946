#include "pch/auto_pch.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "common/descriptors.hpp"
#include "common/enum_names.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "loader/libraries.hpp"
#include "observe/compiler_observer.hpp"
#include "pch/image_registry.hpp"
#include "pch/pch_log.hpp"
#include "program/pch_heap.hpp"

namespace cucore {
namespace detail {
namespace {

namespace fs = std::filesystem;
using namespace pch_images;  // NOLINT: the registry and its log are this file's own

std::atomic<auto_pch_creation> g_creation{auto_pch_creation::second_sight};

// What counts compiles of a prefix before its key is worth making: the prefix text, the flags
// (arch, -I, -D, ...), what of the program name the prefix shows it may depend on
// (pch_program_name) and the in-memory headers.
std::string sighting_key(const std::string& prefix, const program_options& options,
                         code_type target, std::string_view extra) {
  std::string all = prefix;
  all.push_back('\0');
  all += extra;
  all.push_back('\0');
  for (const auto& f : compiler_flags(options, source_type::cxx, target)) {
    all += f;
    all.push_back('\0');
  }
  all += pch_program_name(prefix, options.name);
  for (const auto& h : options.headers) {
    all.push_back('\0');
    all += h.name;
    all.push_back('\0');
    all += h.contents;
  }
  const auto hex = sha256_hex(std::as_bytes(std::span<const char>(all.data(), all.size())));
  return std::string(hex.data(), hex.size());
}

std::string mib(std::uint64_t bytes) {
  return std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

// With the heap held, before the process's first image: NVRTC's PCH heap made kInitialHeap
// unless NVRTC_PCH_HEAP_SIZE set its size (NVRTC reads it at start-up) or it is larger already.
void size_first_heap(const nvrtc_api& api) {
  if (const char* env = std::getenv("NVRTC_PCH_HEAP_SIZE"); env != nullptr && *env != '\0') return;
  std::size_t current = 0;
  if (api.nvrtcGetPCHHeapSize(&current) != NVRTC_SUCCESS || current >= kInitialHeap) return;
  try {
    resize_pch_heap(api, kInitialHeap);
    debug("the PCH heap is " + mib(kInitialHeap) + " (NVRTC's default: " + mib(current) + ")");
  } catch (const std::exception& e) {
    debug(std::string("the PCH heap stays at ") + mib(current) + ": " + e.what());
  }
}

// Probes for prefix keys. An image lives in this process, with its one NVRTC: the key needs no
// NVRTC identity (asking the installed probe costs a compile, ~150 ms), only the header closure,
// with the digests of the cache's memo when the compile goes through a cache.
class prefix_probes final : public compiler_probes {
 public:
  explicit prefix_probes(std::optional<fs::path> memo) : memo_(std::move(memo)) {}
  version_probe nvrtc() const override { return {true, "the NVRTC of this process"}; }
  version_probe nvvm() const override { return {false, "unused"}; }
  linker_probe linker() const override { return {}; }
  std::optional<fs::path> header_digest_memo() const override { return memo_; }

 private:
  std::optional<fs::path> memo_;
};

// The prefix's key: make_program_cache_key over the prefix alone (the flags, the program name as
// pch_program_name keeps it, in-memory headers, and the include closure of the prefix).
std::optional<program_cache_key> prefix_key(const std::string& prefix,
                                            const program_options& options,
                                            const std::string& keyed_name, code_type target,
                                            const std::optional<fs::path>& memo,
                                            std::string_view extra, std::string& why) {
  program_cache_key_inputs in;
  // Only where the caller tells compiles apart beyond the options (a server's worker); an extra
  // digest also lets the key take includes it cannot work out, refused below.
  if (!extra.empty()) in.extra_digest = std::string(extra);
  in.code = prefix;
  in.code_type = source_type::cxx;
  in.options = options;
  in.options.name = keyed_name;
  in.target = target;
  try {
    program_cache_key key = make_program_cache_key(in, prefix_probes(memo));
    if (!key.includes().tracked) {
      why = "the prefix reads no header";
      return std::nullopt;
    }
    if (!key.includes().vouched.empty()) {
      why = "the prefix includes through a macro cucore cannot work out (" +
            key.includes().vouched.front() + ")";
      return std::nullopt;
    }
    return key;
  } catch (const std::exception& e) {
    why = std::string("the prefix has no key: ") + e.what();
    return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------------
// A defense in depth for images shared across names: the maker's name in the output.

// What NVRTC gave for `prog`: each output it has (PTX, cubin, LTO-IR, Tile IR), apart.
std::vector<std::string> nvrtc_outputs(const nvrtc_api& api, _nvrtcProgram* prog) {
  std::vector<std::string> out;
  const auto add = [&](auto size_of, auto get) {
    std::size_t n = 0;
    if (size_of == nullptr || get == nullptr || size_of(prog, &n) != NVRTC_SUCCESS || n == 0) {
      return;
    }
    std::string bytes(n, '\0');
    if (get(prog, bytes.data()) == NVRTC_SUCCESS) out.push_back(std::move(bytes));
  };
  add(api.nvrtcGetPTXSize, api.nvrtcGetPTX);
  add(api.nvrtcGetCUBINSize, api.nvrtcGetCUBIN);
  add(api.nvrtcGetLTOIRSize, api.nvrtcGetLTOIR);
  add(api.nvrtcGetTileIRSize, api.nvrtcGetTileIR);
  return out;
}

// PTX writes an initialised char array (a string literal's too) as decimals: "65, 46, 99, 117".
std::string decimals(std::string_view text) {
  std::string out;
  for (const char c : text) {
    out += (out.empty() ? "" : ", ") + std::to_string(static_cast<unsigned char>(c));
  }
  return out;
}

bool digit(const std::string_view text, std::size_t at) {
  return at < text.size() && text[at] >= '0' && text[at] <= '9';
}

// Whether `form` occurs in `text` other than inside an occurrence of `own` (the compiling
// program's name, which may hold the maker's: "sub/A.cu" holds "A.cu"). Decimals match whole.
bool occurs_apart(std::string_view text, std::string_view form, std::string_view own,
                  bool numbers) {
  for (std::size_t at = text.find(form); at != std::string_view::npos;
       at = text.find(form, at + 1)) {
    if (numbers && ((at > 0 && digit(text, at - 1)) || digit(text, at + form.size()))) continue;
    bool inside = false;
    for (std::size_t k = own.find(form); !inside && k != std::string_view::npos;
         k = own.find(form, k + 1)) {
      inside = at >= k && text.substr(at - k, own.size()) == own;
    }
    if (!inside) return true;
  }
  return false;
}

// The spelling of `maker` (the name as given, its basename) found in the outputs or the log of a
// compile of `name`, or "".
std::string makers_name_in(const std::string& maker, const std::string& name,
                           const std::vector<std::string>& outputs, const std::string& log) {
  std::vector<std::string> forms{maker};
  if (const std::size_t slash = maker.rfind('/');
      slash != std::string::npos && slash + 1 < maker.size()) {
    forms.push_back(maker.substr(slash + 1));
  }
  const std::string own_numbers = decimals(name);
  for (const auto& form : forms) {
    const std::string numbers = decimals(form);
    if (occurs_apart(log, form, name, false)) return "\"" + form + "\" (in the log)";
    for (const auto& bytes : outputs) {
      if (occurs_apart(bytes, form, name, false)) return "\"" + form + "\"";
      if (occurs_apart(bytes, numbers, own_numbers, true)) {
        return "\"" + form + "\" (as " + numbers + ")";
      }
    }
  }
  return {};
}

}  // namespace

void set_auto_pch_creation(auto_pch_creation when) {
  g_creation = when;
}

auto_pch_totals auto_pch_state() {
  return registry::get().totals();
}

auto_pch_compile::auto_pch_compile(const nvrtc_api& api, std::string_view code,
                                   const program_options& options, code_type target,
                                   std::optional<std::filesystem::path> header_memo,
                                   std::string_view extra_identity)
    : api_(api) {
  const log_scope said;
  // The caller's own PCH options keep their rules (and instantiate_templates_in_pch=true would
  // reorder the output's symbols: a different cubin).
  if (!options.auto_pch.value_or(true) || options.pch.value_or(false) || options.create_pch ||
      options.use_pch || options.pch_dir) {
    return;
  }
  if (options.instantiate_templates_in_pch.value_or(false)) {
    debug("not used: instantiate_templates_in_pch=true changes the order of symbols in the output");
    return;
  }
  registry& reg = registry::get();
  if (reg.disabled()) return;

  status_ = auto_pch_status::no_prefix;
  const pch_prefix scan = scan_pch_prefix(code);
  if (!scan.balanced || scan.line_marker || (!scan.includes && options.pre_include.empty())) {
    return;
  }
  std::string prefix(code.substr(0, scan.end));
  if (prefix.empty()) prefix = "\n";  // pre_include alone
  options_ = options;
  bool may_create = true;
  try {
    sighting_ = sighting_key(prefix, options, target, extra_identity);
    const auto creation = g_creation.load();
    may_create = creation != auto_pch_creation::never;
    if (creation == auto_pch_creation::second_sight &&
        reg.sighting(sighting_) < kCreateAtSighting) {
      status_ = auto_pch_status::first_seen;
      return;
    }
  } catch (const std::exception& e) {
    debug(std::string("not used: ") + e.what());
    return;
  }
  std::string why;
  const std::string keyed_name = pch_program_name(prefix, options.name);
  prefix_key_ = prefix_key(prefix, options, keyed_name, target, header_memo, extra_identity, why);
  if (!prefix_key_) {
    debug("not used for \"" + options.name + "\": " + why);
    return;
  }
  identity_ = prefix_key_->hex();
  // Images are shared across program names where the name cannot reach them (measured:
  // docs/compile-server.md, "Images across program names"); else the whole name keys it too.
  bool whole_name = keyed_name == options.name;
  try {
    whole_name = whole_name ||
                 pch_needs_whole_name(prefix, *prefix_key_, options,
                                      compiler_flags(options, source_type::cxx, target), target);
  } catch (const std::exception&) {
    whole_name = true;
  }
  // A name the scans missed showed in an output from this prefix's image (retry_for_makers_name).
  whole_name = whole_name || (keyed_name != options.name && reg.keyed_by_name(identity_));
  if (whole_name && keyed_name != options.name) {
    const std::string named = identity_ + '\0' + options.name;
    const auto hex = sha256_hex(std::as_bytes(std::span<const char>(named.data(), named.size())));
    identity_.assign(hex.data(), hex.size());
  }
  if (reg.peek(identity_, status_) == registry::step::plain) return;

  heap_ = lock_pch_heap();
  if (reg.first_heap_use()) size_first_heap(api_);
  const registry::plan p = reg.claim(identity_, may_create);
  status_ = p.status;
  if (p.status != auto_pch_status::created && p.status != auto_pch_status::used) {
    heap_.unlock();
    return;
  }
  creating_ = p.status == auto_pch_status::created;
  if (p.status == auto_pch_status::used && p.maker != options.name) maker_ = p.maker;
  flags_ = {"--pch", "--pch-dir=" + p.dir.string()};
  if (!options.instantiate_templates_in_pch)
    flags_.push_back("--instantiate-templates-in-pch=false");
  if (!options.pch_messages) flags_.push_back("--pch-messages=false");
  if (!options.pch_verbose) flags_.push_back("--pch-verbose=false");
  // NVRTC warns (#639, even with --pch-verbose=false) when the heap is too small for an image.
  flags_.push_back("--diag-suppress=639");
}

auto_pch_compile::~auto_pch_compile() {
  // A creation that did not finish (the compile threw) leaves no image behind.
  if (creating_ && heap_.owns_lock()) registry::get().drop(identity_, false);
}

void auto_pch_compile::finish_plain(auto_pch_status status) {
  status_ = status;
  creating_ = false;
  flags_.clear();
  if (heap_.owns_lock()) heap_.unlock();
}

bool auto_pch_compile::retry_for_pch_diagnostics(const std::string& log) {
  const std::string line = pch_diagnostic(log);
  if (line.empty()) return false;
  debug("NVRTC's log for \"" + options_.name + "\" speaks of precompiled headers (" + line +
        "): compiling it again without them, as every compile of its prefix in this process");
  registry::get().drop(identity_, true);
  finish_plain(auto_pch_status::discarded);
  return true;
}

// After a compile from an image another program name made: the output or log holding that name
// means the name reached the image in a way the prefix scans do not see (__BASE_FILE__ pasted
// from one-character pieces, say): compiled again plain, and the prefix's images keyed by the
// whole name from then on. A program that names the other file itself costs a recompile.
bool auto_pch_compile::retry_for_makers_name(_nvrtcProgram* prog, const std::string& log) {
  if (maker_.empty() || maker_ == options_.name) return false;
  const std::string found = makers_name_in(maker_, options_.name, nvrtc_outputs(api_, prog), log);
  if (found.empty()) return false;
  debug("the output of \"" + options_.name + "\" from the precompiled header of prefix " +
        identity_.substr(0, 16) + ", made compiling \"" + maker_ + "\", holds " + found +
        ": compiling it again without it; this prefix's images are keyed by the whole program "
        "name in this process from now on");
  registry::get().key_by_name(identity_);
  finish_plain(auto_pch_status::discarded);
  return true;
}

bool auto_pch_compile::succeeded(_nvrtcProgram* prog, const std::string& log) {
  const log_scope said;
  if (!active()) return false;
  if (retry_for_pch_diagnostics(log)) return true;
  registry& reg = registry::get();
  const nvrtcResult made = api_.nvrtcGetPCHCreateStatus(prog);
  const std::string which = "prefix " + identity_.substr(0, 16) + " of \"" + options_.name + "\"";
  if (!creating_) {
    if (made == NVRTC_SUCCESS) {
      // NVRTC did not take the image offered (and made another): start over at the next compile.
      debug("NVRTC did not use the precompiled header of " + which +
            " and made another; both "
            "are removed");
      reg.drop(identity_, false);
      finish_plain(auto_pch_status::discarded);
      return false;
    }
    if (retry_for_makers_name(prog, log)) return true;
    finish_plain(auto_pch_status::used);
    return false;
  }
  switch (made) {
    case NVRTC_SUCCESS: {
      if (!quiet(log)) {
        debug("the precompiled header of " + which +
              " is not kept: the compile that made it "
              "logged diagnostics, which a compile from it would not repeat for the headers");
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      // The headers were read after the prefix's key was made: kept only if each is still the
      // file the key hashed, and had settled then (program_cache_key::check_store).
      if (const auto refusal = prefix_key_->check_store()) {
        debug("the precompiled header of " + which + " is not kept: " + refusal->message);
        reg.drop(identity_, false);
        finish_plain(auto_pch_status::discarded);
        return false;
      }
      std::string why;
      if (!reg.created(identity_, options_.name, why)) {
        debug("the precompiled header of " + which + " is not kept: " + why);
        finish_plain(auto_pch_status::discarded);
        return false;
      }
      finish_plain(auto_pch_status::created);
      return false;
    }
    case NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED: {
      std::size_t required = 0;
      std::size_t current = 0;
      reg.drop(identity_, false);
      if (api_.nvrtcGetPCHHeapSizeRequired(prog, &required) != NVRTC_SUCCESS ||
          api_.nvrtcGetPCHHeapSize(&current) != NVRTC_SUCCESS) {
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      const std::uint64_t grown = (required + kHeapStep - 1) / kHeapStep * kHeapStep + kHeapStep;
      if (grown > kMaxHeap) {
        debug("no precompiled header for " + which + ": it needs " + mib(required) +
              " of PCH heap, more than the " + mib(kMaxHeap) + " cucore grows it to");
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      try {
        resize_pch_heap(api_, std::max<std::uint64_t>(grown, current));
        debug("the PCH heap (" + mib(current) + ") was too small for " + which + " (" +
              mib(required) + "): grown to " + mib(std::max<std::uint64_t>(grown, current)) +
              "; the next compile of this prefix makes its precompiled header");
      } catch (const std::exception& e) {
        debug(std::string("could not grow the PCH heap: ") + e.what());
        reg.drop(identity_, true);
        finish_plain(auto_pch_status::unusable);
        return false;
      }
      finish_plain(auto_pch_status::discarded);
      return false;
    }
    case NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED:
      debug("NVRTC made no precompiled header for " + which +
            " (it precompiles only leading #include lines at file scope, outside #if and without "
            "#line); its compiles read the headers");
      reg.drop(identity_, true);
      finish_plain(auto_pch_status::unusable);
      return false;
    default:
      debug("NVRTC failed to make the precompiled header of " + which + " (" +
            api_.nvrtcGetErrorString(made) + "); its compiles read the headers");
      reg.drop(identity_, true);
      finish_plain(auto_pch_status::unusable);
      return false;
  }
}

bool auto_pch_compile::failed(const std::string& log) {
  const log_scope said;
  if (!active()) return false;
  const bool was_creating = creating_;
  if (was_creating) {
    // The code does not compile: its next compiles are plain again until it comes back twice (a
    // failing edit-compile loop does not pay for making an image each time).
    registry::get().drop(identity_, false);
    registry::get().forget_sightings(sighting_);
  }
  failure_ = catastrophic_line(log);
  if (failure_.empty()) {
    if (retry_for_pch_diagnostics(log)) return true;
    // An error in the code: the plain compile would report the same (the prefix is quiet, or this
    // compile read the headers itself).
    finish_plain(was_creating ? auto_pch_status::discarded : status_);
    return false;
  }
  debug("compiling \"" + options_.name + "\" with precompiled headers failed (" + failure_ +
        "); compiling it again without them");
  finish_plain(auto_pch_status::discarded);
  return true;
}

void auto_pch_compile::retry_succeeded() {
  if (failure_.empty()) return;
  registry::get().disable("compiling with precompiled headers failed (" + failure_ +
                          ") where compiling without them succeeded; check TMPDIR (" +
                          nvrtc_temp_directory().string() + ") has room");
}

}  // namespace detail

constexpr auto kAutoPchStatusNames = detail::name_each<auto_pch_status::discarded>(
    "off", "no_prefix", "first_seen", "created", "used", "unusable", "discarded");

std::string_view to_string(auto_pch_status status) noexcept {
  return kAutoPchStatusNames(status);
}

void clear_auto_pch() {
  auto heap = detail::lock_pch_heap();
  detail::registry::get().clear();
}

}  // namespace cucore
