#include "dropin/support.hpp"

#include "dropin/run_environment.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "common/environment.hpp"
#include "cucore/cache/open.hpp"

namespace cucore::dropin {
namespace {

int log_threshold() {
  static const int threshold = log_threshold_from_environment();
  return threshold;
}

void print(log_level level, std::string_view message) noexcept {
  const char* prefix = level == log_level::error     ? "error"
                       : level == log_level::warning ? "warning"
                       : level == log_level::info    ? "info"
                                                     : "debug";
  std::fprintf(stderr, "cucore[%d]: %s: %.*s\n", static_cast<int>(::getpid()), prefix,
               static_cast<int>(message.size()), message.data());
}

}  // namespace

bool log_enabled(log_level level) noexcept {
  return static_cast<int>(level) >= log_threshold();
}

void note(log_level level, std::string_view message) noexcept {
  if (log_enabled(level)) print(level, message);
}

void install_log_handler() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      set_log_handler([](log_level level, std::string_view message) { note(level, message); });
    });
  } catch (...) {
  }
}

void report_once(std::string_view what, std::string_view message) noexcept {
  static std::mutex mutex;
  static std::set<std::string, std::less<>>* reported = new std::set<std::string, std::less<>>;
  try {
    std::lock_guard lock(mutex);
    if (!reported->emplace(what).second) return;
    print(log_level::error, message);
  } catch (...) {
  }
}

program_cache* process_cache() noexcept {
  // Leaked on purpose: programs may compile from static destructors and other threads at exit.
  static program_cache* cache = []() -> program_cache* {
    install_log_handler();
    const std::string spec(env::text(env::variable::run_cache).value_or(""));
    if (spec == "none" || spec == "off") {
      note(log_level::info, "CUCORE_RUN_CACHE=" + spec + ": every compile goes to the library");
      return nullptr;
    }
    try {
      // No fsync unless CUCORE_CACHE_FSYNC asks: a power loss costs a later miss, never a wrong
      // entry (each is checksummed), and a miss then costs the program little more than NVRTC.
      open_cache_options options;
      if (!env::text(env::variable::cache_fsync)) options.fsync = false;
      auto opened = open_program_cache(spec, options);
      if (!opened) return nullptr;
      note(log_level::debug, "cache: " + opened->description());
      return opened.release();
    } catch (const std::exception& e) {
      note(log_level::warning,
           std::string("cannot open the program cache (every compile goes to the library): ") +
               e.what());
    } catch (...) {
    }
    return nullptr;
  }();
  return cache;
}

void record_skip(cache_skip_reason reason) noexcept {
  try {
    if (auto* cache = process_cache()) {
      if (auto stats = cache->statistics()) stats->record_skip(reason);
    }
  } catch (...) {
  }
}

void record_writer::number(std::int64_t value) {
  const auto v = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
}

void record_writer::bytes(std::string_view data) {
  number(static_cast<std::int64_t>(data.size()));
  const auto* p = reinterpret_cast<const std::byte*>(data.data());
  out_.insert(out_.end(), p, p + data.size());
}

record_reader::record_reader(std::span<const std::byte> data, std::string_view magic)
    : data_(data) {
  if (bytes() != magic) throw format_error{};
}

std::uint64_t record_reader::u64() {
  if (data_.size() - at_ < 8) throw format_error{};
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(data_[at_ + i]) << (8 * i);
  at_ += 8;
  return v;
}

std::int64_t record_reader::number() {
  return static_cast<std::int64_t>(u64());
}

std::string_view record_reader::bytes() {
  const std::uint64_t n = u64();
  if (n > data_.size() - at_) throw format_error{};
  std::string_view out(reinterpret_cast<const char*>(data_.data() + at_), n);
  at_ += n;
  return out;
}

std::string current_directory() {
  std::string buffer(4096, '\0');
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE || buffer.size() > (1u << 20)) return "?";
    buffer.resize(buffer.size() * 2);
  }
  buffer.resize(std::char_traits<char>::length(buffer.c_str()));
  return buffer;
}

}  // namespace cucore::dropin
