// The compile server (docs/compile-server.md) with real server processes: results equal to an
// in-process compile (bytes, logs, lowered names, errors, the cache's key, images across program
// names, the client's view and observations). The fallbacks and its security are in
// compile_server_fallback_test.cpp, the wire format in compile_server_wire_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "compile_server_test_support.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/error.hpp"
#include "observe/compiler_observer.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the compile server tests' servers and fixture

TEST_F(CompileServer, SameBytesLogLoweredNamesAsInProcess) {
  server_process server(dir_, 1);
  const std::vector<std::string> names = {"reduce<128>"};
  program local(kCubKernel, source_type::cxx, options_with(compile_server_mode::off));
  const object_code expected = local.compile(code_type::ptx, names);
  // The first compile of the prefix is plain; the worker makes the prefix's image after it has
  // answered (its requests come from many processes), and the next compiles start from it.
  const std::vector<auto_pch_status> statuses = {auto_pch_status::first_seen, auto_pch_status::used,
                                                 auto_pch_status::used};
  for (std::size_t i = 0; i < statuses.size(); ++i) {
    const std::uint64_t before = server.requests();
    program served(kCubKernel, source_type::cxx, options_with(compile_server_mode::on));
    const object_code got = served.compile(code_type::ptx, names);
    EXPECT_EQ(server.requests(), before + 1) << "compile " << i << " did not reach the server";
    EXPECT_EQ(masked(got.text()), masked(expected.text())) << "compile " << i;
    EXPECT_EQ(served.log(), local.log());
    EXPECT_EQ(got.symbol_mapping(), expected.symbol_mapping());
    EXPECT_EQ(got.name(), expected.name());
    EXPECT_EQ(served.last_auto_pch(), statuses[i]) << "compile " << i;
  }
  // A cubin without PID-named symbols is byte-for-byte the in-process one.
  program local_cubin(small_kernel(7), source_type::cxx, options_with(compile_server_mode::off));
  program served_cubin(small_kernel(7), source_type::cxx, options_with(compile_server_mode::on));
  const object_code a = local_cubin.compile(code_type::cubin);
  const object_code b = served_cubin.compile(code_type::cubin);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(std::equal(a.code().begin(), a.code().end(), b.code().begin()));
}

// The worker compiles with the client's view: its working directory (a relative #include, and
// the directory NVRTC writes into line information) and the variables the compilers read
// (LLVM_OVERRIDE_PRODUCER, written into LTO-IR, and read once per process: a worker pool per set
// of values, each started with them). Each served compile equals a fresh process's compile in the
// same view, and the views' outputs differ (so a server that ignored them would fail).
TEST_F(CompileServer, TheCompileHasTheClientsDirectoryAndEnvironment) {
  server_process server(dir_, 1);
  const std::string code =
      "#include \"local.h\"\n"
      "extern \"C\" __global__ void k(int* p) { p[threadIdx.x] = LOCAL_VALUE; }\n";
  struct restore {
    fs::path here = fs::current_path();
    ~restore() {
      fs::current_path(here);
      ::unsetenv("LLVM_OVERRIDE_PRODUCER");
    }
  } restore;
  std::vector<std::string> served_outputs;
  for (const std::string which : {"a", "b"}) {
    const fs::path d = tmp_.path() / which;
    fs::create_directories(d);
    testing::write_text(d / "local.h", "#define LOCAL_VALUE " + std::to_string(which[0]) + "\n");
    testing::write_text(d / "server_test.cu", code);
    fs::current_path(d);
    const std::string producer = "cucore-test-" + which;
    ::setenv("LLVM_OVERRIDE_PRODUCER", producer.c_str(), 1);
    for (const code_type target : {code_type::ptx, code_type::ltoir}) {
      // The reference: a fresh process with the view from its start.
      const fs::path out = d / ("expected." + std::string(to_string(target)));
      const auto [status, said] =
          run_tool({"compile", "--no-server", "--cache", "none", "--arch", testing::kArch, "--std",
                    "c++17", "--lineinfo", "--target", std::string(to_string(target)), "-o",
                    out.string(), "server_test.cu"},
                   {"env", "LLVM_OVERRIDE_PRODUCER=" + producer});
      ASSERT_EQ(status, 0) << said;
      const std::string expected = testing::read_text(out);
      program_options o = options_with(compile_server_mode::on);
      o.lineinfo = true;
      const std::uint64_t before = server.requests();
      program served(code, source_type::cxx, o);
      const object_code got = served.compile(target);
      EXPECT_EQ(server.requests(), before + 1) << which;
      const std::string bytes(reinterpret_cast<const char*>(got.code().data()), got.size());
      EXPECT_EQ(bytes, expected) << which << " " << to_string(target);
      if (target == code_type::ptx) {
        EXPECT_TRUE(testing::contains(bytes, d.string())) << "line information: the directory";
      }
      served_outputs.push_back(bytes);
    }
  }
  ASSERT_EQ(served_outputs.size(), 4u);
  EXPECT_NE(served_outputs[0], served_outputs[2]) << "PTX: the directories' outputs differ";
  EXPECT_NE(served_outputs[1], served_outputs[3]) << "LTO-IR: the views' outputs differ";
  // Two sets of the compilers' variables: two worker pools (the server's own besides).
  const auto s = query_compile_server(dir_);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->workers.size(), 3u);
}

// Misses of one new prefix arriving together compile plain, none waits for an image, and one
// image is made after them (an image costs ~4x a plain compile: made on the burst's critical path
// it set the burst's time; 16 workers making one each at once took 8x a plain compile on the GPU
// machine's 16 cores).
TEST_F(CompileServer, ABurstOfOnePrefixCompilesPlainThenMakesOneImage) {
  server_process server(dir_, 2);
  constexpr int kClients = 3;
  std::vector<auto_pch_status> statuses(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      program p(std::string(kCubKernel) + small_kernel(300 + i), source_type::cxx,
                options_with(compile_server_mode::on));
      (void)p.compile(code_type::ptx);
      statuses[i] = p.last_auto_pch();
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(server.requests(), static_cast<std::uint64_t>(kClients));
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), auto_pch_status::first_seen), kClients);
  EXPECT_EQ(server.images_once_made(), 1u);
  // The next miss of the prefix starts from it.
  program next(std::string(kCubKernel) + small_kernel(310), source_type::cxx,
               options_with(compile_server_mode::on));
  (void)next.compile(code_type::ptx);
  EXPECT_EQ(next.last_auto_pch(), auto_pch_status::used);
}

// Compiles `first` as a.cu through `server` (the prefix's first sight: one image is made after
// it), then `second` as b.cu in process and through the server: the same bytes (masked), the served
// compile with `status`. `adjust` (if any) sets more of every compile's options.
void expect_after_a_first_file(const server_process& server, const std::string& first,
                               const std::string& second, auto_pch_status status,
                               const std::function<void(program_options&)>& adjust = {}) {
  const auto with = [&](compile_server_mode mode, std::string name) {
    program_options o = options_with(mode, std::move(name));
    if (adjust) adjust(o);
    return o;
  };
  program a(first, source_type::cxx, with(compile_server_mode::on, "a.cu"));
  (void)a.compile(code_type::ptx);
  EXPECT_EQ(a.last_auto_pch(), auto_pch_status::first_seen);
  EXPECT_EQ(server.images_once_made(), 1u);
  program local(second, source_type::cxx, with(compile_server_mode::off, "b.cu"));
  program served(second, source_type::cxx, with(compile_server_mode::on, "b.cu"));
  const object_code got = served.compile(code_type::ptx);
  EXPECT_EQ(served.last_auto_pch(), status);
  EXPECT_EQ(masked(got.text()), masked(local.compile(code_type::ptx).text()));
}

// Another file of the prefix (issue 40): routed to the image's worker, which uses it (the name
// cannot reach the image: docs/compile-server.md, "Images across program names").
TEST_F(CompileServer, AnotherFileOfAPrefixStartsFromTheFirstFilesImage) {
  server_process server(dir_, 2);
  expect_after_a_first_file(server, kCubKernel, std::string(kCubKernel) + small_kernel(320),
                            auto_pch_status::used);
}

// A program name that reaches the image unseen by the prefix scans (__BASE_FILE__ pasted from
// one-character pieces): the worker finds a.cu in b.cu's output and compiles b.cu again plain
// (the in-process cases: auto_pch_names_test).
TEST_F(CompileServer, AnotherFileWhoseOutputHoldsTheFirstFilesNameIsCompiledPlain) {
  testing::temp_dir inc;
  testing::write_text(inc.path() / "unseen.cuh",
                      "#pragma once\n#include <cuda/std/complex>\n"
                      "#define C(a, b, c, d, e, f, g, h, i, j, k, l, m) "
                      "a##b##c##d##e##f##g##h##i##j##k##l##m\n"
                      "__device__ const char base[] = C(_, _, B, A, S, E, _, F, I, L, E, _, _);\n");
  const std::string code =
      "#include <unseen.cuh>\nextern \"C\" __global__ void k(const char** o) { *o = base; }\n";
  server_process server(dir_, 1);
  expect_after_a_first_file(server, code, code, auto_pch_status::discarded,
                            [&](program_options& o) { o.include_path = {inc.path().string()}; });
}

TEST_F(CompileServer, CompileErrorCarriesTheSameLog) {
  server_process server(dir_, 1);
  const std::string bad = "__global__ void k() { undeclared_thing = 1; }\n";
  std::string local_log, served_log;
  try {
    program(bad, source_type::cxx, options_with(compile_server_mode::off)).compile(code_type::ptx);
    FAIL() << "compiled";
  } catch (const compile_error& e) {
    local_log = e.log();
  }
  const std::uint64_t before = server.requests();
  try {
    program(bad, source_type::cxx, options_with(compile_server_mode::on)).compile(code_type::ptx);
    FAIL() << "compiled";
  } catch (const compile_error& e) {
    served_log = e.log();
  }
  EXPECT_EQ(server.requests(), before + 1);
  EXPECT_EQ(served_log, local_log);
  EXPECT_TRUE(testing::contains(served_log, "undeclared_thing"));
  // A success's warnings too.
  const std::string warns = "__global__ void k(int* p) { int unused_here; *p = 1; }\n";
  program local(warns, source_type::cxx, options_with(compile_server_mode::off));
  program served(warns, source_type::cxx, options_with(compile_server_mode::on));
  local.compile(code_type::ptx);
  served.compile(code_type::ptx);
  EXPECT_TRUE(testing::contains(local.log(), "unused_here")) << local.log();
  EXPECT_EQ(served.log(), local.log());
  EXPECT_EQ(server.requests(), before + 2);
}

TEST_F(CompileServer, TheCacheStoresTheSameKeyAndAHitNeverReachesTheServer) {
  server_process server(dir_, 1);
  in_memory_program_cache served_cache, local_cache;
  program served(small_kernel(1), source_type::cxx, options_with(compile_server_mode::on));
  program local(small_kernel(1), source_type::cxx, options_with(compile_server_mode::off));
  const object_code a = served.compile(code_type::cubin, {}, &served_cache);
  const object_code b = local.compile(code_type::cubin, {}, &local_cache);
  ASSERT_EQ(served.last_cache_outcome(), cache_outcome::miss);
  ASSERT_TRUE(served.last_cache_key() && local.last_cache_key());
  EXPECT_EQ(served.last_cache_key()->hex(), local.last_cache_key()->hex());
  const std::uint64_t before = server.requests();
  const object_code hit = served.compile(code_type::cubin, {}, &served_cache);
  EXPECT_EQ(served.last_cache_outcome(), cache_outcome::hit);
  EXPECT_EQ(server.requests(), before);
  ASSERT_EQ(hit.size(), a.size());
  EXPECT_TRUE(std::equal(hit.code().begin(), hit.code().end(), a.code().begin()));
  EXPECT_TRUE(std::equal(b.code().begin(), b.code().end(), a.code().begin()));
}

// Issue 39, class 4: a compile that reads its worker's own process view (a probe of /dev/stdin or
// /proc/self/fd/0, a procfs file whose contents are the host's) is refused by the worker: the
// client compiles it with its own view, as without a server, and nothing is stored.
TEST_F(CompileServer, AProcessViewInputIsTheClientsToCompileAndIsNeverStored) {
  server_process server(dir_, 1);
  const std::vector<std::string> codes = {
      "#if __has_include(\"/dev/stdin\")\n__device__ int val = 2;\n#else\n"
      "__device__ int val = 1;\n#endif\nextern \"C\" __global__ void k(int* p) { *p = val; }\n",
      "#if __has_include(\"/proc/self/fd/0\")\n__device__ int val = 2;\n#else\n"
      "__device__ int val = 1;\n#endif\nextern \"C\" __global__ void k(int* p) { *p = val; }\n",
      "__device__ int\n#include \"/proc/sys/kernel/ostype\"\n= 1;\n"
      "extern \"C\" __global__ void k(int* p) { *p = 1; }\n"};
  for (const auto& code : codes) {
    program local(code, source_type::cxx, options_with(compile_server_mode::off));
    const object_code expected = local.compile(code_type::ptx);
    in_memory_program_cache cache;
    for (int i = 0; i < 2; ++i) {
      const std::uint64_t before = server.requests();
      program served(code, source_type::cxx, options_with(compile_server_mode::on));
      const object_code got = served.compile(code_type::ptx, {}, &cache);
      EXPECT_EQ(server.requests(), before + 1) << code;  // asked, and refused
      EXPECT_EQ(masked(got.text()), masked(expected.text())) << code;
      EXPECT_EQ(served.last_cache_outcome(), cache_outcome::miss) << code;
      ASSERT_TRUE(served.last_store_refusal()) << code;
      EXPECT_EQ(served.last_store_refusal()->reason, cache_skip_reason::process_view_input);
    }
  }
}

// What a worker's compile read travels back to the client (its store gate): a header it read is
// seen by the client's observation, and the result is stored.
TEST_F(CompileServer, TheWorkersObservationsReachTheClientsGate) {
  server_process server(dir_, 1);
  const fs::path header = tmp_.path() / "served.cuh";
  std::ofstream(header) << "#pragma once\nconstexpr int served_value = 5;\n";
  std::this_thread::sleep_for(50ms);  // older than its timestamps' granularity
  program_options o = options_with(compile_server_mode::on, (tmp_.path() / "k.cu").string());
  const std::string code =
      "#include \"served.cuh\"\nextern \"C\" __global__ void k(int* p) { *p = served_value; }\n";
  in_memory_program_cache cache;
  const std::uint64_t before = server.requests();
  program served(code, source_type::cxx, o);
  detail::compiler_observation watch;
  (void)served.compile(code_type::ptx, {}, &cache);
  const detail::observed_inputs seen = watch.finish();
  EXPECT_EQ(server.requests(), before + 1);
  EXPECT_TRUE(std::any_of(seen.inputs.begin(), seen.inputs.end(), [&](const auto& in) {
    return in.call == detail::observed_call::open && in.name == header.string();
  }));
  EXPECT_FALSE(served.last_store_refusal());
  EXPECT_TRUE(served.last_stored());
}

}  // namespace
}  // namespace cucore
