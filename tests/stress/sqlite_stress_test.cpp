// Many processes on one SQLite cache file, and writers killed at random points. Real processes
// (fork), a real file, the shared workload of tests/unit/cache_workload.hpp (values derived from
// keys, verified on every read). Counts scale with CUCORE_STRESS_SCALE (default 1.0; CI 0.1).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cache_workload.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"

namespace cucore::testing {

// A fresh directory, removed with everything in it at scope exit.
class sqlite_temp_dir {
 public:
  sqlite_temp_dir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "cucore-sqlite-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  sqlite_temp_dir(const sqlite_temp_dir&) = delete;
  sqlite_temp_dir& operator=(const sqlite_temp_dir&) = delete;
  ~sqlite_temp_dir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A plain SQLite connection, as another program would have.
class raw_db {
 public:
  explicit raw_db(const std::filesystem::path& file, int busy_timeout_ms = 5000) {
    if (sqlite3_open_v2(file.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      throw std::runtime_error("raw_db: cannot open " + file.string());
    }
    sqlite3_busy_timeout(db_, busy_timeout_ms);
  }
  raw_db(const raw_db&) = delete;
  raw_db& operator=(const raw_db&) = delete;
  ~raw_db() { sqlite3_close_v2(db_); }
  sqlite3* get() const { return db_; }

  // SQLITE_OK or the error.
  int try_exec(const std::string& sql) {
    return sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  }
  void exec(const std::string& sql) {
    if (try_exec(sql) != SQLITE_OK) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errmsg(db_));
    }
  }
  // The first column of the first row, as text ("" when there is none).
  std::string text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errmsg(db_));
    }
    std::string out;
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_text(s, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      throw std::runtime_error("raw_db: " + sql + ": " + sqlite3_errstr(rc));
    }
    return out;
  }
  long long integer(const std::string& sql) { return std::stoll(text(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

// Collects what cucore logs while alive.
class log_capture {
 public:
  log_capture() {
    previous_ = set_log_handler([this](log_level level, std::string_view message) {
      std::lock_guard lock(mutex_);
      messages_.emplace_back(level, std::string(message));
    });
  }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;
  ~log_capture() { set_log_handler(std::move(previous_)); }

  std::size_t count(log_level level, std::string_view needle = {}) const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& [l, m] : messages_) {
      if (l == level && m.find(needle) != std::string::npos) ++n;
    }
    return n;
  }
  std::size_t warnings(std::string_view needle = {}) const {
    return count(log_level::warning, needle);
  }
  std::string all() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [l, m] : messages_) out += m + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<log_level, std::string>> messages_;
  log_handler previous_;
};

// Files in `dir` named <file>.corrupt-* (the databases moved aside, not their journals).
inline std::vector<std::filesystem::path> moved_aside(const std::filesystem::path& file) {
  std::vector<std::filesystem::path> out;
  const std::string prefix = file.filename().string() + ".corrupt-";
  for (const auto& e : std::filesystem::directory_iterator(file.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (name.ends_with("-wal") || name.ends_with("-shm") || name.ends_with("-journal")) continue;
    out.push_back(e.path());
  }
  return out;
}

inline bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// A forked child that runs `body` and sends back what it returns (its report; by convention
// empty for success). The child never returns into the test framework.
class child_process {
 public:
  explicit child_process(const std::function<std::string()>& body) {
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::close(fds[0]);
      std::string report;
      int code = 0;
      try {
        report = body();
      } catch (const std::exception& e) {
        report = std::string("child threw: ") + e.what();
        code = 3;
      } catch (...) {
        report = "child threw";
        code = 3;
      }
      write_all(fds[1], report.data(), report.size());
      ::close(fds[1]);
      ::_exit(code);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  pid_t pid() const { return pid_; }

  // Waits for the child; its report (or a description of how it died).
  std::string wait() {
    std::string report = fd_ >= 0 ? read_all(fd_) : std::string();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (WIFSIGNALED(status))
      report += " [killed by signal " + std::to_string(WTERMSIG(status)) + "]";
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && report.empty()) {
      report = "child exited with " + std::to_string(WEXITSTATUS(status));
    }
    return report;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

inline double stress_scale() {
  const char* s = std::getenv("CUCORE_STRESS_SCALE");
  if (s == nullptr || *s == '\0') return 1.0;
  try {
    const double v = std::stod(s);
    return v > 0 ? v : 1.0;
  } catch (...) {
    return 1.0;
  }
}

// `base` scaled by CUCORE_STRESS_SCALE, but never below `minimum`.
inline std::uint64_t scaled(std::uint64_t base, std::uint64_t minimum) {
  const auto v = static_cast<std::uint64_t>(static_cast<double>(base) * stress_scale());
  return v < minimum ? minimum : v;
}

}  // namespace cucore::testing

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// Forwards to a cache and checks the total against the cap after every put. A pass-through, not
// a fake: every call reaches the real SQLite cache.
class cap_checking_cache final : public program_cache {
 public:
  cap_checking_cache(program_cache& inner, std::optional<std::uint64_t> cap)
      : inner_(inner), cap_(cap) {}
  std::optional<object_code> get(cache_key_ref key) override { return inner_.get(key); }
  void put(cache_key_ref key, const object_code& code) override {
    inner_.put(key, code);
    if (cap_ && inner_.size_bytes() > *cap_) ++violations;
  }
  bool erase(cache_key_ref key) override { return inner_.erase(key); }
  std::size_t size() override { return inner_.size(); }
  std::uint64_t size_bytes() override { return inner_.size_bytes(); }
  void clear() override { inner_.clear(); }
  cache_stats stats() const override { return inner_.stats(); }
  std::vector<cache_entry_info> list() override { return inner_.list(); }
  cache_verify_report verify(bool remove_bad) override { return inner_.verify(remove_bad); }
  std::size_t trim(std::uint64_t max) override { return inner_.trim(max); }
  std::string description() const override { return inner_.description(); }

  std::uint64_t violations = 0;

 private:
  program_cache& inner_;
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
  testing::sqlite_temp_dir dir;
  const fs::path file = dir.path() / "cache.db";
  constexpr int kProcesses = 8;
  constexpr std::uint32_t kKeys = 64;
  const auto start = steady::now();
  std::vector<std::unique_ptr<testing::child_process>> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(std::make_unique<testing::child_process>([&, p]() -> std::string {
      testing::log_capture logs;
      // strict: any write that fails is an exception, which the workload counts as an error.
      sqlite_program_cache cache(file, {.max_size_bytes = cap,
                                        .on_write_failure = write_failure_policy::strict,
                                        .journal = journal});
      cap_checking_cache checked(cache, cap);
      const auto r = testing::run_workload(checked, 1000 + p, kKeys, operations);
      const auto s = cache.stats();
      if (logs.warnings() > 0)
        return "warnings in process " + std::to_string(p) + ":\n" + logs.all();
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
    }));
  }
  report total;
  for (auto& c : children) {
    std::string failure;
    const auto r = parse_report(c->wait(), failure);
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
  testing::sqlite_temp_dir dir;
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
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(stop[1]);
      set_log_handler({});
      try {
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
      } catch (...) {
      }
      ::_exit(1);
    }
    // Mostly inside the write loop; one in five within the first 2 ms (opening, creating).
    // Rollback-journal commits fsync several times: those writers get longer lives.
    const std::uint64_t span_us = journal == sqlite_journal::rollback ? 60000 : 23000;
    const auto delay = (rng() % 5 == 0) ? std::chrono::microseconds(rng() % 2000)
                                        : std::chrono::microseconds(2000 + rng() % span_us);
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
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

}  // namespace
}  // namespace cucore
