// A real CuTe kernel from the header corpus on a GPU (issue 19; label gpu): tests/data/corpus's
// cute_sgemm.cu, compiled with its corpus.json options against CUTLASS/CuTe 4.2
// (scripts/fetch-corpus.sh) through a directory cache, launched as corpus.json's "gpu" block says
// and checked on the host exactly; then a fresh process (this binary exec'd again, filtered to the
// child test) compiles the same program through the same directory, must hit, launches the hit
// and hands back its result, which must equal this process's.
//
// Without a GPU every test skips. On a GPU machine without the corpus the test fails and says to
// run scripts/fetch-corpus.sh. CUCORE_CORPUS_DIR (environment) overrides where the corpus is.
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/object_code.hpp"
#include "cucore/program.hpp"
#include "cucore/runtime/device.hpp"
#include "cucore/runtime/kernel.hpp"
#include "cucore/runtime/launch.hpp"
#include "cucore/runtime/memory.hpp"
#include "cucore/runtime/stream.hpp"
#include "cucore/toolkit.hpp"
#include "gpu_test_support.hpp"

extern char** environ;

namespace cucore {
namespace {

namespace fs = std::filesystem;

// Set (to a directory holding cache/) only in the fresh process the parent test runs.
constexpr const char* kChildVar = "CUCORE_CORPUS_GPU_CHILD_DIR";
constexpr const char* kKernelName = "cute_sgemm";

fs::path corpus_dir() {
  if (const char* d = std::getenv("CUCORE_CORPUS_DIR"); d != nullptr && *d != '\0') return d;
  return CUCORE_CORPUS_DIR;
}

fs::path spec_dir() {
  return fs::path(CUCORE_TEST_DATA_DIR) / "corpus";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string substituted(std::string text) {
  const std::string from = "${CUTLASS}";
  const std::string to = (corpus_dir() / "cutlass" / "include").string();
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}

// corpus.json's entry for the kernel.
nlohmann::json kernel_spec() {
  std::ifstream in(spec_dir() / "corpus.json");
  if (!in) throw std::runtime_error("cannot read " + (spec_dir() / "corpus.json").string());
  const auto spec = nlohmann::json::parse(in);
  for (const auto& k : spec.at("kernels")) {
    if (k.at("name") == kKernelName) return k;
  }
  throw std::runtime_error(std::string("corpus.json has no kernel ") + kKernelName);
}

// The kernel's options from corpus.json, for this device's arch (not the spec's sm_90).
program_options options_of(const nlohmann::json& k) {
  program_options o;
  o.name = k.at("program_name").get<std::string>();
  o.arch = toolkit::current_device_arch();
  const auto& j = k.at("options");
  for (const auto& d : j.value("include_path", std::vector<std::string>{})) {
    o.include_path.push_back(substituted(d));
  }
  if (j.contains("toolkit_include_path"))
    o.toolkit_include_path = j.at("toolkit_include_path").get<bool>();
  if (j.contains("std")) o.std = j.at("std").get<std::string>();
  if (j.contains("device_as_default_execution_space")) {
    o.device_as_default_execution_space = j.at("device_as_default_execution_space").get<bool>();
  }
  if (j.contains("ftz")) o.ftz = j.at("ftz").get<bool>();
  for (const auto& m : j.value("define_macro", nlohmann::json::array())) {
    if (m.is_string()) {
      o.define_macro.emplace_back(m.get<std::string>());
    } else if (m.contains("value")) {
      o.define_macro.emplace_back(m.at("name").get<std::string>(),
                                  m.at("value").get<std::string>());
    } else {
      o.define_macro.emplace_back(m.at("name").get<std::string>());
    }
  }
  return o;
}

// The GEMM's problem (corpus.json "gpu"), its inputs and the host reference.
struct sgemm_problem {
  std::string entry;
  int m = 0;
  int n = 0;
  int k = 0;
  float alpha = 0;
  float beta = 0;
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;

  explicit sgemm_problem(const nlohmann::json& spec) {
    const auto& g = spec.at("gpu");
    entry = g.at("entry").get<std::string>();
    const auto& p = g.at("problem");
    m = p.at("m").get<int>();
    n = p.at("n").get<int>();
    k = p.at("k").get<int>();
    alpha = p.at("alpha").get<float>();
    beta = p.at("beta").get<float>();
    const auto& gr = g.at("grid");
    const auto& bl = g.at("block");
    grid = dim3(gr.at(0).get<unsigned>(), gr.at(1).get<unsigned>(), gr.at(2).get<unsigned>());
    block = dim3(bl.at(0).get<unsigned>(), bl.at(1).get<unsigned>(), bl.at(2).get<unsigned>());
    shared_bytes = g.at("dynamic_shared_bytes").get<std::size_t>();
  }

  // As corpus.json's "input" says.
  std::vector<float> a() const {
    std::vector<float> v(static_cast<std::size_t>(m) * k);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
    return v;
  }
  std::vector<float> b() const {
    std::vector<float> v(static_cast<std::size_t>(n) * k);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5) - 2.0f;
    return v;
  }
  std::vector<float> c() const {
    std::vector<float> v(static_cast<std::size_t>(m) * n);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 3);
    return v;
  }

  // C = alpha * A * B^T + beta * C, A m x k and B n x k row-major. Every value is an integer or a
  // half-integer far inside float's exact range, so the order of the sums does not matter and
  // the device's result must equal this exactly.
  std::vector<float> reference() const {
    const auto av = a();
    const auto bv = b();
    auto cv = c();
    for (int r = 0; r < m; ++r) {
      for (int s = 0; s < n; ++s) {
        double sum = 0;
        for (int l = 0; l < k; ++l) {
          sum += static_cast<double>(av[static_cast<std::size_t>(r) * k + l]) *
                 bv[static_cast<std::size_t>(s) * k + l];
        }
        float& out = cv[static_cast<std::size_t>(r) * n + s];
        out = static_cast<float>(alpha * sum + static_cast<double>(beta) * out);
      }
    }
    return cv;
  }

  // Launches `kern` on fresh buffers filled from a(), b(), c(); the result C.
  std::vector<float> run(const kernel& kern) const {
    device dev(0);
    stream s(dev);
    const auto av = a();
    const auto bv = b();
    const auto cv = c();
    buffer da(av.size() * sizeof(float), s);
    buffer db(bv.size() * sizeof(float), s);
    buffer dc(cv.size() * sizeof(float), s);
    da.copy_from(av, s);
    db.copy_from(bv, s);
    dc.copy_from(cv, s);
    launch(s, {.grid = grid, .block = block, .shared_memory_bytes = shared_bytes}, kern, m, n, k,
           alpha, da, db, beta, dc);
    return dc.to_vector<float>(s);
  }
};

// The number of elements of `got` that differ from `want`, and the first few, for a message.
std::pair<std::size_t, std::string> differences(const std::vector<float>& got,
                                                const std::vector<float>& want, int n) {
  std::size_t bad = 0;
  std::ostringstream first;
  if (got.size() != want.size()) {
    return {want.size(), "sizes differ: " + std::to_string(got.size()) + " against " +
                             std::to_string(want.size())};
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad++ < 5) {
      first << " c[" << i / n << "][" << i % n << "] = " << got[i] << " (want " << want[i] << ")";
    }
  }
  return {bad, first.str()};
}

class CorpusGpu : public gpu_testing::gpu_test {
 protected:
  void SetUp() override {
    gpu_testing::gpu_test::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(fs::exists(corpus_dir() / ".cucore-corpus"))
        << "the header corpus (CUTLASS/CuTe 4.2) is not at " << corpus_dir()
        << ": run scripts/fetch-corpus.sh (or set CUCORE_CORPUS_DIR to where it put it)";
  }
};

// The fresh process: skipped unless the parent test ran it.
class CorpusGpuChild : public CorpusGpu {
 protected:
  void SetUp() override {
    if (std::getenv(kChildVar) == nullptr) {
      GTEST_SKIP() << "run by CorpusGpu.CuteSgemmThroughADirectoryCacheThenAFreshProcessHits in a "
                      "fresh process, with "
                   << kChildVar << " set";
    }
    CorpusGpu::SetUp();
  }
};

struct child_result {
  int status = -1;  // exit status, or 128 + signal
  std::string output;
};

// Runs this test binary again (fork + execve), filtered to the child test, with kChildVar set to
// `dir`; its exit status and its output.
child_result run_child(const fs::path& dir) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    // No sharding, filter or XML output of the parent's applies to the child.
    if (entry.starts_with("GTEST_") || entry.starts_with(std::string(kChildVar) + "=")) continue;
    env_strings.push_back(entry);
  }
  env_strings.push_back(std::string(kChildVar) + "=" + dir.string());
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=CorpusGpuChild.*";
  std::string color = "--gtest_color=no";
  std::vector<char*> argv = {exe.data(), filter.data(), color.data(), nullptr};

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  child_result r;
  char buf[4096];
  for (;;) {
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    r.output.append(buf, static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<float> read_floats(const fs::path& path) {
  const std::string bytes = read_text(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

void write_bytes(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

TEST_F(CorpusGpu, CuteSgemmThroughADirectoryCacheThenAFreshProcessHits) {
  const auto spec = kernel_spec();
  const sgemm_problem problem(spec);
  // The kernel has no bounds checks: the grid covers C in 64 x 64 tiles exactly.
  ASSERT_EQ(problem.m % 64, 0);
  ASSERT_EQ(problem.n % 64, 0);
  ASSERT_EQ(problem.k % 8, 0);
  ASSERT_EQ(problem.grid, dim3(problem.m / 64, problem.n / 64, 1));
  ASSERT_EQ(problem.block, dim3(256, 1, 1));
  const std::string code = read_text(spec_dir() / spec.at("file").get<std::string>());
  ASSERT_FALSE(code.empty());

  gpu_testing::scratch_cache scratch;  // a fresh directory, removed at scope exit
  const fs::path root = scratch.cache().root();
  program p(code, source_type::cxx, options_of(spec));
  const object_code compiled = p.compile(code_type::cubin, {}, &scratch.cache());
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::miss);

  const std::vector<float> want = problem.reference();
  const std::vector<float> got = problem.run(compiled.get_kernel(problem.entry));
  const auto [bad, first] = differences(got, want, problem.n);
  EXPECT_EQ(bad, 0u) << "elements of C differ from the host reference:" << first;

  // The fresh process: same cache directory, same program; it writes its outcome, its result and
  // the cubin it got next to the cache (outside it).
  const fs::path out = root.string() + "-child";
  fs::create_directories(out);
  struct remove_at_exit {
    fs::path path;
    ~remove_at_exit() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{out};
  std::ofstream(out / "cache") << root.string();
  const child_result child = run_child(out);
  ASSERT_EQ(child.status, 0) << "the fresh process failed:\n" << child.output;
  ASSERT_TRUE(fs::exists(out / "outcome")) << "the fresh process wrote no outcome (skipped?):\n"
                                           << child.output;
  EXPECT_EQ(read_text(out / "outcome"), "hit") << child.output;
  const std::string child_cubin = read_text(out / "cubin");
  const auto stored = compiled.code();
  EXPECT_TRUE(child_cubin ==
              std::string(reinterpret_cast<const char*>(stored.data()), stored.size()))
      << "the fresh process's hit (" << child_cubin.size()
      << " bytes) differs from the cubin this process compiled (" << stored.size() << " bytes)";
  const std::vector<float> child_c = read_floats(out / "result");
  const auto [child_bad, child_first] = differences(child_c, got, problem.n);
  EXPECT_EQ(child_bad, 0u) << "the fresh process's C differs from this process's:" << child_first;
}

TEST_F(CorpusGpuChild, CompileHitAndLaunch) {
  const fs::path out = std::getenv(kChildVar);
  const fs::path root = read_text(out / "cache");
  ASSERT_TRUE(fs::is_directory(root)) << root;
  const auto spec = kernel_spec();
  const sgemm_problem problem(spec);
  const std::string code = read_text(spec_dir() / spec.at("file").get<std::string>());
  file_stream_program_cache cache(root);
  program p(code, source_type::cxx, options_of(spec));
  const object_code compiled = p.compile(code_type::cubin, {}, &cache);
  const std::string outcome(to_string(p.last_cache_outcome()));
  write_bytes(out / "outcome", outcome.data(), outcome.size());
  EXPECT_EQ(p.last_cache_outcome(), cache_outcome::hit);
  const auto bytes = compiled.code();
  write_bytes(out / "cubin", bytes.data(), bytes.size());
  const std::vector<float> got = problem.run(compiled.get_kernel(problem.entry));
  write_bytes(out / "result", got.data(), got.size() * sizeof(float));
  const auto [bad, first] = differences(got, problem.reference(), problem.n);
  EXPECT_EQ(bad, 0u) << "elements of C differ from the host reference (fresh process):" << first;
}

}  // namespace
}  // namespace cucore
