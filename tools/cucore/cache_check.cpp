// cucore cache check: what is wrong with a cache, without needing it to work (docs/cli.md).
#include "cache_check.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache_spec.hpp"
#include "commands.hpp"
#include "common/default_location.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/object_code.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

namespace fs = std::filesystem;

struct finding {
  std::string what;     // "location", "open", "read", "write", "free space", a file's name
  bool ok = true;       // false: a problem (exit status 1)
  std::string message;  // what was found, and for a problem what to do
};

// An fd that closes itself.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

// What lstat says `path` is, in words.
std::string kind_of(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return "something else";
}

// The location: `path` must be a directory (directory cache) or a regular file (SQLite), or not
// exist yet under a directory that does. Returns the directory to test writing in, if any.
std::optional<fs::path> check_location(const fs::path& path, bool directory,
                                       std::vector<finding>& out) {
  const std::string want = directory ? "a directory" : "a regular file";
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    struct stat target {};
    if (::stat(path.c_str(), &target) != 0) {
      out.push_back({"location", false,
                     path.string() + " is a symbolic link to nothing (" + errno_text(errno) +
                         "): remove it, or point it at " + want});
      return std::nullopt;
    }
    st = target;
  } else if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) {
      out.push_back({"location", false, path.string() + ": " + errno_text(err)});
      return std::nullopt;
    }
    // Not there yet: made on first use, in its nearest existing ancestor.
    fs::path parent = path.parent_path();
    while (!parent.empty() && ::stat(parent.c_str(), &st) != 0) parent = parent.parent_path();
    if (parent.empty()) parent = ".";
    if (!S_ISDIR(st.st_mode)) {
      out.push_back({"location", false,
                     path.string() + " cannot be created: " + parent.string() + " is " +
                         kind_of(st) + ", not a directory; choose another cache location"});
      return std::nullopt;
    }
    out.push_back(
        {"location", true,
         path.string() + " does not exist yet (created on first use, in " + parent.string() + ")"});
    return parent;
  }
  const bool right = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  if (!right) {
    out.push_back({"location", false,
                   path.string() + " is " + kind_of(st) + ", not " + want +
                       ": remove it, or choose another cache location"});
    return std::nullopt;
  }
  out.push_back({"location", true, path.string() + " is " + want});
  return directory ? path : path.parent_path();
}

// Can a file be made and written in `dir`: a real write and fsync (permission bits do not stop
// root; a read-only or full file system does).
void check_writable(const fs::path& dir, std::vector<finding>& out) {
  const std::string name = (dir / ".cucore-check-XXXXXX").string();
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  fd_guard f{::mkostemp(buffer.data(), O_CLOEXEC)};
  if (f.fd < 0) {
    out.push_back({"writable", false,
                   "cannot create a file in " + dir.string() + ": " + errno_text(errno) +
                       ": make it writable, or choose another cache location"});
    return;
  }
  const std::string block(4096, 'c');
  const bool wrote =
      ::write(f.fd, block.data(), block.size()) == static_cast<ssize_t>(block.size()) &&
      ::fsync(f.fd) == 0;
  const int err = errno;
  ::unlink(buffer.data());
  if (!wrote) {
    out.push_back(
        {"writable", false, "cannot write a file in " + dir.string() + ": " + errno_text(err)});
    return;
  }
  out.push_back({"writable", true, dir.string() + " takes new files"});
}

void check_free_space(const fs::path& dir, std::vector<finding>& out, json& extra) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;
  const auto free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  extra["free_bytes"] = free_bytes;
  const bool enough = free_bytes >= (64u << 20);
  out.push_back({"free space", enough,
                 std::to_string(free_bytes / (1u << 20)) + " MiB free on the file system of " +
                     dir.string() + (enough ? "" : ": under 64 MiB, stores will fail")});
}

// The files the key keeps beside the cache (docs/cache-keys.md, docs/cache-directory.md): each
// must be what it should (a file or a directory, never a FIFO, device or link) and, for a private
// cache, yours.
void check_key_files(const fs::path& base, bool directory, bool shared, std::vector<finding>& out) {
  struct item {
    const char* name;
    bool is_dir;
  };
  // The digest memo and its manifests are per user where others can write the cache's directory
  // (header-digests.UID: docs/cache-keys.md, "The key's own files"): both names are looked at.
  const std::string own_memo = "header-digests." + std::to_string(::geteuid());
  const std::string own_manifests = own_memo + ".manifests";
  const item items[] = {{"compiler-versions", false},
                        {"header-digests", false},
                        {"header-digests.manifests", true},
                        {own_memo.c_str(), false},
                        {own_manifests.c_str(), true},
                        {"claims", false},
                        {"stats", true}};
  for (const auto& [name, is_dir] : items) {
    const fs::path p = directory ? base / name : fs::path(base.string() + "." + name);
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;  // made when needed
    const bool right = is_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
    std::string problem;
    if (!right) {
      problem = std::string(" is ") + kind_of(st) + ", not " +
                (is_dir ? "a directory" : "a regular file") + ": remove it (rm -rf " + p.string() +
                "); the cache makes it again";
    } else if (!shared && st.st_uid != ::geteuid()) {
      problem = " belongs to user " + std::to_string(st.st_uid) +
                ", not you: remove it, or use --shared-cache if you trust that user";
    } else if (!shared && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      problem = " is writable by others: chmod go-w " + p.string() +
                ", or use --shared-cache if you trust them";
    }
    out.push_back({p.filename().string(), problem.empty(),
                   p.string() + (problem.empty() ? " is " + kind_of(st) : problem)});
  }
  // Temporary files of the digest memo a killed process left.
  std::error_code ec;
  std::size_t leftovers = 0;
  const fs::path dir = directory ? base : base.parent_path();
  // NAME.tmp-XXXXXX of the memo (header-digests or header-digests.UID) or of compiler-versions.
  const std::string stem = directory ? "" : base.filename().string() + ".";
  const std::string prefix = stem + "header-digests";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if ((name.starts_with(prefix) || name.starts_with(stem + "compiler-versions")) &&
        name.find(".tmp-") != std::string::npos) {
      ++leftovers;
    }
  }
  if (leftovers != 0) {
    out.push_back({"leftovers", true,
                   std::to_string(leftovers) + " temporary file(s) " + prefix +
                       "*.tmp-* left by killed processes (harmless: writes, `cucore cache verify` "
                       "and `clear` remove those older than 10 minutes)"});
  }
}

// Opens the cache as a compile would and puts, reads back and erases one probe entry: every
// warning the backend logs meanwhile (it degrades to uncached rather than throw) is a problem.
// Returns false when it cannot be opened at all (`cucore run` then runs the program uncached).
bool check_backend(std::string_view spec, const arguments& args, std::vector<finding>& out,
                   std::string& description) {
  std::mutex mutex;
  std::vector<std::string> warnings;
  const log_handler previous = set_log_handler([&](log_level level, std::string_view message) {
    if (level < log_level::warning) return;
    std::lock_guard lock(mutex);
    warnings.emplace_back(message);
  });
  const auto take_warnings = [&](const char* what) {
    std::lock_guard lock(mutex);
    for (auto& w : warnings) out.push_back({what, false, std::move(w)});
    const bool any = !warnings.empty();
    warnings.clear();
    return any;
  };
  try {
    const auto cache = open_cache(spec, args, /*statistics=*/false);
    if (!cache) {
      set_log_handler(previous);
      return true;
    }
    description = cache->description();
    if (!take_warnings("open")) out.push_back({"open", true, "opens: " + description});
    const auto n = cache->size();
    if (!take_warnings("read")) {
      out.push_back({"read", true, std::to_string(n) + " entries"});
    }
    // A key no compile derives (keys are SHA-256 digests of structured records).
    const std::string key =
        "cucore cache check probe " + std::to_string(::getpid()) + " " +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto probe = object_code::from_ptx("// cucore cache check\n", "cucore-cache-check");
    cache->put(key, probe);
    const auto back = cache->get(key);
    cache->erase(key);
    const bool stored = back && back->size() == probe.size();
    if (!take_warnings("write") && !stored) {
      out.push_back({"write", false, "an entry put into the cache could not be read back"});
    } else if (stored) {
      out.push_back({"write", true, "an entry was stored, read back and removed"});
    }
  } catch (const std::exception& e) {
    take_warnings("open");
    out.push_back({"open", false, e.what()});
    set_log_handler(previous);
    return false;
  }
  set_log_handler(previous);
  return true;
}

// Whether the cache is one others may write: --shared-cache, else $CUCORE_CACHE_SHARED read as
// opening the cache reads it. A malformed value counts as no: the open check reports it.
bool shared_cache(const arguments& args) {
  if (args.has(shared_cache_option.name)) return true;
  try {
    return shared_cache_from_env().value_or(false);
  } catch (const invalid_argument&) {
    return false;
  }
}

}  // namespace

int cache_check(const arguments& args) {
  std::vector<finding> findings;
  json out = json::object();
  const std::optional<std::string> given = args.last(cache_option.name);
  std::string spec = given.value_or("");
  std::optional<cache_spec> parsed;
  try {
    parsed = parse_cache_spec(spec);
  } catch (const cache_spec_error& e) {
    findings.push_back({"spec", false, e.what()});
  }
  out["spec"] = spec;
  // The default cache's directory and where it came from, when the spec names it.
  std::optional<detail::default_cache_location> default_location;
  if (parsed && parsed->local == cache_spec::local_kind::default_directory) {
    default_location = detail::find_default_cache_location();
  }
  if (given) {
    out["source"] = "--cache";
  } else if (default_location) {
    out["source"] = std::string(default_location->source);
  } else {
    out["source"] = "default";
  }
  std::string backend = "none";
  bool opened = true;
  json extra = json::object();
  if (parsed) {
    using kind = cache_spec::local_kind;
    const bool dir = parsed->local == kind::default_directory || parsed->local == kind::directory;
    fs::path path = default_location ? default_location->path : parsed->path;
    if (!path.empty()) path = fs::absolute(path);
    backend = dir                             ? "directory"
              : parsed->local == kind::sqlite ? "sqlite"
              : parsed->local == kind::memory ? "memory"
              : parsed->remote                ? parsed->remote_backend
                                              : "none";
    if (parsed->remote && backend != parsed->remote_backend)
      backend += "+" + parsed->remote_backend;
    out["path"] = path.empty() ? json(nullptr) : json(path.string());
    if (parsed->remote) out["remote"] = *parsed->remote;
    const bool shared = shared_cache(args);
    if (dir || parsed->local == kind::sqlite) {
      if (auto where = check_location(path, dir, findings)) {
        check_writable(*where, findings);
        check_free_space(*where, findings, extra);
      }
      check_key_files(path, dir, shared, findings);
    }
    if (backend != "none") {
      std::string description;
      opened = check_backend(spec, args, findings, description);
      if (!description.empty()) out["description"] = description;
    }
  }
  out["backend"] = backend;
  bool ok = true;
  for (const auto& f : findings) ok = ok && f.ok;
  // What `cucore run` does with this cache (run_command.cpp): it never stops the program for it.
  std::string run;
  if (given && !parsed) {
    run = "refuse to start (a malformed --cache on its command line is a usage error)";
  } else if (!parsed || backend == "none" || !opened) {
    run = "run the program uncached";
  } else if (ok) {
    run = "run the program with this cache";
  } else {
    run =
        "run the program with this cache; compiles it cannot serve or store go to the real "
        "library, silently unless CUCORE_LOG is set";
  }
  if (args.has("--json")) {
    out["ok"] = ok;
    for (auto& [k, v] : extra.items()) out[k] = v;
    json list = json::array();
    for (const auto& f : findings) {
      list.push_back({{"check", f.what}, {"ok", f.ok}, {"message", f.message}});
    }
    out["checks"] = list;
    out["cucore_run"] = run;
    write_json(out);
  } else {
    std::cout << "cache: " << (spec.empty() ? "(default)" : spec) << " [" << backend << ", from "
              << out["source"].get<std::string>() << "]\n";
    for (const auto& f : findings) {
      std::cout << (f.ok ? "ok       " : "PROBLEM  ") << f.what << ": " << f.message << '\n';
    }
    std::cout << "cucore run would " << run << '\n';
    std::cout << (ok ? "no problems found" : "problems found") << '\n';
  }
  return ok ? exit_success : exit_failure;
}

}  // namespace cucore::cli
