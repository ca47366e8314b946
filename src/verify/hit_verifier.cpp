// Verify mode's parts (verify/hit_verifier.hpp; the flow is cached/program_compile.cpp's).
#include "verify/hit_verifier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>

#include "cache/posix_file.hpp"
#include "common/environment.hpp"
#include "common/sha256.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore::detail {

namespace {

bool ident_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string_view text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Where the _<8 hex>_<pid> tail of the _INTERNAL_ identifier [at, end) begins, if it has one.
std::optional<std::size_t> internal_tail(std::string_view text, std::size_t at, std::size_t end,
                                         std::size_t mark_size) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const std::size_t pid_start = text.rfind('_', end - 1);
  if (pid_start == std::string_view::npos || pid_start <= at + mark_size || pid_start + 1 >= end) {
    return std::nullopt;
  }
  const std::string_view pid = text.substr(pid_start + 1, end - pid_start - 1);
  if (!std::all_of(pid.begin(), pid.end(), digit)) return std::nullopt;
  if (pid_start < 9 || text[pid_start - 9] != '_') return std::nullopt;
  const std::string_view id = text.substr(pid_start - 8, 8);
  if (!std::all_of(id.begin(), id.end(), [&](char c) {
        return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      })) {
    return std::nullopt;
  }
  return pid_start - 8;
}

// Calls f(begin, end) for each _INTERNAL_ identifier of `text` whose tail is _<8 hex>_<digits>:
// [begin, end) is that tail after its first '_'. Inside a mangled name
// (_ZN3cub40_INTERNAL_<module>_<8 hex>_<pid>4cuda3std...) the next component's digits and letters
// run on from the pid: the identifier's length prefix bounds it.
template <class F>
void for_each_internal_tail(std::string_view text, F&& f) {
  constexpr std::string_view mark = "_INTERNAL_";
  for (std::size_t at = text.find(mark); at != std::string_view::npos;
       at = text.find(mark, at + 1)) {
    std::size_t end = at + mark.size();
    while (end < text.size() && ident_char(text[end])) ++end;
    std::size_t digits = at;
    while (digits > 0 && at - digits < 4 && text[digits - 1] >= '0' && text[digits - 1] <= '9') {
      --digits;
    }
    std::size_t length = 0;
    for (std::size_t i = digits; i < at; ++i) length = length * 10 + (text[i] - '0');
    if (length > mark.size() && at + length < end) {
      if (const auto begin = internal_tail(text, at, at + length, mark.size())) {
        f(*begin, at + length);
        continue;
      }
    }
    if (const auto begin = internal_tail(text, at, end, mark.size())) f(*begin, end);
  }
}

std::string masked(std::span<const std::byte> bytes) {
  std::string out(text_of(bytes));
  for_each_internal_tail(out, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      if (out[i] != '_') out[i] = '0';
    }
  });
  return out;
}

}  // namespace

double verify_rate(const program_options& options) {
  if (options.verify) {
    const double rate = *options.verify;
    if (!(rate >= 0.0 && rate <= 1.0)) {
      throw invalid_argument("program_options::verify = " + std::to_string(rate) +
                             ": give the fraction of cache hits to verify, from 0 to 1");
    }
    return rate;
  }
  static const double from_environment = [] {
    const auto rate = env::number(env::variable::verify);
    if (rate.malformed()) {
      cucore::log(log_level::warning, "CUCORE_VERIFY=\"" + std::string(rate.text) +
                                          "\": not a fraction from 0 to 1; no hit is verified");
    }
    return rate.value.value_or(0.0);
  }();
  return from_environment;
}

bool sampled(double rate) {
  if (rate <= 0.0) return false;
  if (rate >= 1.0) return true;
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator) < rate;
}

std::optional<pid_t> output_pid(std::span<const std::byte> output) {
  std::optional<pid_t> pid;
  const std::string_view text = text_of(output);
  for_each_internal_tail(text, [&](std::size_t begin, std::size_t end) {
    if (pid) return;
    const std::string digits(text.substr(begin + 9, end - begin - 9));
    if (digits.size() <= 9) pid = static_cast<pid_t>(std::stol(digits));
  });
  return pid;
}

std::optional<std::size_t> first_difference(std::span<const std::byte> a,
                                            std::span<const std::byte> b) {
  const std::string ma = masked(a);
  const std::string mb = masked(b);
  const auto [ia, ib] = std::mismatch(ma.begin(), ma.end(), mb.begin(), mb.end());
  if (ia == ma.end() && ib == mb.end()) return std::nullopt;
  return static_cast<std::size_t>(ia - ma.begin());
}

std::optional<std::filesystem::path> write_verify_report(std::string_view key_hex,
                                                         std::string_view text) {
  namespace fs = std::filesystem;
  fs::path dir;
  if (const auto chosen = env::text(env::variable::verify_reports)) {
    dir = *chosen;
  } else {
    const char* tmp = std::getenv("TMPDIR");
    dir = fs::path(tmp != nullptr && *tmp == '/' ? tmp : "/tmp") /
          ("cucore-verify-" + std::to_string(::getuid()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) {
    return std::nullopt;
  }
  const fs::path path =
      dir / ("mismatch-" + std::string(key_hex.substr(0, 16)) + "-" + std::to_string(::getpid()) +
             "-" + std::to_string(::time(nullptr)) + ".txt");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return std::nullopt;
  const std::error_code failed =
      posix::write_fully(fd, std::as_bytes(std::span<const char>(text.data(), text.size())));
  ::close(fd);
  if (failed) return std::nullopt;
  return path;
}

std::string digest_hex(std::span<const std::byte> bytes) {
  const auto hex = sha256_hex(bytes);
  return std::string(hex.data(), hex.size());
}

}  // namespace cucore::detail
