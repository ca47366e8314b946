// pack_program_cache: a pack file as a read-only cache (cucore/cache/pack.hpp).
#include <atomic>
#include <mutex>
#include <unordered_set>

#include "cache/pack/pack_format.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/log.hpp"

namespace cucore {

struct pack_program_cache::state {
  explicit state(std::filesystem::path path) : in(std::move(path)) {}
  detail::pack::reader in;
  std::atomic<std::uint64_t> hits{0}, misses{0}, errors{0};
  std::mutex mutex;                          // guards `reported`
  std::unordered_set<std::size_t> reported;  // damaged records already logged
};

pack_program_cache::pack_program_cache(std::filesystem::path pack)
    : state_(std::make_unique<state>(std::move(pack))) {}

pack_program_cache::~pack_program_cache() = default;

namespace {

[[noreturn]] void refuse_write(const std::filesystem::path& pack, std::string_view what) {
  throw invalid_argument("cannot " + std::string(what) + " the pack " + pack.string() +
                         ": a pack is read-only (import it into a cache to change its entries: "
                         "`cucore cache import`)");
}

}  // namespace

std::optional<object_code> pack_program_cache::get(cache_key_ref key) {
  const auto& in = state_->in;
  const detail::pack::row* r = in.find(key.as_string_view());
  if (r == nullptr) {
    ++state_->misses;
    return std::nullopt;
  }
  const std::size_t index = static_cast<std::size_t>(r - in.rows().data());
  detail::pack::record rec = in.read(index, /*with_code=*/true);
  if (!rec.error.empty()) {
    // A miss, never a wrong result; said once per record.
    ++state_->misses;
    ++state_->errors;
    bool first = false;
    {
      std::lock_guard lock(state_->mutex);
      first = state_->reported.insert(index).second;
    }
    if (first) {
      log(log_level::warning, std::string(in.error_at(index, rec.error).what()) +
                                  ": read as a miss (`cucore cache import --check` checks a pack)");
    }
    return std::nullopt;
  }
  ++state_->hits;
  return std::move(rec.code);
}

void pack_program_cache::put(cache_key_ref, const object_code&) {
  refuse_write(state_->in.path(), "store an entry in");
}

bool pack_program_cache::erase(cache_key_ref) {
  refuse_write(state_->in.path(), "remove an entry from");
}

void pack_program_cache::clear() {
  refuse_write(state_->in.path(), "clear");
}

std::size_t pack_program_cache::trim(std::uint64_t) {
  refuse_write(state_->in.path(), "trim");
}

std::size_t pack_program_cache::size() {
  return state_->in.rows().size();
}

std::uint64_t pack_program_cache::size_bytes() {
  std::uint64_t total = 0;
  for (const auto& r : state_->in.rows()) total += r.compressed;
  return total;
}

cache_stats pack_program_cache::stats() const {
  cache_stats s;
  s.hits = state_->hits.load();
  s.misses = state_->misses.load();
  s.errors = state_->errors.load();
  return s;
}

std::vector<cache_entry_info> pack_program_cache::list() {
  std::vector<cache_entry_info> out;
  out.reserve(state_->in.rows().size());
  for (const auto& r : state_->in.rows()) {
    cache_entry_info e;
    e.key.assign(reinterpret_cast<const std::byte*>(r.key.data()),
                 reinterpret_cast<const std::byte*>(r.key.data()) + r.key.size());
    e.type = r.type;
    e.name = r.name;
    e.symbol_count = r.symbols;
    e.payload_bytes = r.code_bytes;
    e.stored_bytes = r.compressed;
    e.last_used = r.last_used;
    out.push_back(std::move(e));
  }
  return out;
}

cache_verify_report pack_program_cache::verify(bool) {
  cache_verify_report report;
  const auto& in = state_->in;
  for (std::size_t i = 0; i < in.rows().size(); ++i) {
    ++report.entries;
    const detail::pack::record r = in.read(i, /*with_code=*/false);
    if (r.error.empty()) {
      ++report.ok;
    } else {
      ++report.corrupt;
      report.notes.push_back(std::string(in.error_at(i, r.error).what()) +
                             ": left in place (a pack is read-only; export it again)");
    }
  }
  return report;
}

std::string pack_program_cache::description() const {
  return "pack " + state_->in.path().string();
}

const std::filesystem::path& pack_program_cache::file() const noexcept {
  return state_->in.path();
}

const pack_info& pack_program_cache::info() const noexcept {
  return state_->in.info();
}

std::optional<std::string> pack_program_cache::compiler_identity(cache_key_ref key) {
  const auto& in = state_->in;
  const detail::pack::row* r = in.find(key.as_string_view());
  if (r == nullptr || (r->flags & detail::pack::kFlagIdentity) == 0) return std::nullopt;
  const detail::pack::record rec =
      in.read(static_cast<std::size_t>(r - in.rows().data()), /*with_code=*/false);
  if (!rec.error.empty() || rec.identity.empty()) return std::nullopt;
  return rec.identity;
}

}  // namespace cucore
