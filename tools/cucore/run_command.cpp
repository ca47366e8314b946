// cucore run -- PROGRAM ARGS...: runs an unmodified program with cucore's drop-in libraries first
// in the library search, so that its NVRTC compiles go through the program cache
// (docs/transparent-cache.md). cucore env: the same environment, printed for a shell or a container
// image.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache_spec.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "common/environment.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "dropin/run_environment.hpp"
#include "dropin_check.hpp"

#ifndef CUCORE_BUILD_DROPIN_DIR
#define CUCORE_BUILD_DROPIN_DIR ""
#endif

namespace cucore::cli {
namespace {

constexpr option_spec nvrtc_option{
    "--nvrtc", "", "PATH",
    "the real libnvrtc.so.13 the drop-in forwards to (default: the program's own)"};
constexpr option_spec no_preload_option{
    "--no-preload", "", "",
    "do not LD_PRELOAD the NVRTC drop-in (loaders that open NVRTC by path then bypass it)"};

constexpr option_spec server_option{
    "--server", "", "",
    "NVRTC misses go to the user's compile server, started on the first miss if none runs; it "
    "exits after 10 idle minutes (CUCORE_COMPILE_SERVER=on: the default, unless "
    "CUCORE_COMPILE_SERVER is set)"};
constexpr option_spec no_server_option{
    "--no-server", "", "", "NVRTC misses compile in the program (CUCORE_COMPILE_SERVER=off)"};

constexpr option_spec options[] = {cache_option,      shared_cache_option, nvrtc_option,
                                   no_preload_option, server_option,       no_server_option};

// The drop-in libraries: $CUCORE_RUN_LIBS, else beside this program (PREFIX/bin/cucore →
// PREFIX/lib*/cucore-run), else the build tree's.
std::filesystem::path dropin_directory() {
  namespace fs = std::filesystem;
  const auto has_dropins = [](const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / "libnvrtc.so.13", ec);
  };
  if (const auto chosen = env::text(env::variable::run_libs)) {
    const fs::path dir(*chosen);
    if (!has_dropins(dir)) {
      throw error("CUCORE_RUN_LIBS=\"" + std::string(*chosen) +
                  "\" has no libnvrtc.so.13: point it at the directory cucore's drop-in "
                  "libraries were installed to (PREFIX/lib/cucore-run), or unset it");
    }
    return dir;
  }
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = self.parent_path().parent_path();
    // PREFIX/lib*/cucore-run; in the Python wheel, cucore/_bin/cucore → cucore/_lib/cucore-run.
    for (const char* lib :
         {"lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "_lib"}) {
      if (has_dropins(prefix / lib / "cucore-run")) return prefix / lib / "cucore-run";
    }
  }
  if (const fs::path built(CUCORE_BUILD_DROPIN_DIR); !built.empty() && has_dropins(built)) {
    return built;
  }
  throw error(
      "cucore's drop-in libraries (libnvrtc.so.13 in a cucore-run directory) are not installed "
      "beside " +
      (ec ? std::string("this program") : self.string()) +
      ": install cucore with its drop-ins, or set CUCORE_RUN_LIBS to their directory");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The ':'-separated `list` with `first` in front and no other occurrence of it (an outer
// `cucore run` may have put it there already).
std::string prepend(const std::string& first, const std::string& list) {
  std::string out = first;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(':', begin);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(begin, end - begin);
    if (!item.empty() && item != first) out += ":" + item;
    begin = end + 1;
  }
  return out;
}

void run_note(log_level level, std::string_view message) {
  static const int threshold = dropin::log_threshold_from_environment();
  if (static_cast<int>(level) < threshold) return;
  const char* prefix = level == log_level::error     ? "error"
                       : level == log_level::warning ? "warning"
                       : level == log_level::info    ? "info"
                                                     : "debug";
  std::cerr << "cucore[" << ::getpid() << "]: " << prefix << ": " << message << "\n";
}

// Every drop-in, by soname, and its library (for the choice of major).
constexpr std::string_view dropin_sonames[] = {
    "libnvrtc.so.13", "libnvrtc.so.12", "libnvJitLink.so.13", "libnvJitLink.so.12", "libnvvm.so.4"};

// How a drop-in goes into the program's way: as built, left out, or as a copy without the names
// its real library lacks (`hide`: docs/transparent-cache.md, "Exactly the real library's API").
struct dropin_plan {
  bool left_out = false;
  std::optional<std::vector<std::string>> hide;  // set once a program's real library is read
};

// A directory for LD_LIBRARY_PATH with the drop-ins of `dir` as `plans` say (by soname, in
// dropin_sonames' order): links to the drop-ins as built and to every engine, copies without the
// names to hide, nothing for those left out. Made once per set under $XDG_RUNTIME_DIR/cucore-run
// or /tmp/cucore-run-UID (owned by this user, mode 0700; else nullopt: the caller then leaves every
// drop-in out), named by the drop-ins' identity (a rebuilt or upgraded cucore gets a new one) and
// the plans, and reused by later runs. A copy that cannot be made leaves its drop-in out (`plans`
// updated, the reason in `notes`).
std::optional<std::string> planned_dropin_directory(const std::string& dir,
                                                    std::vector<dropin_plan>& plans,
                                                    std::vector<std::string>& notes) {
  namespace fs = std::filesystem;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = runtime != nullptr && *runtime == '/'
                               ? std::string(runtime) + "/cucore-run"
                               : "/tmp/cucore-run-" + std::to_string(::getuid());
  ::mkdir(base.c_str(), 0700);
  struct stat st {};
  if (::lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() ||
      (st.st_mode & 077) != 0) {
    return std::nullopt;
  }
  std::string identity = dir;
  for (std::size_t i = 0; i < std::size(dropin_sonames); ++i) {
    const std::string shim = dir + "/" + std::string(dropin_sonames[i]);
    struct stat file {};
    if (::stat(shim.c_str(), &file) == 0) {
      identity += "|" + std::to_string(file.st_ino) + ":" + std::to_string(file.st_size) + ":" +
                  std::to_string(file.st_mtim.tv_sec) + "." + std::to_string(file.st_mtim.tv_nsec);
    }
    identity += plans[i].left_out ? "|out" : "|in";
    if (plans[i].hide) {
      for (const auto& name : *plans[i].hide) identity += "," + name;
    }
  }
  char name[32];
  std::snprintf(name, sizeof name, "%016zx", std::hash<std::string>{}(identity));
  // BASE/HASH/cucore-run: the drop-ins' directory keeps its name wherever it is (a program or a
  // test telling a drop-in from the real library by it still can).
  const std::string out = base + "/" + name + "/cucore-run";
  ::mkdir((base + "/" + name).c_str(), 0700);
  ::mkdir(out.c_str(), 0700);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    const std::string target = out + "/" + file;
    const auto* soname = std::find(std::begin(dropin_sonames), std::end(dropin_sonames), file);
    if (soname != std::end(dropin_sonames)) {
      dropin_plan& plan = plans[static_cast<std::size_t>(soname - std::begin(dropin_sonames))];
      if (plan.left_out) continue;
      if (plan.hide && !plan.hide->empty()) {
        if (::access(target.c_str(), F_OK) == 0) continue;  // an earlier run's copy
        const std::string why = write_without_exports(entry.path().string(), target, *plan.hide);
        if (!why.empty()) {
          plan.left_out = true;
          notes.push_back("leaving out the drop-in " + file + ": " + why);
        }
        continue;
      }
    }
    if (::symlink(entry.path().c_str(), target.c_str()) != 0 && errno != EEXIST)
      return std::nullopt;
  }
  return out;
}

// The variables `cucore run` sets, in order.
// `cache_spec`: the CUCORE_RUN_CACHE to set; nullopt: cache_spec_from(args). `programs`: the
// program `cucore run` starts (for `cucore env`, python3 and any program): the drop-ins are
// checked against the libraries each would load. A drop-in that lacks a name its real library
// exports (a release newer than the drop-ins) is left out, so the program runs uncached for that
// library rather than fail to load; of NVRTC and nvJitLink only the major the program would load is
// preloaded (a preloaded libnvrtc.so.13 would capture cuda.pathfinder's RTLD_NOLOAD probe in a CUDA
// 12 program).
std::vector<std::pair<std::string, std::string>> run_environment(
    const arguments& args, const std::optional<std::string>& cache_spec = std::nullopt,
    const std::vector<std::string>& programs = {}) {
  std::string dir = dropin_directory().string();
  std::vector<std::pair<std::string, std::string>> vars;
  // The program's own library path, for the drop-ins' search for the real libraries (kept from an
  // outer `cucore run`).
  const std::string original(dropin::program_library_path().value_or(""));
  std::vector<dropin_plan> plans(std::size(dropin_sonames));
  int nvrtc_major = 13, nvjitlink_major = 13;
  const auto leave_out = [&](std::size_t i, const std::string& why) {
    if (plans[i].left_out) return;
    plans[i].left_out = true;
    run_note(log_level::warning, "leaving out the drop-in " + std::string(dropin_sonames[i]) +
                                     ": " + why + "; the program runs uncached for it");
  };
  // The first program decides the majors. A drop-in is left out when any program's library of its
  // soname exports a name it lacks, or when two programs' libraries export different names;
  // otherwise it goes in exporting what that library exports (--nvrtc: that file's).
  std::optional<std::pair<std::string, std::string>> found[std::size(dropin_sonames)];
  const auto chosen_nvrtc = args.last(nvrtc_option.name);
  for (std::size_t p = 0; p < programs.size(); ++p) {
    const program_libraries libs(programs[p], dir, original);
    for (std::size_t i = 0; i < std::size(dropin_sonames); ++i) {
      const auto soname = dropin_sonames[i];
      auto where = libs.find(soname);
      if (chosen_nvrtc && soname.starts_with("libnvrtc.so.") &&
          chosen_nvrtc->find(std::string(".so.") + std::string(soname.substr(12))) !=
              std::string::npos) {
        where = std::pair(*chosen_nvrtc, std::string("--nvrtc"));
      }
      if (p == 0) found[i] = where;
      if (!where) continue;
      const auto exports = elf_exports(where->first);
      if (!exports) continue;
      const auto missing = missing_exports(soname, *exports);
      if (!missing.empty()) {
        leave_out(i,
                  "the program's " + where->first + " (" + where->second + ") exports " +
                      missing.front() +
                      (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more"
                                          : std::string()) +
                      ", which the drop-in lacks (a newer release than this cucore knows)");
        continue;
      }
      auto extra = extra_exports(soname, *exports);
      if (!plans[i].hide) {
        plans[i].hide = std::move(extra);
      } else if (*plans[i].hide != extra) {
        leave_out(i, where->first + " (" + where->second +
                         ") exports other names than the library another program would load");
      }
    }
  }
  const auto is_left_out = [&](std::string_view soname) {
    const auto* at = std::find(std::begin(dropin_sonames), std::end(dropin_sonames), soname);
    return at != std::end(dropin_sonames) &&
           plans[static_cast<std::size_t>(at - std::begin(dropin_sonames))].left_out;
  };
  if (!programs.empty()) {
    // The major the program would load: a wheel in its site-packages before the loader's
    // search before $CUDA_PATH/$CUDA_HOME; 13 before 12 at the same step (cuda.pathfinder).
    const auto rank = [](const auto& f) {
      if (!f) return 9;
      return f->second.starts_with("NVIDIA") ? 0 : f->second.starts_with("$CUDA") ? 2 : 1;
    };
    nvrtc_major = rank(found[1]) < rank(found[0]) ? 12 : 13;
    nvjitlink_major = rank(found[3]) < rank(found[2]) ? 12 : 13;
    const bool as_built = std::none_of(plans.begin(), plans.end(), [](const dropin_plan& plan) {
      return plan.left_out || (plan.hide && !plan.hide->empty());
    });
    if (!as_built) {
      std::vector<std::string> notes;
      if (auto planned = planned_dropin_directory(dir, plans, notes)) {
        dir = *planned;
        for (const auto& note : notes) run_note(log_level::warning, note);
      } else {
        run_note(log_level::warning,
                 "cannot make a directory for the drop-ins that fit the program's libraries: "
                 "the program runs without cucore run's drop-ins");
        for (auto& plan : plans) plan.left_out = true;
        dir.clear();
      }
    }
  }
  vars.emplace_back("CUCORE_RUN_LD_LIBRARY_PATH", original);
  vars.emplace_back("LD_LIBRARY_PATH", dir.empty() ? env_or_empty("LD_LIBRARY_PATH")
                                                   : prepend(dir, env_or_empty("LD_LIBRARY_PATH")));
  if (!args.has(no_preload_option.name)) {
    // The drop-ins of the majors the program loads: each loads its real library only when the
    // program first calls it.
    std::string preload = env_or_empty("LD_PRELOAD");
    const std::string nvjitlink = "libnvJitLink.so." + std::to_string(nvjitlink_major);
    const std::string nvrtc = "libnvrtc.so." + std::to_string(nvrtc_major);
    for (const std::string& name : {std::string("libnvvm.so.4"), nvjitlink, nvrtc}) {
      std::error_code ec;
      if (dir.empty() || is_left_out(name)) continue;
      if (std::filesystem::is_regular_file(dir + "/" + name, ec)) {
        preload = prepend(dir + "/" + name, preload);
      }
    }
    vars.emplace_back("LD_PRELOAD", preload);
  }
  const std::string spec = cache_spec ? *cache_spec : cache_spec_from(args);
  if (!spec.empty()) vars.emplace_back("CUCORE_RUN_CACHE", spec);
  if (args.has(shared_cache_option.name)) vars.emplace_back("CUCORE_CACHE_SHARED", "1");
  if (args.has(server_option.name) && args.has(no_server_option.name)) {
    throw usage_error("--server and --no-server: give one");
  }
  // Misses on every core with no flag: the user's server, started on the first miss and gone
  // after its idle time (sccache's convention; docs/transparent-cache.md, "Misses through the
  // compile server"). A CUCORE_COMPILE_SERVER the user set is theirs to keep.
  if (args.has(server_option.name)) {
    vars.emplace_back("CUCORE_COMPILE_SERVER", "on");
  } else if (args.has(no_server_option.name)) {
    vars.emplace_back("CUCORE_COMPILE_SERVER", "off");
  } else if (!env::text(env::variable::compile_server)) {
    vars.emplace_back("CUCORE_COMPILE_SERVER", "on");
  }
  // A drop-in that starts the server (CUCORE_COMPILE_SERVER=on) runs this very cucore.
  if (!env::text(env::variable::server_program)) {
    std::error_code ec;
    const auto self = std::filesystem::canonical("/proc/self/exe", ec);
    if (!ec) vars.emplace_back("CUCORE_SERVER_PROGRAM", self.string());
  }
  if (auto nvrtc = args.last(nvrtc_option.name)) {
    std::error_code ec;
    const auto path = std::filesystem::absolute(*nvrtc, ec);
    if (ec || !std::filesystem::is_regular_file(path, ec)) {
      throw usage_error("--nvrtc " + *nvrtc + ": no such file (give the real libnvrtc.so.13)");
    }
    // The .so.12 drop-in reads CUCORE_RUN_NVRTC12: the file serves the drop-in of its soname.
    const bool twelve = path.filename().string().find(".so.12") != std::string::npos;
    vars.emplace_back(twelve ? "CUCORE_RUN_NVRTC12" : "CUCORE_RUN_NVRTC", path.string());
  }
  return vars;
}

// `cucore run` makes the program's run no worse than without it: a cache that cannot be opened
// (a file where its directory belongs, a dangling link, no permission, a full disk, a refused
// owner, a damaged SQLite file, a malformed $CUCORE_REMOTE_CACHE) runs the program uncached, with
// nothing on stderr unless CUCORE_LOG asks, exactly as the drop-ins do inside it. Only a malformed
// --cache SPEC typed on this command line stops before the program (a usage error): that is the
// user's own typo, and running uncached would hide it. Returns the spec to hand the drop-ins:
// "none" when the cache cannot be opened here (they would fail the same way, once per process).
std::string usable_cache_spec(const arguments& args) {
  if (args.has(cache_option.name)) {
    const std::string spec = cache_spec_from(args);  // a usage error when malformed
    if (is_no_cache(spec)) return spec;
  }
  const std::string spec = args.last(cache_option.name).value_or("");
  // cucore's own warnings (the cache's, while opening it) follow CUCORE_LOG here, as in the
  // drop-ins.
  const log_handler previous =
      set_log_handler([](log_level level, std::string_view message) { run_note(level, message); });
  std::string usable = spec;
  try {
    auto cache = open_cache(spec, args, /*statistics=*/false);
    if (cache) run_note(log_level::debug, "cache: " + cache->description());
  } catch (const std::exception& e) {
    run_note(log_level::warning,
             std::string("cannot open the program cache; running the program uncached "
                         "(`cucore cache check` says why): ") +
                 e.what());
    usable = "none";
  } catch (...) {
    usable = "none";
  }
  set_log_handler(previous);
  return usable;
}

// `cucore env`: the cache must open, with a message the user sees (the environment is for later
// runs, and printing it is no program's run).
void check_cache(const arguments& args) {
  const std::string spec = cache_spec_from(args);
  if (is_no_cache(spec)) return;
  auto cache = open_cache(spec, args, /*statistics=*/false);
  (void)cache;
}

std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

int run_program(const arguments& args, std::span<const std::string> program) {
  if (program.empty()) {
    throw usage_error("cucore run needs a program: cucore run [options] -- PROGRAM [ARGS...]");
  }
  if (!args.positionals().empty()) {
    throw usage_error("unexpected \"" + args.positionals().front() +
                      "\" before --: write cucore run [options] -- PROGRAM [ARGS...]");
  }
  const std::string spec = usable_cache_spec(args);
  for (const auto& [name, value] : run_environment(args, spec, {program.front()})) {
    ::setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  }
  std::vector<char*> argv;
  for (const auto& a : program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::cerr << "error: cannot run \"" << program.front() << "\": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;
}

int run_run(const arguments&) {
  throw usage_error("cucore run needs -- before the program: cucore run [options] -- PROGRAM");
}

int run_env(const arguments& args) {
  if (!args.positionals().empty()) {
    throw usage_error("cucore env takes no arguments (unexpected \"" + args.positionals().front() +
                      "\")");
  }
  check_cache(args);
  // No program to look at: the check `cucore run` makes, for the programs a shell of this
  // environment is likeliest to run — the `python3` on PATH (cuda.pathfinder's order, which also
  // decides the NVRTC/nvJitLink major preloaded) and any program (the loader's search by soname).
  // A drop-in either would find a newer library for is left out.
  for (const auto& [name, value] : run_environment(args, std::nullopt, {"python3", "/bin/sh"})) {
    std::cout << "export " << name << "=" << shell_quoted(value) << "\n";
  }
  return exit_success;
}

constexpr std::string_view run_description =
    "Runs PROGRAM with ARGS, unchanged, with cucore's drop-in libnvrtc.so.13, libnvJitLink.so.13\n"
    "and libnvvm.so.4 first in the library search: LD_LIBRARY_PATH for programs that load them\n"
    "by name, LD_PRELOAD for loaders that reuse a library already loaded (cuda.core's\n"
    "cuda.pathfinder). Every nvrtcCompileProgram, nvJitLinkComplete and nvvmCompileProgram the\n"
    "program makes is answered from the program cache when it can be: for NVRTC the same key as\n"
    "`cucore compile` (source, program name, in-memory headers, every option, the headers it can\n"
    "read from disk, the real library's identity), the whole result stored (PTX, CUBIN, LTO-IR,\n"
    "OptiX IR, the log, lowered names). Options with side effects and inputs the key cannot see\n"
    "go to the real library, as does any failure of the cache. The real library is the one the\n"
    "program would have loaded (its venv's NVIDIA wheel, its LD_LIBRARY_PATH and run paths,\n"
    "$CUDA_PATH/$CUDA_HOME; CUCORE_LOG=debug names it), or --nvrtc PATH (CUCORE_RUN_NVJITLINK,\n"
    "CUCORE_RUN_NVVM). Nothing is printed unless CUCORE_LOG=warning|info|debug. `cucore cache\n"
    "stats` counts the hits. See docs/transparent-cache.md.\n"
    "\n"
    "NVRTC misses go to the user's compile server when one runs (docs/compile-server.md): the\n"
    "program's threads then compile in parallel, and its later processes start from the\n"
    "precompiled headers its earlier ones made. --server starts one if none runs; --no-server\n"
    "compiles in the program.\n"
    "\n" CUCORE_CLI_CACHE_SPEC_HELP
    "\n"
    "\n"
    "A cache that cannot be opened or used (a file where its directory belongs, no permission,\n"
    "a full disk, a damaged SQLite file, a Redis server that is down, a malformed\n"
    "$CUCORE_REMOTE_CACHE) never stops the program: it runs uncached, silently unless\n"
    "CUCORE_LOG is set. `cucore cache check` says what is wrong with a cache.\n"
    "\n"
    "Exit status: PROGRAM's; 127 when it cannot be found, 126 when it cannot be run; 1 when the\n"
    "drop-in libraries cannot be found; 2 bad command line (a malformed --cache SPEC included).";

constexpr std::string_view env_description =
    "Prints, as shell `export` lines, the environment `cucore run` gives a program (the same\n"
    "options): for `eval \"$(cucore env)\"` in a shell, or ENV lines of a container image. The\n"
    "drop-ins are checked as `cucore run` checks them, for the python3 on PATH and for any\n"
    "program the loader's search serves: one whose real library is newer is left out.\n"
    "\n" CUCORE_CLI_CACHE_SPEC_HELP;

}  // namespace

const command run_command{
    "run",
    "run [--cache SPEC] [--nvrtc PATH] [--no-preload] [--server|--no-server] -- PROGRAM "
    "[ARGS...]",
    "run a program with its NVRTC, nvJitLink and libNVVM compiles cached (drop-ins)",
    run_description,
    options,
    run_run,
    nullptr,
    run_program,
};

const command env_command{
    "env",
    "env [--cache SPEC] [--nvrtc PATH] [--no-preload] [--server|--no-server]",
    "print the environment `cucore run` sets",
    env_description,
    options,
    run_env,
};

}  // namespace cucore::cli
