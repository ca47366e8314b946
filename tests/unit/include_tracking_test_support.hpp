// What the include tracking tests (include_tracking*_test.cpp) share: real NVRTC compiles of real
// files in fresh temp directories, through real caches.
//
// The oracle, after every edit of the files: the compile through the cache returns exactly the
// bytes a compile without the cache returns at that moment, and hits or misses as the scenario
// expects. Every header edit changes a constant that ends up in the PTX, so a stale hit would show.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "test_support.hpp"

namespace cucore::testing {

namespace fs = std::filesystem;

// A header that defines VALUE: the constant the kernels store, hence visible in the PTX.
inline std::string defines_value(int value) {
  return "#pragma once\n#define VALUE " + std::to_string(value) + "\n";
}

// A kernel that stores VALUE, after `prelude` (its includes).
inline std::string value_kernel(const std::string& prelude) {
  return prelude + "\nextern \"C\" __global__ void k(int* out) { out[0] = VALUE; }\n";
}

// The PTX stores `value` (as an immediate: "mov.u32 %r1, 1234;").
inline bool stores(const object_code& ptx, int value) {
  return contains(ptx.text(), ", " + std::to_string(value) + ";");
}

// Options as the CLI sets them: the program is named by its file's path.
inline program_options named(const fs::path& file) {
  program_options o;
  o.arch = testing::kArch;
  o.name = file.string();
  return o;
}

inline std::string outcome(const program& p) {
  return std::string(to_string(p.last_cache_outcome()));
}

// THE ORACLE. Compiles `code` under `options` through `cache` and without it, now: the two give
// the same bytes, and the cached compile had the `expected` outcome. The cached result.
inline object_code expect_compile(program_cache& cache, const std::string& code,
                                  const program_options& options, cache_outcome expected,
                                  code_type target = code_type::ptx) {
  program cached(code, source_type::cxx, options);
  object_code got = cached.compile(target, {}, &cache);
  EXPECT_EQ(outcome(cached), std::string(to_string(expected)));
  program uncached(code, source_type::cxx, options);
  const object_code reference = uncached.compile(target);
  if (target == code_type::ptx) {
    EXPECT_EQ(got.text(), reference.text()) << "the cached compile differs from an uncached one";
  }
  EXPECT_TRUE(got == reference) << "the cached compile differs from an uncached one";
  return got;
}

// The oracle for a compile that must miss and store `value`: its result.
inline object_code expect_miss_storing(program_cache& cache, const std::string& code,
                                       const program_options& options, int value) {
  object_code got = expect_compile(cache, code, options, cache_outcome::miss);
  EXPECT_TRUE(stores(got, value)) << got.text();
  return got;
}

// The same, then a hit: the miss's result.
inline object_code expect_miss_then_hit(program_cache& cache, const std::string& code,
                                        const program_options& options, int value) {
  object_code got = expect_miss_storing(cache, code, options, value);
  expect_compile(cache, code, options, cache_outcome::hit);
  return got;
}

// The key inputs of the PTX compile of `code` under `options`.
inline program_cache_key_inputs inputs_of(const std::string& code, const program_options& options,
                                          code_type target = code_type::ptx) {
  program_cache_key_inputs in;
  in.code = code;
  in.options = options;
  in.target = target;
  return in;
}

// The key the cached compile of `code` uses.
inline program_cache_key key_of(const program_cache& cache, const std::string& code,
                                const program_options& options, code_type target = code_type::ptx) {
  return make_program_cache_key(inputs_of(code, options, target), compiler_probes_for(cache));
}

// Deriving the key of `in` demands an extra_digest, naming each of `parts` (`keyed`: the failure
// when a key is made).
inline void expect_digest_demanded(const program_cache_key_inputs& in, std::string_view keyed,
                                   std::initializer_list<std::string_view> parts) {
  try {
    (void)make_program_cache_key(in);
    ADD_FAILURE() << keyed;
  } catch (const extra_digest_required& e) {
    for (auto part : parts) EXPECT_TRUE(contains(e.what(), part)) << e.what();
  }
}

// Sets a file's access and modification times to `seconds` since the epoch, contents untouched.
inline void set_times(const fs::path& file, time_t seconds) {
  struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0) << file;
}

}  // namespace cucore::testing
