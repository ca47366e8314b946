#include "oracle_support.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "cucore/cache/key.hpp"
#include "cucore/toolkit.hpp"
#include "nvrtc_versions.hpp"  // CUCORE_TEST_NVRTC: the version matrix

namespace cucore::oracle {

namespace fs = std::filesystem;

namespace {
std::string first_line(const std::string& text) {
  const auto start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return {};
  return text.substr(start, text.find('\n', start) - start);
}
}  // namespace

std::string normalized(const std::string& path, const fs::path& cwd) {
  std::string p = !path.empty() && path.front() == '/' ? path : cwd.string() + "/" + path;
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '/' && !out.empty() && out.back() == '/') continue;  // "//"
    if (p[i] == '.' && !out.empty() && out.back() == '/' &&
        (i + 1 == p.size() || p[i + 1] == '/')) {
      ++i;  // "/./" or a trailing "/."
      continue;
    }
    out += p[i];
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

int run_process(const std::vector<std::string>& argv, const fs::path& cwd, std::string& out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  // posix_spawn, not fork: a sanitizer build's fork copies the page tables of its shadow memory
  // (tens of milliseconds per child, and the generated oracle starts one per case).
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  if (!cwd.empty()) ::posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    out += "cannot run " + argv[0] + ": " + std::strerror(spawned) + "\n";
    return 127;
  }
  ::close(fds[1]);
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

namespace {

// One system call of the trace: its name, its arguments' text and its result's text.
struct traced_call {
  std::string name;
  std::string args;
  std::string result;
};

// strace -f interleaves threads: "PID call(args <unfinished ...>" and later
// "PID <... call resumed>rest) = result". Joined back into whole calls here.
std::vector<traced_call> parse_trace(std::istream& in) {
  std::vector<traced_call> calls;
  std::map<std::string, std::string> unfinished;  // by PID
  std::string line;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string pid = line.substr(0, space);
    std::string rest = line.substr(line.find_first_not_of(' ', space));
    if (rest.starts_with("<... ")) {
      const auto resumed = rest.find(" resumed>");
      if (resumed == std::string::npos) continue;
      auto it = unfinished.find(pid);
      if (it == unfinished.end()) continue;
      rest = it->second + rest.substr(resumed + 9);
      unfinished.erase(it);
    }
    constexpr std::string_view kUnfinished = " <unfinished ...>";
    if (rest.ends_with(kUnfinished)) {
      unfinished[pid] = rest.substr(0, rest.size() - kUnfinished.size());
      continue;
    }
    // "call(args) = result", strace padding short calls to its result column with blanks
    // before the '=' (a parse that missed those would drop short relative paths unseen).
    const auto open = rest.find('(');
    const auto equals = rest.rfind(" = ");
    if (open == std::string::npos || equals == std::string::npos || equals < open) continue;
    auto close = equals;
    while (close > open && rest[close] == ' ') --close;
    if (rest[close] != ')') continue;
    calls.push_back(
        {rest.substr(0, open), rest.substr(open + 1, close - open - 1), rest.substr(equals + 3)});
  }
  return calls;
}

// The first quoted string of a call's arguments, unescaped as strace escapes it; and the text
// before it (the directory descriptor of *at calls).
bool path_argument(const std::string& args, std::string& path, std::string& before) {
  const auto quote = args.find('"');
  if (quote == std::string::npos) return false;
  before = args.substr(0, quote);
  path.clear();
  for (std::size_t i = quote + 1; i < args.size(); ++i) {
    const char c = args[i];
    if (c == '"') return true;
    if (c != '\\' || i + 1 >= args.size()) {
      path += c;
      continue;
    }
    const char e = args[++i];
    switch (e) {
      case 'n':
        path += '\n';
        break;
      case 't':
        path += '\t';
        break;
      case 'x':
        if (i + 2 < args.size()) {
          path += static_cast<char>(std::stoi(args.substr(i + 1, 2), nullptr, 16));
          i += 2;
        }
        break;
      default:
        if (e >= '0' && e <= '7') {  // octal, up to three digits
          int v = 0;
          std::size_t k = i;
          for (; k < args.size() && k < i + 3 && args[k] >= '0' && args[k] <= '7'; ++k) {
            v = v * 8 + (args[k] - '0');
          }
          path += static_cast<char>(v);
          i = k - 1;
        } else {
          path += e;
        }
    }
  }
  return false;
}

bool is_open(const std::string& name) {
  return name == "open" || name == "openat" || name == "openat2" || name == "creat";
}

bool takes_dirfd(const std::string& name) {
  return name == "openat" || name == "openat2" || name == "newfstatat" || name == "fstatat64" ||
         name == "statx" || name == "faccessat" || name == "faccessat2" || name == "readlinkat" ||
         name == "name_to_handle_at" || name == "utimensat" || name == "mkdirat" ||
         name == "unlinkat";
}

}  // namespace

file_accesses trace_compile(const oracle_case& c, const fs::path& scratch, const fs::path& output) {
  fs::create_directories(scratch);
  const fs::path case_file = scratch / "case.json";
  const fs::path trace_file = scratch / "trace.txt";
  const fs::path observed_file = scratch / "observed.txt";
  {
    std::ofstream out(case_file, std::ios::binary);
    out << nlohmann::json(c).dump();
  }
  // LeakSanitizer cannot run under ptrace: a sanitizer build's oracle_compile checks no leaks
  // while traced (the same binary runs untraced elsewhere in the suite).
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options =
      "ASAN_OPTIONS=" + std::string(asan != nullptr ? asan : "") + ":detect_leaks=0";
  std::vector<std::string> argv = {"strace",
                                   "-f",
                                   "--seccomp-bpf",
                                   "-qq",
                                   "-e",
                                   "trace=%file",
                                   "-e",
                                   "signal=none",
                                   "-s",
                                   "65535",
                                   "-E",
                                   asan_options,
                                   "-o",
                                   trace_file.string(),
                                   CUCORE_ORACLE_COMPILE,
                                   "--observed",
                                   observed_file.string(),
                                   case_file.string()};
  if (!output.empty()) argv.push_back(output.string());
  file_accesses seen;
  seen.exit_status = run_process(argv, {}, seen.errors);
  // What cucore's own observation of the compile saw (the store gate's input): every access the
  // tracer sees must be in it.
  if (std::ifstream observed(observed_file); observed) {
    std::string call, found, path;
    while (observed >> call >> found && std::getline(observed >> std::ws, path)) {
      if (call == "open" && found == "1") seen.observed_read.insert(path);
      if (found == "0" && call != "getenv") seen.observed_absent.insert(path);
    }
  } else {
    seen.errors += "\noracle_compile wrote no observation";
  }
  const std::string scratch_prefix = normalized(scratch.string(), fs::current_path()) + "/";
  std::ifstream in(trace_file);
  if (!in) throw std::runtime_error("strace wrote no trace: " + seen.errors);
  for (const auto& call : parse_trace(in)) {
    std::string path;
    std::string before;
    if (!path_argument(call.args, path, before) || path.empty()) continue;
    if (takes_dirfd(call.name) && before.find("AT_FDCWD") == std::string::npos &&
        path.front() != '/') {
      continue;  // relative to a descriptor: not how NVRTC looks headers up (measured)
    }
    const std::string p = normalized(path, c.cwd);
    if (p.starts_with(scratch_prefix)) continue;  // the case file, the output
    // A shared library looked for by the dynamic loader (O_CLOEXEC) or by ThreadSanitizer's
    // dlopen interceptor (readlink of the bare name): not a header lookup.
    const std::string base = p.substr(p.rfind('/') + 1);
    if (base.starts_with("lib") && base.find(".so") != std::string::npos &&
        (call.args.find("O_CLOEXEC") != std::string::npos || call.name == "readlink")) {
      continue;
    }
    const bool failed = call.result.starts_with("-1 ");
    if (failed && (call.result.find("ENOENT") != std::string::npos ||
                   call.result.find("ENOTDIR") != std::string::npos)) {
      seen.absent.insert(p);
    } else if (!failed && is_open(call.name) &&
               call.args.find("O_DIRECTORY") == std::string::npos && fs::is_regular_file(p)) {
      seen.read.insert(p);
    }
  }
  return seen;
}

namespace {

// Restores the working directory at scope exit.
class scoped_chdir {
 public:
  explicit scoped_chdir(const fs::path& to) : from_(fs::current_path()) {
    if (!to.empty()) fs::current_path(to);
  }
  ~scoped_chdir() {
    std::error_code ec;
    fs::current_path(from_, ec);
  }
  scoped_chdir(const scoped_chdir&) = delete;
  scoped_chdir& operator=(const scoped_chdir&) = delete;

 private:
  fs::path from_;
};

}  // namespace

bool nvrtc_has_include_next() {
  static const bool supported = [] {
    std::string dir_template = (fs::temp_directory_path() / "cucore-probe-XXXXXX").string();
    if (::mkdtemp(dir_template.data()) == nullptr) {
      throw std::runtime_error("mkdtemp: " + std::string(std::strerror(errno)));
    }
    const fs::path dir = dir_template;
    oracle_case c;
    c.code =
        "#if __has_include_next(<cucore_probe_absent.h>)\n#endif\n"
        "extern \"C\" __global__ void k(int* o) { *o = 1; }\n";
    c.cwd = dir;
    c.name = (dir / "probe.cu").string();
    c.target = "ptx";
    c.toolkit_include_path = false;
    const file_accesses seen = trace_compile(c, dir / "scratch");
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (seen.exit_status != 0 && seen.exit_status != 1) {
      throw std::runtime_error("the __has_include_next probe did not run: " + seen.errors);
    }
    const bool yes = seen.exit_status == 0;
    std::printf("[ nvrtc    ] NVRTC %s: __has_include_next %s\n",
                toolkit::nvrtc_version().to_string().c_str(),
                yes ? "supported" : ("refused in #if (" + first_line(seen.errors) + ")").c_str());
    return yes;
  }();
  return supported;
}

tracked_paths tracked_by_key(const oracle_case& c) {
  const scoped_chdir in_case(c.cwd);
  program_cache_key_inputs inputs;
  inputs.code = c.code;
  inputs.options = options_of(c);
  inputs.target = target_of(c);
  inputs.name_expressions = c.name_expressions;
  const program_cache_key key = make_program_cache_key(inputs);
  tracked_paths out;
  for (const auto& field : key.explain()) {
    if (field.label != "header" && field.label != "header_absent") continue;
    const auto paren = field.payload.rfind(" (");
    const std::string path = field.payload.substr(0, paren);
    (field.label == "header" ? out.files : out.absent).insert(normalized(path, c.cwd));
  }
  out.skipped = key.includes().skipped;
  return out;
}

oracle_report compare(const oracle_case& c, const file_accesses& seen, const tracked_paths& tracked,
                      std::vector<std::string> roots) {
  for (const auto& d : c.include_path) roots.push_back(d);
  if (c.toolkit_include_path) {
    for (const auto& d : toolkit::include_directories()) roots.push_back(d);
  }
  const auto slash = c.name.rfind('/');
  roots.push_back(slash == std::string::npos ? std::string(".") : c.name.substr(0, slash + 1));
  roots.push_back(c.cwd.string());
  for (auto& r : roots) r = normalized(r, c.cwd);
  const auto in_roots = [&](const std::string& p) {
    return std::any_of(roots.begin(), roots.end(), [&](const std::string& r) {
      return p.size() > r.size() && p.compare(0, r.size(), r) == 0 &&
             (r == "/" || p[r.size()] == '/');
    });
  };
  std::set<std::string> harmless = {normalized(c.name, c.cwd)};
  for (const auto& [name, contents] : c.headers) harmless.insert(normalized(name, c.cwd));
  const auto is_harmless = [&](const std::string& p) {
    const std::string base = p.substr(p.rfind('/') + 1);
    return base == "__nv_nvrtc_builtin_header.h" || base == "__nv_name_map" ||
           harmless.count(p) != 0;
  };
  oracle_report r;
  for (const auto& p : seen.read) {
    if (!in_roots(p) || normalized(c.name, c.cwd) == p) continue;
    ++r.read;
    if (tracked.files.count(p) == 0) r.untracked_reads.push_back(p);
    if (seen.observed_read.count(p) == 0) r.unobserved.push_back("read " + p);
  }
  for (const auto& p : seen.absent) {
    if (!in_roots(p) || is_harmless(p)) continue;
    ++r.probed_absent;
    if (tracked.absent.count(p) == 0) r.untracked_absent.push_back(p);
    if (seen.observed_absent.count(p) == 0) r.unobserved.push_back("probed " + p);
  }
  r.tracked_files = tracked.files.size();
  r.tracked_absent = tracked.absent.size();
  r.ratio = r.read == 0 ? 0.0 : static_cast<double>(r.tracked_files) / static_cast<double>(r.read);
  return r;
}

std::string oracle_report::describe() const {
  std::ostringstream out;
  out << "NVRTC read " << read << " files and probed " << probed_absent
      << " absent paths; the key tracks " << tracked_files << " files and " << tracked_absent
      << " absent paths (ratio " << ratio << ")";
  std::size_t shown = 0;
  for (const auto& p : untracked_reads) {
    if (shown++ < 20) out << "\n  read, not tracked:   " << p;
  }
  for (const auto& p : untracked_absent) {
    if (shown++ < 40) out << "\n  probed, not tracked: " << p;
  }
  for (const auto& p : unobserved) {
    if (shown++ < 60) out << "\n  not seen by the store gate's observation: " << p;
  }
  return out.str();
}

}  // namespace cucore::oracle
