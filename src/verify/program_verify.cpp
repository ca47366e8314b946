// Verify mode's flow (docs/verify.md): a sampled hit compiled again, uncached, and judged against
// the entry, on the calling thread (rate 1) or on the process's background thread (below 1).
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/enum_names.hpp"
#include "common/trace.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "observe/compile_replay.hpp"
#include "verify/background_verifier.hpp"
#include "verify/hit_verifier.hpp"

namespace cucore {

constexpr auto kVerifyOutcomeNames =
    detail::name_each<verify_outcome::queued>("not_verified", "verified", "mismatch", "queued");

std::string_view to_string(verify_outcome outcome) noexcept {
  return kVerifyOutcomeNames(outcome);
}

void wait_for_background_verification() {
  detail::drain_verifications();
}

// The fresh compile a hit is judged by, and where it first differs from the entry.
struct program::replayed_compile {
  std::optional<object_code> fresh;
  std::optional<compile_error> failed;
  std::optional<std::size_t> differs;  // the first differing byte, NVRTC's per-process ids masked
  bool symbols_differ = false;
  bool matches() const { return fresh && !differs && !symbols_differ; }
};

namespace {

struct mismatch_context {
  const program_cache_key& key;
  const std::string& name;
  code_type target;
  const std::string& cache;
  const char* removal;  // what became of the entry
};

// What a bug report needs: the key and its fields, both outputs' digests, where they first differ.
std::string mismatch_report(const mismatch_context& c, const object_code& cached,
                            const std::optional<object_code>& fresh,
                            const std::optional<compile_error>& failed,
                            std::optional<std::size_t> differs) {
  std::string report = "cucore verify mismatch: a cache hit differs from a fresh compile\n";
  report += "key " + c.key.hex() + "\nprogram " + c.name + "\ntarget " +
            std::string(to_string(c.target)) + "\ncache " + c.cache + " (" + c.removal + ")\n";
  report += "cached output " + std::to_string(cached.code().size()) + " bytes, sha256 " +
            detail::digest_hex(cached.code()) + "\n";
  if (fresh) {
    report += "fresh output " + std::to_string(fresh->code().size()) + " bytes, sha256 " +
              detail::digest_hex(fresh->code()) + "\n";
    report += differs
                  ? "first difference at byte " + std::to_string(*differs) +
                        " (NVRTC's _INTERNAL_ module and process ids masked)\n"
                  : std::string("the outputs are equal; the name expressions' symbols differ\n");
  } else if (failed) {
    report += "the fresh compile failed (" + failed->status() + "):\n" + failed->log() + "\n";
  }
  report += "the fresh compile ran with the clock " +
            std::to_string(detail::kVerifyClockShiftSeconds) +
            " s on (an output that depends on the clock differs)\n\nkey fields:\n";
  for (const auto& field : c.key.explain()) {
    report += field.label + ": " + field.payload.substr(0, 4096) + "\n";
  }
  return report;
}

// Counts, reports and logs a stale hit caught; returns the report's path.
std::optional<std::string> record_mismatch(const mismatch_context& c,
                                           const std::shared_ptr<cache_statistics>& stats,
                                           const std::string& report, const char* outcome) {
  if (stats) stats->record_verify(true);
  const auto path = detail::write_verify_report(c.key.hex(), report);
  cucore::log(log_level::warning, "verify: the " + c.cache + " cache's entry for \"" + c.name +
                                      "\" (key " + c.key.hex().substr(0, 16) +
                                      ") differs from a fresh compile: a stale hit, " + outcome +
                                      (path ? " (report: " + path->string() + ")" : std::string()));
  return path ? std::optional(path->string()) : std::nullopt;
}

}  // namespace

// The hit compiled again, uncached, on this thread (not through the compile server, without
// automatic PCH: an image made earlier could carry what the entry carries), with the clock moved
// on, so that an output that depends on it differs, and NVRTC's process id pinned to the entry's,
// so that its per-process names keep their length.
program::replayed_compile program::replay_hit(code_type target,
                                              std::span<const std::string> name_expressions,
                                              const object_code& cached) {
  const program_options saved = options_;
  if (type_ == source_type::cxx) {  // NVRTC's only: the PTX and NVVM backends refuse them
    options_.compile_server = compile_server_mode::off;
    options_.auto_pch = false;
  }
  // Pinned only without the caller's own PCH options: NVRTC names PCH scratch files by its pid.
  const bool own_pch =
      options_.pch.value_or(false) || options_.create_pch || options_.use_pch || options_.pch_dir;
  const pid_t pid = own_pch ? 0 : detail::output_pid(cached.code()).value_or(0);
  replayed_compile out;
  try {
    const detail::compile_replay replay(detail::kVerifyClockShiftSeconds, pid);
    out.fresh = compile_uncached(target, name_expressions, nullptr);  // plain, here
  } catch (const compile_error& e) {
    out.failed = e;
  } catch (...) {
    options_ = saved;
    throw;
  }
  options_ = saved;
  if (out.fresh) {
    out.differs = detail::first_difference(cached.code(), out.fresh->code());
    out.symbols_differ = cached.symbol_mapping() != out.fresh->symbol_mapping();
  }
  return out;
}

// Rate 1: the caller waits, and gets what an uncached compile gives now on a mismatch.
object_code program::verify_hit(code_type target, std::span<const std::string> name_expressions,
                                program_cache& cache, object_code cached,
                                detail::nvrtc_services* services) {
  detail::trace_span span("verify", "verify");
  const std::string saved_log = log_;
  const auto saved_pch = pch_status_;
  const auto saved_auto = auto_pch_;
  replayed_compile replayed = replay_hit(target, name_expressions, cached);
  const auto stats = cache.statistics();
  if (replayed.matches()) {
    verify_ = verify_outcome::verified;
    span.arg("outcome", "verified");
    log_ = saved_log;
    pch_status_ = saved_pch;
    auto_pch_ = saved_auto;
    if (stats) stats->record_verify(false);
    return cached;
  }
  // A stale hit caught: the entry goes (from every tier), the event is counted and reported, and
  // the caller gets what an uncached compile gives now (compiled once more: the replay's clock
  // and pid are not this moment's).
  verify_ = verify_outcome::mismatch;
  span.arg("outcome", "mismatch");
  bool erased = false;
  try {
    erased = cache.erase(*cache_key_);
  } catch (const std::exception& e) {
    cucore::log(log_level::warning, std::string("verify: could not remove the entry: ") + e.what());
  }
  const std::string description = cache.description();
  const mismatch_context context{*cache_key_, options_.name, target, description,
                                 erased ? "entry removed" : "entry not found to remove"};
  verify_report_ = record_mismatch(
      context, stats,
      mismatch_report(context, cached, replayed.fresh, replayed.failed, replayed.differs),
      "removed; the fresh result is returned");
  return compile_uncached(target, name_expressions, services);
}

// Below rate 1: the hit is returned now; a copy of this program is compiled and judged on the
// background thread. What it needs of the cache outlives the caller's: the statistics (shared),
// and the cache itself only through a weak reference (else the removal waits for this process's
// next compile through it).
void program::queue_hit_check(code_type target, std::span<const std::string> name_expressions,
                              program_cache& cache, const object_code& cached,
                              const program_cache_key_inputs* key_inputs) {
  struct check {
    program replica;
    code_type target;
    std::vector<std::string> names;
    program_cache_key key;
    object_code cached;
    std::optional<program_cache_key_inputs> inputs;
    const compiler_probes* probes;
    std::weak_ptr<program_cache> owner;
    const void* cache_id;
    std::shared_ptr<cache_statistics> stats;
    std::string description;
  };
  auto c = std::make_shared<check>(check{
      program(code_, type_, options_), target,
      std::vector<std::string>(name_expressions.begin(), name_expressions.end()), *cache_key_,
      cached, key_inputs ? std::optional(*key_inputs) : std::nullopt, &compiler_probes_for(cache),
      cache.weak_from_this(), &cache, cache.statistics(), cache.description()});
  if (c->inputs) c->inputs->code = c->replica.code_;  // a view: of the copy the check owns
  const bool queued = detail::queue_verification([c] {
    detail::trace_span span("verify", "verify");
    span.arg("program", c->replica.options_.name);
    replayed_compile replayed = c->replica.replay_hit(c->target, c->names, c->cached);
    // The check judges the inputs the key was made from: a header edited since the hit (a new
    // stat identity, so a new key) is not the entry's fault. A key the caller derived cannot be
    // made again here and is judged as it stands.
    if (c->inputs) {
      std::string changed;
      try {
        const program_cache_key now = make_program_cache_key(*c->inputs, *c->probes);
        if (now.hex() != c->key.hex()) changed = "its key is now " + now.hex().substr(0, 16);
      } catch (const std::exception& e) {
        changed = std::string("its key cannot be made now: ") + e.what();
      }
      if (!changed.empty()) {
        span.arg("outcome", "inputs changed");
        cucore::log(log_level::debug, "verify: \"" + c->replica.options_.name +
                                          "\" not judged: its inputs changed since the hit (" +
                                          changed + ")");
        return;
      }
    }
    if (replayed.matches()) {
      span.arg("outcome", "verified");
      if (c->stats) c->stats->record_verify(false);
      return;
    }
    span.arg("outcome", "mismatch");
    const char* removal = "entry removed";
    if (const auto owner = c->owner.lock()) {
      try {
        if (!owner->erase(c->key)) removal = "entry not found to remove";
      } catch (const std::exception& e) {
        removal = "entry could not be removed";
        cucore::log(log_level::warning,
                    std::string("verify: could not remove the entry: ") + e.what());
      }
    } else {
      detail::post_stale_entry(c->cache_id, c->key);
      removal = "entry removed at this process's next compile through the cache";
    }
    const mismatch_context context{c->key, c->replica.options_.name, c->target, c->description,
                                   removal};
    record_mismatch(
        context, c->stats,
        mismatch_report(context, c->cached, replayed.fresh, replayed.failed, replayed.differs),
        "found in the background (the hit had returned the cached bytes)");
  });
  verify_ = queued ? verify_outcome::queued : verify_outcome::not_verified;
  if (!queued) {
    cucore::log(log_level::debug, "verify: a sampled hit of \"" + options_.name +
                                      "\" not checked: the background queue is full");
  }
}

}  // namespace cucore
