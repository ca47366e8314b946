// Many processes on one SQLite cache file, and writers killed at random points. Real processes
// (fork), a real file, the shared workload of tests/unit/cache_workload.hpp (values derived from
// keys, verified on every read). Counts scale with CUCORE_STRESS_SCALE (default 1.0; CI 0.1).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "cache_workload.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "header_variants.hpp"
#include "process_support.hpp"
#include "sqlite_test_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Forwards to a cache and checks the total against the cap after every put. A pass-through, not
// a fake: every call reaches the real SQLite cache.
class cap_checking_cache final : public testing::forwarding_cache {
 public:
  cap_checking_cache(program_cache& inner, std::optional<std::uint64_t> cap)
      : forwarding_cache(inner), cap_(cap) {}
  void put(cache_key_ref key, const object_code& code) override {
    forwarding_cache::put(key, code);
    if (cap_ && size_bytes() > *cap_) ++violations;
  }

  std::uint64_t violations = 0;

 private:
  std::optional<std::uint64_t> cap_;
};

// "name=value ..." reports from children.
using report = std::map<std::string, std::uint64_t>;

std::string format_report(const report& r) {
  std::string out = "OK";
  for (const auto& [k, v] : r) out += " " + k + "=" + std::to_string(v);
  return out;
}

// Parses a child's report; a report that does not start with OK is a failure message.
report parse_report(const std::string& text, std::string& failure) {
  report r;
  std::istringstream in(text);
  std::string word;
  in >> word;
  if (word != "OK") {
    failure = text;
    return r;
  }
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) {
      failure = text;
      return r;
    }
    r[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
  }
  return r;
}

// Everything the file must satisfy after any amount of concurrency or killing.
void expect_sound(const fs::path& file, std::optional<std::uint64_t> cap) {
  {
    testing::raw_db raw(file);
    EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
    EXPECT_EQ(raw.text("SELECT (SELECT total_bytes FROM meta) = (SELECT coalesce(sum(size), 0) "
                       "FROM entries) AND (SELECT entry_count FROM meta) = (SELECT count(*) FROM "
                       "entries) AND (SELECT count(*) FROM blobs) = (SELECT count(*) FROM entries) "
                       "AND (SELECT count(*) FROM meta) = 1"),
              "1")
        << "the running total or the blob table drifted";
    EXPECT_EQ(raw.text("SELECT count(*) FROM entries AS e LEFT JOIN blobs AS b ON b.id = e.id "
                       "WHERE b.id IS NULL OR length(b.value) != e.size"),
              "0");
  }
  testing::log_capture logs;
  sqlite_program_cache cache(file, {.max_size_bytes = cap});
  const auto report = cache.verify(false);
  EXPECT_EQ(report.corrupt, 0u);
  EXPECT_EQ(report.ok, report.entries);
  if (cap) {
    EXPECT_LE(cache.size_bytes(), *cap);
  }
  EXPECT_EQ(logs.warnings(), 0u) << logs.all();
  EXPECT_TRUE(testing::moved_aside(file).empty()) << "the file was moved aside";
  // Still a working cache.
  cache.put("after", testing::workload_value(9999, 1));
  auto hit = cache.get("after");
  ASSERT_TRUE(hit);
  EXPECT_TRUE(testing::is_valid_workload_value(9999, *hit));
}

void run_processes(std::optional<std::uint64_t> cap, sqlite_journal journal,
                   std::uint64_t operations) {
  testing::temp_dir dir;
  const fs::path file = dir.path() / "cache.db";
  constexpr int kProcesses = 8;
  constexpr std::uint32_t kKeys = 64;
  const auto start = steady::now();
  const auto reports = testing::run_children(kProcesses, [&](int p) -> std::string {
    testing::log_capture logs;
    // strict: any write that fails is an exception, which the workload counts as an error.
    sqlite_program_cache cache(file, {.max_size_bytes = cap,
                                      .on_write_failure = write_failure_policy::strict,
                                      .journal = journal});
    cap_checking_cache checked(cache, cap);
    const auto r = testing::run_workload(checked, 1000 + p, kKeys, operations);
    const auto s = cache.stats();
    if (logs.warnings() > 0) return "warnings in process " + std::to_string(p) + ":\n" + logs.all();
    return format_report({{"gets", r.gets},
                          {"hits", r.hits},
                          {"puts", r.puts},
                          {"erases", r.erases},
                          {"wrong", r.wrong},
                          {"errors", r.errors},
                          {"cache_errors", s.errors},
                          {"corrupt", s.corrupt_dropped},
                          {"evictions", s.evictions},
                          {"cap_violations", checked.violations},
                          {"warnings", logs.warnings()}});
  });
  report total;
  for (const auto& text : reports) {
    std::string failure;
    const auto r = parse_report(text, failure);
    EXPECT_EQ(failure, "");
    for (const auto& [k, v] : r) total[k] += v;
  }
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  std::cout << "[ stats    ] " << kProcesses << " processes x " << operations << " operations"
            << (cap ? ", cap " + std::to_string(*cap) : std::string(", no cap")) << ", "
            << (journal == sqlite_journal::rollback ? "rollback journal" : "WAL") << ": "
            << format_report(total) << " in " << seconds << " s\n";
  EXPECT_EQ(total["gets"] + total["puts"] + total["erases"], kProcesses * operations);
  EXPECT_EQ(total["wrong"], 0u);
  EXPECT_EQ(total["errors"], 0u);
  EXPECT_EQ(total["cache_errors"], 0u);
  EXPECT_EQ(total["corrupt"], 0u);
  EXPECT_EQ(total["cap_violations"], 0u);
  EXPECT_EQ(total["warnings"], 0u);
  EXPECT_GT(total["hits"], 0u);
  if (cap) {
    EXPECT_GT(total["evictions"], 0u);
  }
  expect_sound(file, cap);
  if (cap) {
    // The file stays near the cap: stored bytes plus SQLite's page overhead.
    EXPECT_LT(fs::file_size(file), *cap + *cap / 2 + (256u << 10));
  }
}

TEST(SqliteStress, EightProcessesMixedWorkload) {
  run_processes(std::nullopt, sqlite_journal::automatic, testing::scaled(4000, 400));
}

TEST(SqliteStress, EightProcessesMixedWorkloadUnderASmallCap) {
  run_processes(std::uint64_t{1} << 20, sqlite_journal::automatic, testing::scaled(4000, 400));
}

// The network-filesystem configuration, on the local disk: every commit fsyncs several times,
// so fewer operations.
TEST(SqliteStress, EightProcessesMixedWorkloadWithARollbackJournal) {
  run_processes(std::uint64_t{1} << 20, sqlite_journal::rollback, testing::scaled(1500, 200));
}

// Large values (128-400 KiB: read with incremental blob I/O, unlike the workload's), derived from
// their key and version like the workload's.
constexpr std::uint32_t kBigKeys = 8;
std::string big_key(std::uint32_t index) {
  return "big-" + std::to_string(index);
}
object_code big_value(std::uint32_t index, std::uint32_t version) {
  std::mt19937_64 rng((std::uint64_t{index} << 32) | version | (std::uint64_t{1} << 63));
  std::vector<std::byte> bytes((128u << 10) + rng() % (272u << 10));
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
  return object_code(code_type::fatbin, std::move(bytes), "big-" + std::to_string(version));
}
bool is_valid_big_value(std::uint32_t index, const object_code& code) {
  for (std::uint32_t v = 0; v < 4; ++v) {
    if (code.name() == "big-" + std::to_string(v)) return code == big_value(index, v);
  }
  return false;
}

// A writer killed (SIGKILL) at random points, over and over, while a reader checks every value
// it gets. Kills land anywhere: opening or creating the file, inside write transactions, during
// eviction, incremental vacuum and checkpoints.
void run_crashes(std::uint64_t kills, sqlite_journal journal) {
  testing::temp_dir dir;
  const fs::path file = dir.path() / "cache.db";
  const std::optional<std::uint64_t> cap = std::uint64_t{2} << 20;
  constexpr std::uint32_t kKeys = 64;
  const auto start = steady::now();

  // Something for the reader to check from the start, whatever the first kills interrupt.
  {
    testing::child_process seed([&]() -> std::string {
      sqlite_program_cache cache(file, {.max_size_bytes = cap,
                                        .on_write_failure = write_failure_policy::strict,
                                        .journal = journal});
      for (std::uint32_t i = 0; i < kBigKeys; i += 2) cache.put(big_key(i), big_value(i, 0));
      for (std::uint32_t i = 0; i < kKeys; i += 4) {
        cache.put(testing::workload_key(i), testing::workload_value(i, 0));
      }
      return "";
    });
    ASSERT_EQ(seed.wait(), "");
  }
  int stop[2];
  ASSERT_EQ(::pipe(stop), 0);
  testing::child_process reader([&]() -> std::string {
    ::close(stop[1]);
    ::fcntl(stop[0], F_SETFL, O_NONBLOCK);
    testing::log_capture logs;
    sqlite_program_cache cache(file, {.max_size_bytes = cap, .journal = journal});
    std::mt19937_64 rng(7);
    report r;
    for (std::uint64_t i = 0;; ++i) {
      if (i % 16 == 0) {
        char c;
        if (::read(stop[0], &c, 1) == 0) break;  // the parent closed it: done
      }
      if (i % 8 == 7) {
        const auto index = static_cast<std::uint32_t>(rng() % kBigKeys);
        ++r["big_gets"];
        if (auto hit = cache.get(big_key(index))) {
          ++r["big_hits"];
          if (!is_valid_big_value(index, *hit)) ++r["wrong"];
        }
        continue;
      }
      const auto index = static_cast<std::uint32_t>(rng() % kKeys);
      ++r["gets"];
      if (auto hit = cache.get(testing::workload_key(index))) {
        ++r["hits"];
        if (!testing::is_valid_workload_value(index, *hit)) ++r["wrong"];
      }
    }
    const auto s = cache.stats();
    r["cache_errors"] = s.errors;
    r["corrupt"] = s.corrupt_dropped;
    r["warnings"] = logs.warnings();
    if (logs.warnings() > 0) return "reader warnings:\n" + logs.all();
    return format_report(r);
  });
  ::close(stop[0]);

  std::mt19937_64 rng(12345);
  std::uint64_t killed = 0;
  std::uint64_t exited = 0;
  for (std::uint64_t k = 0; k < kills; ++k) {
    const std::uint64_t seed = rng();
    const pid_t pid = testing::fork_until_killed([&] {
      ::close(stop[1]);
      set_log_handler({});
      sqlite_program_cache cache(file, {.max_size_bytes = cap, .journal = journal});
      std::mt19937_64 wrng(seed);
      for (;;) {
        const auto index = static_cast<std::uint32_t>(wrng() % kKeys);
        const auto dice = wrng() % 10;
        if (wrng() % 10 == 0) {
          const auto big = static_cast<std::uint32_t>(wrng() % kBigKeys);
          cache.put(big_key(big), big_value(big, static_cast<std::uint32_t>(wrng() % 4)));
        } else if (dice < 7) {
          cache.put(testing::workload_key(index),
                    testing::workload_value(index, static_cast<std::uint32_t>(wrng() % 4)));
        } else if (dice < 9) {
          cache.erase(testing::workload_key(index));
        } else {
          cache.get(testing::workload_key(index));
        }
      }
    });
    ASSERT_GE(pid, 0);
    // Mostly inside the write loop; one in five within the first 2 ms (opening, creating).
    // Rollback-journal commits fsync several times: those writers get longer lives.
    const std::uint64_t span_us = journal == sqlite_journal::rollback ? 60000 : 23000;
    const auto delay = (rng() % 5 == 0) ? std::chrono::microseconds(rng() % 2000)
                                        : std::chrono::microseconds(2000 + rng() % span_us);
    if (testing::kill_after(pid, delay)) {
      ++killed;
    } else {
      ++exited;
    }
  }
  ::close(stop[1]);
  std::string failure;
  auto r = parse_report(reader.wait(), failure);
  EXPECT_EQ(failure, "");
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  std::cout << "[ stats    ] " << killed << " writers killed ("
            << (journal == sqlite_journal::rollback ? "rollback journal" : "WAL") << "), reader "
            << format_report(r) << " in " << seconds << " s\n";
  EXPECT_EQ(killed, kills) << exited << " writers exited on their own";
  EXPECT_EQ(r["wrong"], 0u);
  EXPECT_EQ(r["cache_errors"], 0u);
  EXPECT_EQ(r["corrupt"], 0u);
  EXPECT_GT(r["hits"], 0u);
  EXPECT_GT(r["big_hits"], 0u);
  expect_sound(file, cap);
}

TEST(SqliteStress, WriterKilledAtRandomPoints) {
  run_crashes(testing::scaled(300, 60), sqlite_journal::automatic);
}

TEST(SqliteStress, WriterKilledAtRandomPointsWithARollbackJournal) {
  run_crashes(testing::scaled(150, 30), sqlite_journal::rollback);
}

// ---------------------------------------------------------------------------------------------
// Header-tracked entries through one SQLite cache (testing::header_variants).

TEST(SqliteStress, ProcessesCompileHeaderTrackedPrograms) {
  testing::temp_dir src;
  testing::temp_dir dir;
  const testing::header_variants variants(src.path(), 92000);
  const fs::path file = dir.path() / "cache.db";
  constexpr int kProcesses = 6;
  const std::uint64_t iterations = testing::scaled(15, 2);  // per process and phase
  const auto start = steady::now();
  report total;
  for (const int generation : testing::header_variants::kGenerations) {
    SCOPED_TRACE("generation " + std::to_string(generation));
    variants.write_all(generation);
    const auto reports = testing::run_children(kProcesses, [&](int p) -> std::string {
      testing::log_capture logs;
      sqlite_program_cache cache(file, {.on_write_failure = write_failure_policy::strict});
      std::mt19937_64 rng(8000 + 100 * static_cast<std::uint64_t>(generation) +
                          static_cast<std::uint64_t>(p));
      std::map<int, object_code> uncached;  // each variant's uncached compile, in this process
      std::uint64_t hits = 0;
      std::uint64_t misses = 0;
      std::uint64_t wrong = 0;
      for (std::uint64_t n = 0; n < iterations; ++n) {
        const int v = static_cast<int>(rng() % testing::header_variants::kCount);
        const auto got = variants.compile(v, generation, cache, uncached);
        hits += got.outcome == cache_outcome::hit;
        misses += got.outcome == cache_outcome::miss;
        if (!got.right) ++wrong;
      }
      const auto s = cache.stats();
      // The processes replace headers the others compile against: a result compiled while its
      // header was replaced is returned, not stored (program_cache_key::check_store), with a
      // warning. Any other warning fails.
      const std::size_t refusals = logs.warnings("not storing the compiled program");
      if (logs.warnings() > refusals) {
        return "warnings in process " + std::to_string(p) + ":\n" + logs.all();
      }
      return format_report({{"hits", hits},
                            {"misses", misses},
                            {"wrong", wrong},
                            {"cache_errors", s.errors},
                            {"corrupt", s.corrupt_dropped}});
    });
    for (const auto& text : reports) {
      std::string failure;
      const auto r = parse_report(text, failure);
      EXPECT_EQ(failure, "");
      for (const auto& [k, v] : r) total[k] += v;
    }

    testing::log_capture logs;
    sqlite_program_cache cache(file);
    variants.expect_every_variant_hits(generation, cache);
    EXPECT_EQ(logs.warnings(), 0u) << logs.all();
  }
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  std::cout << "[ stats    ] " << kProcesses << " processes x "
            << std::size(testing::header_variants::kGenerations) << " phases x " << iterations
            << " header-tracked compiles: " << format_report(total) << " in " << seconds << " s\n";
  EXPECT_EQ(total["hits"] + total["misses"],
            kProcesses * iterations * std::size(testing::header_variants::kGenerations));
  EXPECT_EQ(total["wrong"], 0u);
  EXPECT_EQ(total["cache_errors"], 0u);
  EXPECT_EQ(total["corrupt"], 0u);
  {
    // One entry per variant and distinct generation, however many processes raced to store it.
    sqlite_program_cache cache(file);
    EXPECT_EQ(cache.size(), static_cast<std::size_t>(testing::header_variants::kCount * 2));
  }
  expect_sound(file, std::nullopt);
}

}  // namespace
}  // namespace cucore
