// The differential oracle: what NVRTC really touches (strace of an uncached compile in a separate
// process, oracle_compile) against what the cache key tracks (make_program_cache_key's explain()).
//
//   every file NVRTC opened and read   is a tracked header;
//   every path NVRTC probed and found absent   is a tracked absent candidate.
//
// Paths are compared as NVRTC and the key spell them, made absolute against the compile's
// working directory, with "//" and "/./" collapsed ("..", which the kernel resolves through
// symlinks, is kept). Only paths under the case's roots count (its include directories, the
// toolkit's, the program's directory, the working directory, and any extra root): the tracer
// also sees the loader, locale files and cucore's own library search. Left out, as measured
// harmless (docs/cache-keys.md): stat()s of __nv_nvrtc_builtin_header.h and __nv_name_map, of
// the program's name, and of in-memory header names, none of which NVRTC ever opens.
#pragma once

#include <cstddef>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "oracle_case.hpp"

namespace cucore::oracle {

struct file_accesses {
  std::set<std::string> read;    // regular files opened
  std::set<std::string> absent;  // paths probed (open, stat, access, ...) and not there
  // What cucore's observation of the same compile saw (src/observe/): opened, and not found.
  std::set<std::string> observed_read;
  std::set<std::string> observed_absent;
  int exit_status = -1;  // oracle_compile's: 0 compiled, 1 compile error
  std::string errors;    // its standard error
};

// Runs oracle_compile on `c` under strace; `scratch` holds the case file and the trace.
// `output`, when not empty, receives the compiled bytes.
file_accesses trace_compile(const oracle_case& c, const std::filesystem::path& scratch,
                            const std::filesystem::path& output = {});

struct tracked_paths {
  std::set<std::string> files;
  std::set<std::string> absent;
  std::size_t skipped = 0;  // references in groups never entered
};

// What the key of `c` tracks (derived in this process, in c.cwd).
tracked_paths tracked_by_key(const oracle_case& c);

struct oracle_report {
  std::vector<std::string> untracked_reads;   // read by NVRTC, not a tracked file
  std::vector<std::string> untracked_absent;  // probed absent by NVRTC, not a tracked absence
  std::size_t read = 0;                       // files NVRTC read (in the roots)
  std::size_t probed_absent = 0;              // absent paths NVRTC probed (in the roots)
  std::size_t tracked_files = 0;
  std::size_t tracked_absent = 0;
  double ratio = 0;  // tracked files / files read
  // Accesses the tracer saw that the compile's observation (the store gate's input) did not.
  std::vector<std::string> unobserved;
  bool holds() const {
    return untracked_reads.empty() && untracked_absent.empty() && unobserved.empty();
  }
  std::string describe() const;  // for a failure message
};

// Compares the two for the paths under `roots` (the case's own roots are added).
oracle_report compare(const oracle_case& c, const file_accesses& seen, const tracked_paths& tracked,
                      std::vector<std::string> roots = {});

// Whether the NVRTC under test (the one oracle_compile loads: the process's search, so
// CUCORE_TEST_NVRTC's root in a matrix run) accepts __has_include_next in #if: measured once per
// process by a traced compile of a probe (NVRTC 12.9 and 13.0 do; 13.5 dropped it: "function call
// is not allowed in a constant expression"). The cases that use it follow what this says, so the
// expectations of each version are derived from that version, not written per version.
bool nvrtc_has_include_next();

// Absolute, with "//" and "/./" collapsed, against `cwd` for a relative path.
std::string normalized(const std::string& path, const std::filesystem::path& cwd);

// Runs `argv` in `cwd` (empty: here) with its standard output and error captured; returns the
// exit status (or 128 + signal) and appends the output to `out`.
int run_process(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                std::string& out);

}  // namespace cucore::oracle
