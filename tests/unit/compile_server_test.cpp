// The compile server (docs/compile-server.md) with real server processes: results equal to an
// in-process compile, the fallbacks (no server, a killed worker, a stopped server), its security
// (another uid, malformed requests, a directory others can reach), 16 clients at once, idle exit.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cucore/cache/in_memory.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "cucore/server.hpp"
#include "nvrtc_versions.hpp"  // CUCORE_TEST_NVRTC: the version matrix
#include "server/wire.hpp"
#include "test_support.hpp"

#ifndef CUCORE_CLI_PATH
#error "CUCORE_CLI_PATH must point at the cucore tool"
#endif

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// A CUB kernel (a precompiled-header prefix) with a name expression.
constexpr const char* kCubKernel = R"(#include <cub/block/block_reduce.cuh>
#include <cuda/std/complex>
template <int N>
__global__ void reduce(int* p) {
  using R = cub::BlockReduce<int, N>;
  __shared__ typename R::TempStorage t;
  int v = R(t).Sum(p[threadIdx.x]);
  if (threadIdx.x == 0) *p = v;
}
)";

std::string small_kernel(int i) {
  return "extern \"C\" __global__ void k" + std::to_string(i) +
         "(int* p) { p[threadIdx.x] += " + std::to_string(i) + "; }\n";
}

// NVRTC names internal-linkage variables with the compiling process's PID (nvrtc-observed.md).
std::string masked(std::string_view ptx) {
  static const std::regex internal("_INTERNAL_[A-Za-z0-9_]+");
  return std::regex_replace(std::string(ptx), internal, "_INTERNAL_");
}

program_options options_with(compile_server_mode mode, std::string name = "server_test.cu") {
  program_options o;
  o.arch = testing::kArch;
  o.std = "c++17";
  o.name = std::move(name);
  o.compile_server = mode;
  return o;
}

// Whether a process runs (a zombie does not: a daemon's parent may reap it late).
bool running(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, name, state;
  return static_cast<bool>(stat >> id >> name >> state) && state != "Z";
}

// Runs the tool, waiting for it; its exit status and output.
std::pair<int, std::string> run_tool(std::vector<std::string> args,
                                     const std::vector<std::string>& prefix = {}) {
  args.insert(args.begin(), CUCORE_CLI_PATH);
  args.insert(args.begin(), prefix.begin(), prefix.end());
  int out[2];
  if (::pipe(out) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

// A server in the foreground, a child of the test; killed and reaped at the end whatever happens.
class server_process {
 public:
  server_process(const fs::path& dir, int workers, std::vector<std::string> extra = {})
      : dir_(dir) {
    std::vector<std::string> args = {
        CUCORE_CLI_PATH, "server",     "start",     "--foreground",
        "--dir",         dir.string(), "--workers", std::to_string(workers)};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(CUCORE_CLI_PATH, argv.data());
      ::_exit(127);
    }
    // Ready when it answers (bounded: it only has to bind and spawn its workers).
    const auto deadline = clock_type::now() + 30s;
    while (!query_compile_server(dir_)) {
      if (clock_type::now() > deadline || exited()) {
        ADD_FAILURE() << "the compile server did not start";
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGTERM);
      if (!wait_exit(20s)) {
        ::kill(pid_, SIGKILL);
        wait_exit(10s);
      }
    }
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  pid_t pid() const { return pid_; }
  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  bool wait_exit(std::chrono::milliseconds bound) {
    const auto deadline = clock_type::now() + bound;
    while (!exited()) {
      if (clock_type::now() > deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }
  std::uint64_t requests() const {
    const auto s = query_compile_server(dir_);
    return s ? s->requests : 0;
  }
  // The images its workers hold, once none is being made (within 60 s).
  std::size_t images_once_made() const {
    const auto deadline = clock_type::now() + 60s;
    for (;;) {
      const auto s = query_compile_server(dir_);
      if (s && (s->images_being_made == 0 || clock_type::now() > deadline)) {
        std::size_t images = 0;
        for (const auto& w : s->workers) images += w.prefixes;
        return images;
      }
      std::this_thread::sleep_for(20ms);
    }
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
};

// Sends `sig` to the first worker the server reports busy (within 30 s); its pid, or 0.
int signal_a_busy_worker(const fs::path& dir, int sig) {
  const auto deadline = clock_type::now() + 30s;
  while (clock_type::now() < deadline) {
    if (const auto s = query_compile_server(dir)) {
      for (const auto& w : s->workers) {
        if (w.busy && w.pid > 0 && ::kill(w.pid, sig) == 0) return w.pid;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  return 0;
}

// Each test: its own private directory, named to clients by CUCORE_SERVER_DIR.
class CompileServer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() / "server";
    ::setenv("CUCORE_SERVER_DIR", dir_.c_str(), 1);
    ::setenv("CUCORE_SERVER_PROGRAM", CUCORE_CLI_PATH, 1);
    ::unsetenv("CUCORE_COMPILE_SERVER");
    ::unsetenv("CUCORE_SERVER_TIMEOUT_MS");
  }
  void TearDown() override {
    ::unsetenv("CUCORE_SERVER_DIR");
    ::unsetenv("CUCORE_SERVER_PROGRAM");
    ::unsetenv("CUCORE_SERVER_TIMEOUT_MS");
  }
  testing::temp_dir tmp_;
  fs::path dir_;
};

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

// Another file of the prefix (issue 40): routed to the image's worker, which uses it (the name
// cannot reach the image: docs/compile-server.md, "Images across program names").
TEST_F(CompileServer, AnotherFileOfAPrefixStartsFromTheFirstFilesImage) {
  server_process server(dir_, 2);
  program first(kCubKernel, source_type::cxx, options_with(compile_server_mode::on, "a.cu"));
  (void)first.compile(code_type::ptx);
  EXPECT_EQ(first.last_auto_pch(), auto_pch_status::first_seen);
  EXPECT_EQ(server.images_once_made(), 1u);
  const std::string code = std::string(kCubKernel) + small_kernel(320);
  program local(code, source_type::cxx, options_with(compile_server_mode::off, "b.cu"));
  program served(code, source_type::cxx, options_with(compile_server_mode::on, "b.cu"));
  const object_code got = served.compile(code_type::ptx);
  EXPECT_EQ(served.last_auto_pch(), auto_pch_status::used);
  EXPECT_EQ(masked(got.text()), masked(local.compile(code_type::ptx).text()));
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
  const auto with = [&](compile_server_mode mode, std::string name) {
    program_options o = options_with(mode, std::move(name));
    o.include_path = {inc.path().string()};
    return o;
  };
  server_process server(dir_, 1);
  program first(code, source_type::cxx, with(compile_server_mode::on, "a.cu"));
  (void)first.compile(code_type::ptx);
  EXPECT_EQ(first.last_auto_pch(), auto_pch_status::first_seen);
  EXPECT_EQ(server.images_once_made(), 1u);
  program local(code, source_type::cxx, with(compile_server_mode::off, "b.cu"));
  program served(code, source_type::cxx, with(compile_server_mode::on, "b.cu"));
  const object_code got = served.compile(code_type::ptx);
  EXPECT_EQ(served.last_auto_pch(), auto_pch_status::discarded);
  EXPECT_EQ(masked(got.text()), masked(local.compile(code_type::ptx).text()));
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

TEST_F(CompileServer, NoServerCompilesInProcess) {
  // auto: none runs, none is started.
  program a(small_kernel(2), source_type::cxx, options_with(compile_server_mode::automatic));
  EXPECT_GT(a.compile(code_type::ptx).size(), 0u);
  EXPECT_FALSE(fs::exists(dir_));
  // on, with no program to start one: in-process all the same.
  ::setenv("CUCORE_SERVER_PROGRAM", "/nonexistent/cucore", 1);
  const char* path = std::getenv("PATH");
  const std::string saved_path = path != nullptr ? path : "";
  ::setenv("PATH", "/nonexistent", 1);  // restored below
  program b(small_kernel(2), source_type::cxx, options_with(compile_server_mode::on));
  EXPECT_EQ(b.compile(code_type::ptx).text(), a.compile(code_type::ptx).text());
  ::setenv("PATH", saved_path.c_str(), 1);
}

TEST_F(CompileServer, OnStartsAServerThatStopLeavesNoFiles) {
  ::setenv("CUCORE_SERVER_IDLE_SECONDS", "60", 1);
  ::setenv("CUCORE_SERVER_WORKERS", "1", 1);
  program a(small_kernel(3), source_type::cxx, options_with(compile_server_mode::on));
  EXPECT_GT(a.compile(code_type::ptx).size(), 0u);
  ::unsetenv("CUCORE_SERVER_IDLE_SECONDS");
  ::unsetenv("CUCORE_SERVER_WORKERS");
  const auto status = query_compile_server(dir_);
  ASSERT_TRUE(status) << "compile_server_mode::on started no server";
  EXPECT_EQ(status->requests, 1u);
  EXPECT_TRUE(stop_compile_server(dir_));
  EXPECT_FALSE(fs::exists(dir_)) << "the server left its directory behind";
  EXPECT_FALSE(running(status->pid)) << "the server still runs";
}

// A CUB compile through the server whose worker gets `sig` while it compiles (a CUB compile takes
// ~1 s): the worker's pid (0: none seen busy), the served bytes and the in-process ones (masked).
struct signalled_compile {
  int pid = 0;
  std::string got, expected;
};
signalled_compile signal_the_worker_mid_compile(const fs::path& dir, int sig) {
  program local(kCubKernel, source_type::cxx, options_with(compile_server_mode::off));
  const std::string expected = masked(local.compile(code_type::ptx).text());
  std::string got;
  std::thread client([&] {
    program served(kCubKernel, source_type::cxx, options_with(compile_server_mode::on));
    got = masked(served.compile(code_type::ptx).text());
  });
  const int pid = signal_a_busy_worker(dir, sig);
  client.join();
  return {pid, got, expected};
}

TEST_F(CompileServer, AKilledWorkerMeansAnInProcessCompile) {
  server_process server(dir_, 1);
  const auto [killed, got, expected] = signal_the_worker_mid_compile(dir_, SIGKILL);
  ASSERT_NE(killed, 0) << "no busy worker seen";
  EXPECT_EQ(got, expected);
  // The server replaced it and serves on.
  const std::uint64_t before = server.requests();
  program again(small_kernel(4), source_type::cxx, options_with(compile_server_mode::on));
  EXPECT_GT(again.compile(code_type::ptx).size(), 0u);
  EXPECT_EQ(server.requests(), before + 1);
  const auto s = query_compile_server(dir_);
  ASSERT_TRUE(s);
  EXPECT_NE(s->workers.at(0).pid, killed);
}

TEST_F(CompileServer, AStoppedWorkerMeansAnInProcessCompile) {
  server_process server(dir_, 1);
  const auto [stopped, got, expected] = signal_the_worker_mid_compile(dir_, SIGSTOP);
  ASSERT_NE(stopped, 0) << "no busy worker seen";
  EXPECT_EQ(got, expected);
  // The server replaced it (the stopped one was killed).
  const auto s = query_compile_server(dir_);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->workers.at(0).restarts, 1u);
  EXPECT_FALSE(running(stopped));
}

TEST_F(CompileServer, AStoppedServerMeansAnInProcessCompileWithinTheBound) {
  server_process server(dir_, 1);
  ::setenv("CUCORE_SERVER_TIMEOUT_MS", "1000", 1);
  ASSERT_EQ(::kill(server.pid(), SIGSTOP), 0);
  const auto start = clock_type::now();
  program served(small_kernel(5), source_type::cxx, options_with(compile_server_mode::on));
  const object_code got = served.compile(code_type::ptx);
  const auto took = clock_type::now() - start;
  ::kill(server.pid(), SIGCONT);
  program local(small_kernel(5), source_type::cxx, options_with(compile_server_mode::off));
  EXPECT_EQ(got.text(), local.compile(code_type::ptx).text());
  // The bound (1 s) plus an in-process compile of a small kernel (~50 ms; generous for load).
  EXPECT_LT(took, 6s);
  EXPECT_GE(took, 900ms) << "it did not wait for the server at all";
}

// Connects to the server's socket directly.
int raw_connect(const fs::path& dir) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string p = (dir / "server.sock").string();
  std::strncpy(addr.sun_path, p.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_F(CompileServer, MalformedRequestsNeverCrashIt) {
  server_process server(dir_, 1);
  std::mt19937 rng(12345);
  auto header = [](std::uint32_t magic, std::uint32_t version, std::uint32_t type,
                   std::uint32_t length) {
    std::string h(16, '\0');
    const std::uint32_t v[4] = {magic, version, type, length};
    std::memcpy(h.data(), v, 16);
    return h;
  };
  std::vector<std::string> attacks = {
      header(0xdeadbeef, 1, 1, 0),                                         // wrong magic
      header(server::kMagic, 99, 1, 0),                                    // another version
      header(server::kMagic, server::kProtocolVersion, 77, 0),             // unknown type
      header(server::kMagic, server::kProtocolVersion, 1, 0xffffffffu),    // oversize
      header(server::kMagic, server::kProtocolVersion, 1, 100) + "short",  // truncated
      header(server::kMagic, server::kProtocolVersion, 1, 8) + std::string(8, '\xff'),
  };
  for (int i = 0; i < 20; ++i) {  // random bytes, and random payloads in a valid frame
    std::string junk(1 + rng() % 300, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    attacks.push_back(junk);
    attacks.push_back(header(server::kMagic, server::kProtocolVersion, 1,
                             static_cast<std::uint32_t>(junk.size())) +
                      junk);
  }
  for (const auto& attack : attacks) {
    const int fd = raw_connect(dir_);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, attack.data(), attack.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(attack.size()));
    ::shutdown(fd, SHUT_WR);
    // Whatever it answers, it answers a refusal or closes.
    try {
      if (auto f = server::read_frame(fd, 10s)) {
        EXPECT_EQ(f->type, server::frame_type::refusal);
      }
    } catch (const server::wire_error&) {
    }
    ::close(fd);
  }
  EXPECT_FALSE(server.exited());
  program served(small_kernel(6), source_type::cxx, options_with(compile_server_mode::on));
  const std::uint64_t before = server.requests();
  EXPECT_GT(served.compile(code_type::ptx).size(), 0u);
  EXPECT_EQ(server.requests(), before + 1) << "the server stopped serving";
}

TEST_F(CompileServer, AnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  server_process server(dir_, 1);
  // Let uid 65534 reach the socket (the directory check would stop it first otherwise).
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ / "server.sock").c_str(), 0777), 0);
  // A child as uid/gid 65534 (nobody) asks for the status: the answer's frame type is its exit.
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(100);
    }
    const int fd = raw_connect(dir_);
    if (fd < 0) ::_exit(101);
    try {
      server::write_frame(fd, server::frame_type::status_request, {}, 5s);
    } catch (...) {
    }
    try {
      const auto f = server::read_frame(fd, 5s);
      ::_exit(f ? static_cast<int>(f->type) : 102);
    } catch (...) {
      ::_exit(103);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(server::frame_type::refusal))
      << "another uid got an answer other than a refusal";
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_TRUE(query_compile_server(dir_)) << "the server does not answer its own user";
}

TEST_F(CompileServer, ADirectoryOthersCanReachIsRefused) {
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0755);
  const auto [rc, out] = run_tool({"server", "start", "--foreground", "--dir", dir_.string()});
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(testing::contains(out, "0755")) << out;
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(CompileServer, SixteenClientsAtOnce) {
  server_process server(dir_, 2);
  std::vector<std::string> expected(16), got(16);
  for (int i = 0; i < 16; ++i) {
    program p(small_kernel(100 + i), source_type::cxx, options_with(compile_server_mode::off));
    expected[i] = std::string(p.compile(code_type::ptx).text());
  }
  std::vector<std::thread> clients;
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      program p(small_kernel(100 + i), source_type::cxx, options_with(compile_server_mode::on));
      got[i] = std::string(p.compile(code_type::ptx).text());
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], expected[i]) << "client " << i;
  EXPECT_EQ(server.requests(), 16u);
}

TEST_F(CompileServer, RacingStartersMakeOneServerAndIdleExitLeavesNoFiles) {
  std::vector<std::thread> starters;
  std::vector<std::pair<int, std::string>> results(4);
  for (int i = 0; i < 4; ++i) {
    starters.emplace_back([&, i] {
      results[i] = run_tool(
          {"server", "start", "--dir", dir_.string(), "--workers", "1", "--idle-time", "2"});
    });
  }
  for (auto& t : starters) t.join();
  // Each says which server serves: one pid for all ("compile server PID started|already ...").
  std::set<int> pids;
  for (const auto& [rc, out] : results) {
    EXPECT_EQ(rc, 0) << out;
    std::smatch m;
    if (std::regex_search(out, m, std::regex("compile server ([0-9]+) "))) {
      pids.insert(std::stoi(m[1]));
    }
  }
  ASSERT_EQ(pids.size(), 1u);
  const int pid = *pids.begin();
  // Idle for 2 s: it exits by itself, its files and directory gone.
  const auto deadline = clock_type::now() + 30s;
  while (running(pid) && clock_type::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(running(pid)) << "the server outlived its idle time";
  EXPECT_FALSE(fs::exists(dir_)) << "the server left files behind";
}

TEST_F(CompileServer, TheToolUsesARunningServerAndAnotherMountNamespaceCompilesItself) {
  server_process server(dir_, 1);
  const fs::path source = tmp_.path() / "k.cu";
  testing::write_text(source, small_kernel(8));
  const std::string arch = std::string("--arch=") + testing::kArch;
  // cucore compile's default: a running server.
  auto [rc, out] = run_tool({"compile", source.string(), arch, "--cache", "none", "-o",
                             (tmp_.path() / "a.ptx").string()});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(server.requests(), 1u);
  std::tie(rc, out) = run_tool({"compile", source.string(), arch, "--cache", "none", "--no-server",
                                "-o", (tmp_.path() / "b.ptx").string()});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(server.requests(), 1u) << "--no-server reached the server";
  EXPECT_EQ(testing::read_text(tmp_.path() / "a.ptx"), testing::read_text(tmp_.path() / "b.ptx"));
  // A client in another mount namespace is refused before any compile, and compiles itself.
  if (run_tool({}, {"unshare", "-m", "true"}).first != 0) {
    GTEST_SKIP() << "cannot make a mount namespace here (unshare -m)";
  }
  std::tie(rc, out) = run_tool({"compile", source.string(), arch, "--cache", "none", "--server",
                                "-o", (tmp_.path() / "c.ptx").string()},
                               {"unshare", "-m"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(server.requests(), 1u) << "a client in another mount namespace was served";
  EXPECT_EQ(testing::read_text(tmp_.path() / "c.ptx"), testing::read_text(tmp_.path() / "b.ptx"));
}

TEST_F(CompileServer, AWorkerPastItsMemoryBoundIsReplaced) {
  server_process server(dir_, 1, {"--worker-memory", "1"});  // 1 MiB: every worker is past it
  for (int i = 0; i < 2; ++i) {
    program served(small_kernel(20 + i), source_type::cxx, options_with(compile_server_mode::on));
    program local(small_kernel(20 + i), source_type::cxx, options_with(compile_server_mode::off));
    EXPECT_EQ(served.compile(code_type::ptx).text(), local.compile(code_type::ptx).text());
  }
  // The first worker was replaced before the second request could reach its slot.
  const auto s = query_compile_server(dir_);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->requests, 2u);
  EXPECT_GE(s->workers.at(0).restarts, 1u);
}

// The wire format itself (src/server/wire.hpp), over socket pairs: no server.

// A socket pair, closed at the end of the test (an end closed early is set to -1).
struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~socket_pair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void close(int i) {
    ::close(fd[i]);
    fd[i] = -1;
  }
};

std::string frame_header(server::frame_type type, std::uint32_t length) {
  std::string h(16, '\0');
  const std::uint32_t v[4] = {server::kMagic, server::kProtocolVersion,
                              static_cast<std::uint32_t>(type), length};
  std::memcpy(h.data(), v, 16);  // little-endian, as the format (x86-64, aarch64)
  return h;
}

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs `body` in a child process and returns {what it returned, the growth of the child's peak RSS
// (ru_maxrss, KiB) across it}. A child's peak starts at what it holds at the fork, whatever this
// test process reached before (the 64 MiB round trip below, another test).
template <class Body>
std::pair<long, long> in_child_peak_growth(Body body) {
  int report[2];
  if (::pipe(report) != 0) return {-1, -1};
  const pid_t child = ::fork();
  if (child < 0) return {-1, -1};
  if (child == 0) {
    ::close(report[0]);
    long out[2] = {-1, -1};
    const long before = max_rss_kib();
    out[0] = body();
    out[1] = max_rss_kib() - before;
    (void)!::write(report[1], out, sizeof out);
    ::_exit(0);
  }
  ::close(report[1]);
  long got[2] = {-1, -1};
  const ssize_t n = ::read(report[0], got, sizeof got);
  ::close(report[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (n != static_cast<ssize_t>(sizeof got)) return {-1, -1};
  return {got[0], got[1]};
}

TEST(Wire, AHeaderClaimingMoreThanArrivesCostsOnlyWhatArrived) {
  // A header claiming 200 MiB, 10 bytes of payload, and the peer closes: read_frame throws
  // wire_error, and the peak RSS grew by far less than the claim (it grew by all of it when
  // read_frame sized the buffer from the header).
  const auto [threw, growth] = in_child_peak_growth([]() -> long {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -2;
    const std::string sent =
        frame_header(server::frame_type::compile_request, 200u << 20) + "0123456789";
    if (::send(fds[1], sent.data(), sent.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sent.size())) {
      return -3;
    }
    ::close(fds[1]);
    try {
      (void)server::read_frame(fds[0], 5s);
    } catch (const server::wire_error&) {
      return 1;
    } catch (...) {
      return -4;
    }
    return 0;
  });
  EXPECT_EQ(threw, 1) << "read_frame did not throw wire_error for a frame cut short";
  EXPECT_LT(growth, 50 * 1024) << "reading 10 bytes of a 200 MiB claim grew the peak RSS by "
                               << growth << " KiB";
  // The control: the measure sees an allocation of 64 MiB here (touched page by page).
  const auto [ok, control] = in_child_peak_growth([]() -> long {
    std::vector<char> touched(64u << 20);
    for (std::size_t i = 0; i < touched.size(); i += 4096) touched[i] = 1;
    return touched[4096];
  });
  EXPECT_EQ(ok, 1);
  EXPECT_GE(control, 60 * 1024) << "touching 64 MiB grew the peak RSS by " << control
                                << " KiB only: the measure does not see allocations here";
}

TEST(Wire, ATricklingPeerIsCutOffByTheFrameDeadline) {
  // The header at once, then one payload byte every 300 ms: never 1 s of silence, but the frame's
  // deadline is 2 x 1 s after its first byte (plus 1 s per MiB received: nothing here). Before
  // the deadline, the 100 bytes would have held the reader for 30 s.
  socket_pair s;
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    const std::string h = frame_header(server::frame_type::compile_request, 100);
    if (::send(s.fd[1], h.data(), h.size(), MSG_NOSIGNAL) != 16) return;
    for (int i = 0; i < 100 && !stop; ++i) {
      std::this_thread::sleep_for(300ms);
      if (::send(s.fd[1], "x", 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  const auto start = clock_type::now();
  std::string what;
  try {
    (void)server::read_frame(s.fd[0], 1s);
  } catch (const server::wire_error& e) {
    what = e.what();
  }
  const auto took = clock_type::now() - start;
  stop = true;
  peer.join();
  EXPECT_NE(what.find("timed out"), std::string::npos) << "read_frame did not time out: " << what;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 3500ms) << "the trickling peer held the reader past the frame's deadline";
}

TEST(Wire, TheFrameDeadlineStartsAtItsFirstByte) {
  // An idle wait (a worker's 24 h for its next request) is bounded by the silence bound alone:
  // 900 ms of nothing, then a frame in pieces 300 ms apart for 1.5 s, 2.4 s after the call, 1.5 s
  // after the frame's first byte (its deadline: 2 s).
  socket_pair s;
  const std::string bytes =
      frame_header(server::frame_type::compile_reply, 10) + std::string("0123456789");
  std::thread peer([&] {
    std::this_thread::sleep_for(900ms);
    for (std::size_t at = 0; at < bytes.size(); at += 5) {
      if (at > 0) std::this_thread::sleep_for(300ms);
      const std::size_t n = std::min<std::size_t>(5, bytes.size() - at);
      if (::send(s.fd[1], bytes.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) return;
    }
  });
  std::optional<server::frame> f;
  EXPECT_NO_THROW(f = server::read_frame(s.fd[0], 1s));
  peer.join();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, server::frame_type::compile_reply);
  EXPECT_EQ(f->payload, "0123456789");
}

TEST(Wire, A64MiBPayloadRoundTrips) {
  socket_pair s;
  std::string payload(64u << 20, '\0');
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i + 8 <= payload.size(); i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(payload.data() + i, &v, 8);
  }
  std::string write_error;
  std::thread peer([&] {
    try {
      server::write_frame(s.fd[1], server::frame_type::compile_reply, payload, 5s);
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  });
  const auto start = clock_type::now();
  std::optional<server::frame> f;
  EXPECT_NO_THROW(f = server::read_frame(s.fd[0], 5s));
  const auto took = clock_type::now() - start;
  peer.join();
  EXPECT_EQ(write_error, "");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, server::frame_type::compile_reply);
  EXPECT_TRUE(f->payload == payload)
      << "the payload arrived changed (" << f->payload.size() << " bytes)";
  EXPECT_LT(took, 5s);
  // The peer closes: the end, not an error.
  s.close(1);
  EXPECT_FALSE(server::read_frame(s.fd[0], 1s));
}

TEST(Wire, RawCompileRepliesRoundTrip) {
  server::raw_compile_reply full;
  full.result = 6;  // NVRTC_ERROR_COMPILATION: any nvrtcResult travels
  full.auto_pch = auto_pch_status::created;
  auto& r = full.record;
  r.ptx = {NVRTC_SUCCESS, 12, NVRTC_SUCCESS, std::string(".version 9\0", 11) + "."};
  r.cubin = {NVRTC_ERROR_INVALID_PROGRAM, 0, NVRTC_ERROR_INVALID_PROGRAM, ""};
  r.ltoir = {NVRTC_SUCCESS, 3, NVRTC_SUCCESS, std::string("\0\1\2", 3)};
  r.log = {NVRTC_SUCCESS, 5, NVRTC_SUCCESS, "log\n"};
  r.log.bytes += '\0';
  r.names = {{"k<1>", NVRTC_SUCCESS, "_Z1kILi1EEvv"},
             {"k<2>", NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID, ""}};
  r.pch_status = NVRTC_SUCCESS;
  r.pch_required = 1u << 30;
  r.tile = detail::nvrtc_output{NVRTC_SUCCESS, 4, NVRTC_SUCCESS, "tile"};
  server::raw_compile_reply bare;  // no names, no Tile IR
  for (const auto* a : {&full, &bare}) {
    const std::string bytes = server::encode(*a);
    const auto b = server::decode_raw_reply(bytes);
    EXPECT_EQ(b.result, a->result);
    EXPECT_EQ(b.auto_pch, a->auto_pch);
    EXPECT_TRUE(b.record == a->record);
    EXPECT_EQ(server::encode(b), bytes);
  }
  EXPECT_FALSE(server::decode_raw_reply(server::encode(bare)).record.tile);
  // An output whose size differs from its bytes is refused (the client copies `size` bytes).
  auto bad = full;
  bad.record.ptx.size = 99;
  EXPECT_THROW(server::decode_raw_reply(server::encode(bad)), server::wire_error);
  // A code outside nvrtcResult's range (0..31) is refused, not held (undefined behaviour).
  std::string bytes = server::encode(full);
  bytes[8] = 32;  // result and auto_pch (4 bytes each), then the PTX's size code
  EXPECT_THROW(server::decode_raw_reply(bytes), server::wire_error);
  bytes[8] = 31;
  EXPECT_EQ(static_cast<int>(server::decode_raw_reply(bytes).record.ptx.size_code), 31);
}

TEST(Wire, ObservedInputsRoundTripInBothReplies) {
  detail::observed_inputs seen;
  seen.inputs = {{detail::observed_call::open, true, "/a/b.h"},
                 {detail::observed_call::stat, false, "/a/c.stdh"},
                 {detail::observed_call::getenv, false, "NVRTC_APPEND_FLAGS"}};
  server::compile_reply a;
  a.observed = seen;
  const std::string bytes = server::encode(a);
  EXPECT_TRUE(server::decode_reply(bytes).observed.inputs == seen.inputs);
  EXPECT_EQ(server::encode(server::decode_reply(bytes)), bytes);
  server::raw_compile_reply raw;
  raw.observed = seen;
  raw.observed.unobserved = "why not";
  const std::string raw_bytes = server::encode(raw);
  const auto back = server::decode_raw_reply(raw_bytes);
  EXPECT_TRUE(back.observed.inputs == seen.inputs);
  EXPECT_EQ(back.observed.unobserved, "why not");
  // A call kind past the last one is refused (the gate would not know it).
  std::string bad = bytes;
  const std::size_t calls = bad.size() - (3 * 16 + 6 + 9 + 18);  // u32 call, u32 found, u64 length
  ASSERT_EQ(static_cast<unsigned char>(bad[calls]), 0u);         // the first input's call: open
  bad[calls] = 9;
  EXPECT_THROW(server::decode_reply(bad), server::wire_error);
}

TEST(Wire, AnUnknownPchStatusNamesItsField) {
  const auto message = [](std::size_t at) {
    std::string bytes = server::encode(server::compile_reply{});
    // compiled (4 bytes), three empty strings (8 each), then auto_pch at 28 and pch at 32.
    bytes[at] = '\x7f';
    try {
      (void)server::decode_reply(bytes);
    } catch (const server::wire_error& e) {
      return std::string(e.what());
    }
    return std::string("decoded");
  };
  EXPECT_NE(message(28).find("an unknown automatic PCH status"), std::string::npos) << message(28);
  EXPECT_NE(message(32).find("an unknown PCH status"), std::string::npos) << message(32);
}

}  // namespace
}  // namespace cucore
