#pragma once
// The second layer of include tracking: a walk's manifest — every stat answer its closure rested
// on — reused while every answer stays the same, in this process and (beside a persistent cache's
// digest memo) by fresh processes (docs/cache-keys.md, "Speed: the walk's manifest").

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/checksum.hpp"
#include "key/header_memo.hpp"
#include "key/include_tracking.hpp"

namespace cucore::detail {

// What one stat of a search candidate found: a regular file with its identity, or not (absent, a
// directory, ...); a symlink is followed, and its own identity and resolved path kept (a link
// retargeted to a hard link of the same file elsewhere changes the directory its quoted includes
// search). A listing check is of a directory whose entries the walk read (the NVRTC library's,
// for its builtins libraries): `regular` then says it was a directory, `id` is the directory's
// own (adding, removing or renaming an entry changes its mtime and ctime).
struct stat_check {
  std::string path;
  bool listing = false;
  bool regular = false;
  bool link = false;
  // A FIFO or socket (through the link): NVRTC opens it and reads whatever comes, which no key
  // can name (a character device it refuses, as an absent file). Not kept in manifest files: a
  // reloaded check says false, so a special file there always means a fresh walk.
  bool special = false;
  header_identity id;       // the file's (through the link), when regular
  header_identity link_id;  // the link's own, when link
  std::string real;         // realpath(), when link
  bool same_answer(const stat_check& o) const {
    return listing == o.listing && regular == o.regular && link == o.link && special == o.special &&
           (!regular || id == o.id) && (!link || (link_id == o.link_id && real == o.real));
  }
};

// lstat first: one call for the usual regular file. `keep_path` false: for comparisons only.
stat_check probe(const std::string& path, bool keep_path = true);
// A listing check of `path` (through links: the directory a listing of the path reads).
stat_check probe_listing(const std::string& path, bool keep_path = true);

// A walk's closure with every stat answer it rested on (see track_includes).
struct walk_manifest {
  std::vector<stat_check> checks;
  std::shared_ptr<const include_closure> closure;
  // The NVRTC library directory the walk read predefined macros from (its builtins libraries:
  // checks too), when it asked for one and got one. A walk that got none assumed every macro may
  // be predefined: its closure holds whatever NVRTC compiles, so it is not recorded.
  std::string nvrtc_directory;
  // The checks by directory, for revalidation by fstatat on one descriptor per directory (a
  // path walk per directory instead of one per candidate: hundreds of candidates share a few
  // dozen toolkit directories).
  struct in_directory {
    std::string dir;  // "" for names without a directory part (the working directory)
    std::vector<std::pair<std::size_t, std::string>> names;  // check index, last component
  };
  std::vector<in_directory> by_directory;
  // Checks re-probed by path: symlinks (realpath, stat through the link), listings, and names
  // without a plain last component.
  std::vector<std::size_t> links;
};

// Splits a manifest's checks by directory.
void group_checks(walk_manifest& m);

// Whether every check of `m` answers as when it was made, and the NVRTC the walk read predefined
// macros from is the one `search` names now.
bool still_valid(const walk_manifest& m, const include_search& search);

// The path of the first check of `m` that answers otherwise now; nullopt when each answers as it
// did (one fstatat per check, on one descriptor per directory).
std::optional<std::string> first_difference(const walk_manifest& m);

// The resolution of the clock Linux stamps files with (clock_getres(CLOCK_REALTIME_COARSE): one
// kernel tick).
std::int64_t coarse_clock_resolution_ns();

// How far apart two changes of a file must be for its stamps to tell them apart: the coarse
// clock's resolution plus what the file system keeps, as `id`'s stamps show it (2 s when both are
// whole seconds; else the coarsest power of ten, up to 100 ms, that both are multiples of).
std::int64_t timestamp_granularity_ns(const header_identity& id);

// Why a compile that ran after the walk of `m` must not be stored under its key: a check answers
// otherwise now (changed), or a file's mtime or ctime is not older than the walk's start minus its
// timestamp granularity (a change after the walk could then leave every stat field as it was).
struct store_problem {
  bool changed = false;  // true: `path` answers otherwise now; false: `path` was too new
  std::string path;
  header_identity id;  // too new: the identity the walk saw
};
std::optional<store_problem> store_problem_of(const walk_manifest& m, std::int64_t walk_started_ns);

// The manifests of this process, by the walk's exact inputs (code, search, working directory).
class manifest_store {
 public:
  std::shared_ptr<const walk_manifest> find(const std::string& inputs) {
    std::lock_guard lock(mutex_);
    auto it = manifests_.find(inputs);
    return it == manifests_.end() ? nullptr : it->second;
  }
  void put(const std::string& inputs, std::shared_ptr<const walk_manifest> m) {
    std::lock_guard lock(mutex_);
    // Bounded: a process that derives keys of endless distinct programs drops old manifests (they
    // only save stats-free re-walks).
    if (manifests_.size() >= kMaxManifests && manifests_.find(inputs) == manifests_.end()) {
      manifests_.erase(manifests_.begin());
    }
    manifests_[inputs] = std::move(m);
  }

 private:
  static constexpr std::size_t kMaxManifests = 256;
  struct fast_hash {
    std::size_t operator()(const std::string& s) const noexcept {
      return static_cast<std::size_t>(
          xxh3_64(std::as_bytes(std::span<const char>(s.data(), s.size())), {}));
    }
  };
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const walk_manifest>, fast_hash> manifests_;
};

manifest_store& manifests();

// The working directory ("?" when it cannot be read).
std::string current_directory();

// Everything a walk reads besides the file system, framed (length-prefixed) so that no two
// different input sets frame alike.
std::string walk_inputs(std::string_view code, const include_search& search,
                        const std::string& cwd);

// Where the manifest of `inputs` lives beside `memo`, and the SHA-256 it is named by; nullopt
// without a build identity.
struct manifest_location {
  sha256_digest hash{};
  std::filesystem::path shard;  // MEMO.manifests/XX
  std::string name;             // the 64 hex digits
};

// nullopt without a build identity (then nothing is persisted).
std::optional<manifest_location> manifest_for(const std::filesystem::path& memo,
                                              const std::string& inputs);

// The manifest at `where`, when there is a valid one for its inputs.
std::shared_ptr<walk_manifest> load_manifest(const manifest_location& where);

// Best effort: a manifest that cannot be written costs a walk later.
void save_manifest(const manifest_location& where, const walk_manifest& m) noexcept;

}  // namespace cucore::detail
