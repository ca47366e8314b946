// Header-tracked programs for the caches' stress tests: processes compile one program that includes
// a header through one cache, each iteration picking a variant of the header (a directory of its
// own holding that variant's h.cuh, rewritten atomically each time, the program named there, as
// the CLI names it). Every result, hit or miss, must be the uncached compile of its variant.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "cucore/cache/program_cache.hpp"
#include "cucore/program.hpp"
#include "test_support.hpp"

namespace cucore::testing {

class header_variants {
 public:
  static constexpr int kCount = 4;
  // The header generations, one phase of processes each: the headers change between phases (no
  // process running), and the first generation comes back last, so that a hit keyed without the
  // header would return another generation's bytes.
  static constexpr int kGenerations[] = {0, 1, 0};

  // The variants' directories under `root`; `value_base` keeps one test's values apart from
  // another's.
  header_variants(std::filesystem::path root, int value_base)
      : root_(std::move(root)), value_base_(value_base) {
    for (int v = 0; v < kCount; ++v) std::filesystem::create_directory(dir(v));
  }

  // Every variant's header of `generation` (between phases).
  void write_all(int generation) const {
    for (int v = 0; v < kCount; ++v) write(v, generation);
  }

  // One compile of variant `v` through `cache`, its header first written again (the same contents
  // in a new file: identities change, contents do not). Whether it gave the uncached compile of
  // its variant (kept in `uncached`, this process's, by variant) and the cache's outcome.
  struct compiled {
    cache_outcome outcome;
    bool right;
  };
  compiled compile(int v, int generation, program_cache& cache,
                   std::map<int, object_code>& uncached) const {
    write(v, generation);
    const program_options o = options(v);
    program p(kKernel, source_type::cxx, o);
    const object_code got = p.compile(code_type::ptx, {}, &cache);
    auto it = uncached.find(v);
    if (it == uncached.end()) {
      it = uncached.emplace(v, program(kKernel, source_type::cxx, o).compile(code_type::ptx)).first;
    }
    return {p.last_cache_outcome(), got == it->second && stores(got, v, generation)};
  }

  // Afterwards, in the test's process: every variant is a hit with its uncached bytes (a variant
  // no child picked misses once).
  void expect_every_variant_hits(int generation, program_cache& cache) const {
    for (int v = 0; v < kCount; ++v) {
      SCOPED_TRACE("variant " + std::to_string(v));
      const program_options o = options(v);
      const object_code expected = program(kKernel, source_type::cxx, o).compile(code_type::ptx);
      EXPECT_TRUE(stores(expected, v, generation));
      program first(kKernel, source_type::cxx, o);
      EXPECT_TRUE(first.compile(code_type::ptx, {}, &cache) == expected);
      program second(kKernel, source_type::cxx, o);
      EXPECT_TRUE(second.compile(code_type::ptx, {}, &cache) == expected);
      EXPECT_EQ(second.last_cache_outcome(), cache_outcome::hit);
    }
  }

 private:
  static constexpr const char* kKernel = R"(#include "h.cuh"
#include <cuda/std/cstdint>
extern "C" __global__ void k(cuda::std::int32_t* out) { out[0] = VALUE; }
)";

  // The value variant `variant`'s header defines in generation `generation` of the test.
  int value(int variant, int generation) const { return value_base_ + 100 * generation + variant; }
  std::filesystem::path dir(int variant) const {
    return root_ / ("variant" + std::to_string(variant));
  }
  program_options options(int variant) const {
    program_options o;
    o.arch = kArch;
    o.name = (dir(variant) / "k.cu").string();
    return o;
  }
  // Replaces the header as editors and build tools do: a temp file renamed over it (readers see
  // the old or the new file, never a partial one).
  void write(int variant, int generation) const {
    const std::filesystem::path file = dir(variant) / "h.cuh";
    const std::filesystem::path temp =
        file.parent_path() / (".h.cuh." + std::to_string(::getpid()) + ".tmp");
    write_text(temp,
               "#pragma once\n#define VALUE " + std::to_string(value(variant, generation)) + "\n");
    std::filesystem::rename(temp, file);
  }
  bool stores(const object_code& ptx, int variant, int generation) const {
    return ptx.text().find(", " + std::to_string(value(variant, generation)) + ";") !=
           std::string_view::npos;
  }

  std::filesystem::path root_;
  int value_base_;
};

}  // namespace cucore::testing
