// The include tracking tests' shared pieces (include_tracking*_test.cpp): kernels that store a
// header's value, compiles through a cache checked against the compiler's own bytes, and readers
// of a key's explanation.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "lease_writer.hpp"
#include "test_support.hpp"

namespace cucore::include_tracking_testing {

namespace fs = std::filesystem;
using testing::contains;
using testing::temp_dir;
using testing::write_text;

// A header that defines VALUE: the constant the kernels store, hence visible in the PTX.
inline std::string defines_value(int value) {
  return "#pragma once\n#define VALUE " + std::to_string(value) + "\n";
}

// A kernel that stores VALUE, after `prelude` (its includes).
inline std::string kernel(const std::string& prelude) {
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

// The key the cached compile of `code` uses.
inline program_cache_key key_of(const program_cache& cache, const std::string& code,
                                const program_options& options, code_type target = code_type::ptx) {
  program_cache_key_inputs in;
  in.code = code;
  in.options = options;
  in.target = target;
  return make_program_cache_key(in, compiler_probes_for(cache));
}

// Whether any explain() payload mentions `text`.
inline bool explain_mentions(const program_cache_key& key, const std::string& text) {
  for (const auto& f : key.explain()) {
    if (contains(f.payload, text)) return true;
  }
  return false;
}

inline std::vector<key_field> header_fields(const program_cache_key& key) {
  std::vector<key_field> out;
  for (const auto& f : key.explain()) {
    if (f.label == "headers_count" || f.label == "header" || f.label == "header_absent" ||
        f.label == "header_in_memory" || f.label == "memory_header" ||
        f.label == "memory_headers_count" || f.label == "untracked_include") {
      out.push_back(f);
    }
  }
  return out;
}

// Sets a file's access and modification times to `seconds` since the epoch, contents untouched.
inline void set_times(const fs::path& file, time_t seconds) {
  struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0) << file;
}

}  // namespace cucore::include_tracking_testing
