// How late a single-flight waiter notices its holder's entry (issue 21): polling (notify off:
// every 2 ms, then doubling up to 20 ms) against the caches' watches (inotify on the directory and
// SQLite caches, Redis pub/sub). A holder thread claims the key; a waiter, with a cache object of
// its own, misses it and waits in get_or_compile; after a random 5-40 ms (so that the release
// falls anywhere in the waiter's polling) the holder stores the entry and releases the claim.
// The latency is from just before the store to get_or_compile's return in the waiter (the store
// itself included, the same in both modes). The median, 90th percentile and worst of R runs per
// configuration; a redis-server is started on a free loopback port (skipped without one).
//
//   claim_wake_bench [--runs R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/sqlite.hpp"
#include "redis_test_support.hpp"
#include "test_support.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using cucore::testing::redis_server;
using cucore::testing::temp_dir;

cucore::object_code sample() {
  return cucore::object_code(cucore::code_type::cubin, std::vector<std::byte>(4096, std::byte{7}),
                             "sample");
}

// One wake-up: microseconds from the holder's store to the waiter's return.
double one_run(cucore::program_cache& holder, cucore::program_cache& waiter, const std::string& key,
               std::mt19937& rng) {
  cucore::claim_result claim = holder.try_claim(key, 30s);
  if (claim.status != cucore::claim_status::owned) {
    std::fprintf(stderr, "the holder could not claim %s\n", key.c_str());
    std::exit(1);
  }
  std::atomic<clock_type::time_point> stored{};
  std::thread release([&, delay = std::uniform_int_distribution<int>(5, 40)(rng)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    stored.store(clock_type::now());
    holder.put(key, sample());
    claim.claim.reset();
  });
  const cucore::flight_result r = cucore::get_or_compile(
      waiter, key,
      [] {
        std::fprintf(stderr, "the waiter compiled: the run is void\n");
        std::exit(1);
        return sample();
      },
      [](const cucore::object_code&) {});
  const auto returned = clock_type::now();
  release.join();
  if (r.outcome != cucore::flight_outcome::waited) {
    std::fprintf(stderr, "unexpected outcome %s\n", std::string(to_string(r.outcome)).c_str());
    std::exit(1);
  }
  return std::chrono::duration<double, std::micro>(returned - stored.load()).count();
}

void report(const char* name, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<std::size_t>(q * (us.size() - 1))]; };
  std::printf("%-22s %10.0f %10.0f %10.0f\n", name, at(0.5), at(0.9), us.back());
}

void measure(const char* name, int runs,
             const std::function<std::unique_ptr<cucore::program_cache>()>& open, bool notify) {
  std::unique_ptr<cucore::program_cache> holder = open();
  std::unique_ptr<cucore::program_cache> waiter = open();
  cucore::single_flight_options o;
  o.notify = notify;
  waiter->set_single_flight(o);
  std::mt19937 rng(42);
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    us.push_back(one_run(*holder, *waiter, std::string(name) + "-" + std::to_string(i), rng));
  }
  report(name, us);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: claim_wake_bench [--runs R]\n");
      return 2;
    }
  }
  std::printf("wake-up latency, store to waiter's return, %d runs (microseconds)\n", runs);
  std::printf("%-22s %10s %10s %10s\n", "configuration", "median", "p90", "max");
  temp_dir dir;
  auto directory = [&]() -> std::unique_ptr<cucore::program_cache> {
    cucore::file_stream_cache_options o;
    o.fsync = false;
    return std::make_unique<cucore::file_stream_program_cache>(dir / "directory", o);
  };
  auto sqlite = [&]() -> std::unique_ptr<cucore::program_cache> {
    return std::make_unique<cucore::sqlite_program_cache>(dir / "c.db");
  };
  measure("directory-poll", runs, directory, false);
  measure("directory-notify", runs, directory, true);
  measure("sqlite-poll", runs, sqlite, false);
  measure("sqlite-notify", runs, sqlite, true);
  redis_server server;
  if (!server.running()) {
    std::printf("(no redis-server: Redis skipped)\n");
    return 0;
  }
  auto redis = [&]() -> std::unique_ptr<cucore::program_cache> {
    cucore::redis_cache_options o;
    o.url = server.url("/0");
    return std::make_unique<cucore::redis_program_cache>(o);
  };
  measure("redis-poll", runs, redis, false);
  measure("redis-notify", runs, redis, true);
  return 0;
}
