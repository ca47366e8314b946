// The compile server's fallbacks (no server, a killed or stopped worker, a stopped server, a
// worker past its memory bound), its security (another uid, malformed requests, a directory others
// can reach), 16 clients at once, racing starters and idle exit, and the tool as its client.
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "compile_server_test_support.hpp"
#include "server/wire.hpp"

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the compile server tests' servers and fixture

// Whether a process runs (a zombie does not: a daemon's parent may reap it late).
bool running(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string id, name, state;
  return static_cast<bool>(stat >> id >> name >> state) && state != "Z";
}

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

}  // namespace
}  // namespace cucore
