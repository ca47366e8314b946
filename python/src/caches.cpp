// The cache classes of cucore._cucore: ProgramCache (a mapping of keys to ObjectCode), its
// in-memory, SQLite, directory, Redis and tiered kinds, and open_program_cache.
#include "caches.hpp"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/open.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace cucore::python {
namespace {

[[noreturn]] void raise_key_error(nb::handle key) {
  PyErr_SetObject(PyExc_KeyError, key.ptr());
  throw nb::python_error();
}

std::optional<object_code> cache_get(program_cache& cache, nb::handle key) {
  // bytes and str keys are read in place: both are immutable, and the caller's reference keeps
  // them alive while the GIL is released. Other keys (bytearray) are copied.
  std::string copy;
  std::string_view k;
  Py_ssize_t size = 0;
  if (PyBytes_Check(key.ptr())) {
    k = std::string_view(PyBytes_AS_STRING(key.ptr()),
                         static_cast<std::size_t>(PyBytes_GET_SIZE(key.ptr())));
  } else if (PyUnicode_Check(key.ptr())) {
    const char* utf8 = PyUnicode_AsUTF8AndSize(key.ptr(), &size);
    if (utf8 == nullptr) throw nb::python_error();
    k = std::string_view(utf8, static_cast<std::size_t>(size));
  } else {
    copy = key_bytes(key);
    k = copy;
  }
  // An in-memory hit is a map lookup under a mutex that is never held across anything slow:
  // releasing the GIL would cost more than it frees.
  if (dynamic_cast<in_memory_program_cache*>(&cache) != nullptr) return cache.get(cache_key_ref(k));
  nb::gil_scoped_release release;
  return cache.get(cache_key_ref(k));
}

nb::dict stats_dict(const cache_stats& s) {
  return counts_dict({{"hits", s.hits},
                      {"misses", s.misses},
                      {"puts", s.puts},
                      {"evictions", s.evictions},
                      {"corrupt_dropped", s.corrupt_dropped},
                      {"errors", s.errors}});
}

// The cache's persistent statistics (cucore/cache/statistics.hpp) as a dict, or None.
nb::object persistent_stats_of(const program_cache& c) {
  const std::shared_ptr<cache_statistics> store = c.statistics();
  if (!store) return nb::none();
  const persistent_cache_stats p = without_gil([&] { return store->read(); });
  nb::dict d;
  d["directory"] = store->directory().string();
  d["local"] = stats_dict(p.local);
  d["remote"] = stats_dict(p.remote);
  d["compiles"] = p.compiles;
  d["compile_hits"] = p.compile_hits;
  d["compile_seconds"] = static_cast<double>(p.compile_ns) / 1e9;
  const auto saved = p.compile_time_saved();
  d["compile_seconds_saved"] =
      saved ? nb::cast(static_cast<double>(saved->count()) / 1e9) : nb::none();
  nb::dict skips;
  for (std::size_t i = 0; i < cache_skip_reason_count; ++i) {
    skips[nb::str(std::string(to_string(static_cast<cache_skip_reason>(i))).c_str())] = p.skips[i];
  }
  d["skips"] = skips;
  nb::dict verify;  // verify mode's checks (docs/verify.md)
  verify["verified"] = p.verified;
  verify["mismatches"] = p.verify_mismatches;
  d["verify"] = verify;
  d["shards"] = p.shards;
  d["shards_ignored"] = p.shards_ignored;
  return d;
}

// A positive byte or entry count, or None; ValueError otherwise (as cuda.core's caches).
template <class T>
std::optional<T> positive(const std::optional<std::int64_t>& value, const char* name) {
  if (!value) return std::nullopt;
  if (*value <= 0) {
    throw nb::value_error(
        (std::string(name) + " must be positive or None (0 would evict every write)").c_str());
  }
  return static_cast<T>(*value);
}

write_failure_policy parse_policy(const std::string& text) {
  if (text == "warn") return write_failure_policy::warn;
  if (text == "strict") return write_failure_policy::strict;
  throw invalid_argument("on_write_failure must be \"warn\" or \"strict\", got \"" + text + "\"");
}

sqlite_journal parse_journal(const std::string& text) {
  if (text == "auto") return sqlite_journal::automatic;
  if (text == "wal") return sqlite_journal::wal;
  if (text == "rollback") return sqlite_journal::rollback;
  throw invalid_argument("journal must be \"auto\", \"wal\" or \"rollback\", got \"" + text + "\"");
}

// A tier of a TieredProgramCache built from Python: the cache belongs to its Python object, which
// this keeps alive; every call goes to that object's native cache (thread-safe, so the write-behind
// thread may call it without the GIL). close() leaves the tier open: it is the Python object's.
class borrowed_cache final : public program_cache {
 public:
  explicit borrowed_cache(nb::object owner)
      : owner_(std::move(owner)), cache_(nb::cast<program_cache*>(owner_)) {}
  ~borrowed_cache() override {
    nb::gil_scoped_acquire gil;
    owner_.reset();
  }
  borrowed_cache(const borrowed_cache&) = delete;
  borrowed_cache& operator=(const borrowed_cache&) = delete;

  const nb::object& owner() const noexcept { return owner_; }

  std::optional<object_code> get(cache_key_ref key) override { return cache_->get(key); }
  void put(cache_key_ref key, const object_code& code) override { cache_->put(key, code); }
  bool erase(cache_key_ref key) override { return cache_->erase(key); }
  std::size_t size() override { return cache_->size(); }
  std::uint64_t size_bytes() override { return cache_->size_bytes(); }
  void clear() override { cache_->clear(); }
  cache_stats stats() const override { return cache_->stats(); }
  std::vector<cache_entry_info> list() override { return cache_->list(); }
  cache_verify_report verify(bool remove_bad) override { return cache_->verify(remove_bad); }
  std::size_t trim(std::uint64_t max_size_bytes) override { return cache_->trim(max_size_bytes); }
  std::string description() const override { return cache_->description(); }
  bool read_only() const noexcept override { return cache_->read_only(); }
  std::optional<std::filesystem::path> compiler_version_memo() const override {
    return cache_->compiler_version_memo();
  }

 private:
  nb::object owner_;
  program_cache* cache_;
};

std::unique_ptr<program_cache> borrow_tier(nb::handle cache, const char* which) {
  // cucore.cuda_core's wrappers hold the native cache in .native.
  nb::object native = nb::hasattr(cache, "native") ? cache.attr("native") : nb::borrow(cache);
  if (!nb::isinstance<program_cache>(native)) {
    throw nb::type_error((std::string(which) +
                          " must be a cucore ProgramCache (or a cucore.cuda_core "
                          "cache), got " +
                          nb::inst_name(cache).c_str())
                             .c_str());
  }
  return std::make_unique<borrowed_cache>(std::move(native));
}

// The Python object of a tier: the one it was built from, else the native tier (kept alive by
// the tiered cache, `self`).
nb::object tier_object(program_cache& tier, nb::handle self) {
  if (auto* borrowed = dynamic_cast<borrowed_cache*>(&tier)) return borrowed->owner();
  return nb::cast(&tier, nb::rv_policy::reference_internal, self);
}

std::chrono::milliseconds milliseconds_of(double seconds, const char* name) {
  if (!(seconds > 0)) {
    throw nb::value_error((std::string(name) + " must be a positive number of seconds").c_str());
  }
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000 + 0.5));
}

// `cache` as a Python object whose class is its concrete type, the first of Caches it is (the
// others, such as an HTTP tier alone, a pack or a read-only layer alone: ProgramCache); ownership
// passes to Python.
template <class... Caches>
nb::object owned_by_python(std::unique_ptr<program_cache> cache) {
  nb::object out;
  auto as = [&]<class Cache>(Cache* concrete) {
    if (concrete == nullptr || out.is_valid()) return;
    cache.release();
    out = nb::cast(concrete, nb::rv_policy::take_ownership);
  };
  (as(dynamic_cast<Caches*>(cache.get())), ...);
  if (!out.is_valid()) out = nb::cast(cache.release(), nb::rv_policy::take_ownership);
  return out;
}

}  // namespace

void bind_caches(nb::module_& m) {
  nb::class_<program_cache>(
      m, "ProgramCache",
      "A program cache: a mapping from keys (bytes or str; str is UTF-8) to ObjectCode.\n\n"
      "cache[key] raises KeyError on a miss; get(key) returns None. There is no `in`: a check "
      "followed by a read races with other processes; call get() and handle None.")
      .def(
          "__getitem__",
          [](program_cache& c, nb::handle key) {
            auto hit = cache_get(c, key);
            if (!hit) raise_key_error(key);
            return std::move(*hit);
          },
          nb::sig("def __getitem__(self, key: bytes | str, /) -> ObjectCode"), "key"_a)
      .def(
          "get",
          [](program_cache& c, nb::handle key, nb::object default_) -> nb::object {
            auto hit = cache_get(c, key);
            return hit ? nb::cast(std::move(*hit)) : default_;
          },
          nb::sig("def get(self, key: bytes | str, default: ObjectCode | None = None) -> "
                  "ObjectCode | None"),
          "key"_a, "default"_a = nb::none(), "The entry, or `default` on a miss.")
      .def(
          "get_bytes",
          [](program_cache& c, nb::handle key, nb::object default_) -> nb::object {
            auto hit = cache_get(c, key);
            return hit ? nb::object(to_bytes(hit->code())) : default_;
          },
          nb::sig("def get_bytes(self, key: bytes | str, default: bytes | None = None) -> bytes | "
                  "None"),
          "key"_a, "default"_a = nb::none(),
          "The entry's code as bytes (cuda.core's protocol), or `default` on a miss.")
      .def(
          "__setitem__",
          [](program_cache& c, nb::handle key, nb::handle value) {
            const std::string k = key_bytes(key);
            object_code code = object_code_from(value);
            nb::gil_scoped_release release;
            c.put(cache_key_ref(k), code);
          },
          nb::sig("def __setitem__(self, key: bytes | str, value: ObjectCode | bytes | bytearray | "
                  "memoryview, /) -> None"),
          "key"_a, "value"_a)
      .def(
          "__delitem__",
          [](program_cache& c, nb::handle key) {
            const std::string k = key_bytes(key);
            if (!without_gil([&] { return c.erase(cache_key_ref(k)); })) raise_key_error(key);
          },
          nb::sig("def __delitem__(self, key: bytes | str, /) -> None"), "key"_a)
      .def("__contains__",
           [](program_cache&, nb::handle) -> bool {
             throw nb::type_error(
                 "program caches have no `in`: a check followed by a read races with other "
                 "processes; call cache.get(key) and handle None");
           })
      .def("__len__", &program_cache::size, nb::call_guard<nb::gil_scoped_release>())
      .def("clear", &program_cache::clear, nb::call_guard<nb::gil_scoped_release>(),
           "Removes every entry.")
      .def(
          "update",
          [](program_cache& c, nb::handle items) {
            nb::object pairs =
                nb::hasattr(items, "items") ? items.attr("items")() : nb::borrow(items);
            for (nb::handle item : nb::iter(pairs)) {
              if (nb::len(item) != 2)
                throw nb::type_error("update() takes a mapping or (key, value) pairs");
              const std::string k = key_bytes(item[0]);
              object_code code = object_code_from(item[1]);
              nb::gil_scoped_release release;
              c.put(cache_key_ref(k), code);
            }
          },
          nb::sig(
              "def update(self, items: collections.abc.Mapping[bytes | str, ObjectCode | bytes] | "
              "collections.abc.Iterable[tuple[bytes | str, ObjectCode | bytes]], /) -> None"),
          "items"_a, "Bulk put from a mapping or (key, value) pairs; not transactional.")
      .def_prop_ro("size_bytes", &program_cache::size_bytes,
                   nb::call_guard<nb::gil_scoped_release>(), "Total stored bytes.")
      .def_prop_ro(
          "stats", [](const program_cache& c) { return stats_dict(c.stats()); },
          "This object's counters: hits, misses, puts, evictions, corrupt_dropped, errors.")
      .def_prop_ro(
          "persistent_stats", &persistent_stats_of,
          "The counts the cache keeps in itself, summed over every process that used it (as "
          "`cucore cache stats`): {directory, local, remote, compiles, compile_hits, "
          "compile_seconds, compile_seconds_saved, skips, shards, shards_ignored}; None for "
          "caches that keep none (in-memory, Redis alone).")
      .def(
          "zero_persistent_stats",
          [](program_cache& c) {
            const std::shared_ptr<cache_statistics> store = c.statistics();
            if (!store) throw nb::value_error("this cache keeps no persistent statistics");
            nb::gil_scoped_release release;
            store->zero();
          },
          "Resets the persistent statistics to zero (as `cucore cache stats --zero`).")
      .def("trim", &program_cache::trim, "max_size_bytes"_a,
           nb::call_guard<nb::gil_scoped_release>(),
           "Evicts least-recently-used entries down to max_size_bytes; returns how many.")
      .def(
          "verify",
          [](program_cache& c, bool remove_bad) {
            const cache_verify_report r = without_gil([&] { return c.verify(remove_bad); });
            nb::dict d = counts_dict({{"entries", r.entries},
                                      {"ok", r.ok},
                                      {"corrupt", r.corrupt},
                                      {"removed", r.removed},
                                      {"moved_aside", r.moved_aside}});
            d["notes"] = r.notes;
            return d;
          },
          "remove_bad"_a = false,
          "Checks every entry (format, checksum, key); with remove_bad, removes the damaged ones "
          "and what is not an entry (a directory, ...) where one belongs, or moves it aside. "
          "'notes': a line for each such thing and what was done.")
      .def_prop_ro("description", &program_cache::description)
      .def("__repr__",
           [](const program_cache& c) { return "<cucore cache " + c.description() + ">"; })
      .def("close", &program_cache::close, nb::call_guard<nb::gil_scoped_release>(),
           "Releases resources now (also done when the object is collected). Idempotent.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__",
          [](program_cache& c, nb::handle, nb::handle, nb::handle) {
            nb::gil_scoped_release release;
            c.close();
          },
          "exc_type"_a.none(), "exc_value"_a.none(), "traceback"_a.none());

  nb::class_<in_memory_program_cache, program_cache>(
      m, "InMemoryProgramCache",
      "An in-process LRU cache (thread-safe). A hit hands out the stored ObjectCode, no copy.")
      .def(
          "__init__",
          [](in_memory_program_cache* self, std::optional<std::int64_t> max_size_bytes,
             std::optional<std::int64_t> max_entries) {
            new (self) in_memory_program_cache(
                {.max_entries = positive<std::size_t>(max_entries, "max_entries"),
                 .max_size_bytes = positive<std::uint64_t>(max_size_bytes, "max_size_bytes")});
          },
          nb::kw_only(), "max_size_bytes"_a = nb::none(), "max_entries"_a = nb::none());

  nb::class_<sqlite_program_cache, program_cache>(
      m, "SQLiteProgramCache", "A cache in one SQLite file, shared by threads and processes.")
      .def(
          "__init__",
          [](sqlite_program_cache* self, std::filesystem::path path,
             std::optional<std::int64_t> max_size_bytes, double busy_timeout,
             const std::string& on_write_failure, const std::string& journal, bool shared) {
            sqlite_cache_options o;
            o.access = shared ? cache_access::shared : cache_access::private_to_user;
            o.max_size_bytes = positive<std::uint64_t>(max_size_bytes, "max_size_bytes");
            if (busy_timeout < 0) throw nb::value_error("busy_timeout must be >= 0 seconds");
            o.busy_timeout = std::chrono::milliseconds(static_cast<long>(busy_timeout * 1000));
            o.on_write_failure = parse_policy(on_write_failure);
            o.journal = parse_journal(journal);
            nb::gil_scoped_release release;
            new (self) sqlite_program_cache(std::move(path), o);
          },
          "path"_a, nb::kw_only(), "max_size_bytes"_a = nb::none(), "busy_timeout"_a = 5.0,
          "on_write_failure"_a = "warn", "journal"_a = "auto", "shared"_a = false)
      .def_prop_ro("path", [](const sqlite_program_cache& c) { return c.file().string(); });

  nb::class_<file_stream_program_cache, program_cache>(
      m, "FileStreamProgramCache",
      "A cache in a directory of atomically written files, shared by many processes.")
      .def(
          "__init__",
          [](file_stream_program_cache* self, std::optional<std::filesystem::path> path,
             std::optional<std::int64_t> max_size_bytes, bool fsync,
             const std::string& on_write_failure, bool shared) {
            file_stream_cache_options o;
            o.access = shared ? cache_access::shared : cache_access::private_to_user;
            o.max_size_bytes = positive<std::uint64_t>(max_size_bytes, "max_size_bytes");
            o.fsync = fsync;
            o.on_write_failure = parse_policy(on_write_failure);
            nb::gil_scoped_release release;
            new (self) file_stream_program_cache(path ? std::move(*path) : default_cache_dir(), o);
          },
          "path"_a = nb::none(), nb::kw_only(), "max_size_bytes"_a = nb::none(), "fsync"_a = true,
          "on_write_failure"_a = "warn", "shared"_a = false)
      .def_prop_ro("path", [](const file_stream_program_cache& c) { return c.root().string(); });

  nb::class_<redis_program_cache, program_cache>(
      m, "RedisProgramCache",
      "A cache on a Redis server, shared by machines (docs/cache-remote.md). Misses, not errors, "
      "while the server is down; usually the remote tier of a TieredProgramCache.")
      .def(
          "__init__",
          [](redis_program_cache* self, std::string url, std::string key_prefix,
             double connect_timeout, double command_timeout, std::optional<double> ttl,
             bool read_only) {
            redis_cache_options o;
            o.url = std::move(url);
            o.key_prefix = std::move(key_prefix);
            o.connect_timeout = milliseconds_of(connect_timeout, "connect_timeout");
            o.command_timeout = milliseconds_of(command_timeout, "command_timeout");
            if (ttl) {
              if (!(*ttl >= 1)) throw nb::value_error("ttl must be at least 1 second, or None");
              o.ttl = std::chrono::seconds(static_cast<long>(*ttl));
            }
            o.read_only = read_only;
            nb::gil_scoped_release release;
            new (self) redis_program_cache(std::move(o));
          },
          "url"_a = "redis://127.0.0.1:6379/0", nb::kw_only(),
          "key_prefix"_a = "cucore:v1:", "connect_timeout"_a = 0.5, "command_timeout"_a = 0.5,
          "ttl"_a = nb::none(), "read_only"_a = false,
          "The URL's query parameters (prefix, ttl, readonly, connect_timeout, command_timeout) "
          "override the keyword arguments; timeouts in seconds.")
      .def_prop_ro(
          "url", [](const redis_program_cache& c) { return c.url(); },
          "The URL with its password replaced by ***.")
      .def_prop_ro("key_prefix",
                   [](const redis_program_cache& c) { return c.options().key_prefix; })
      .def_prop_ro("read_only", [](const redis_program_cache& c) { return c.options().read_only; })
      .def(
          "redis_key",
          [](const redis_program_cache& c, nb::handle key) {
            return c.redis_key(cache_key_ref(key_bytes(key)));
          },
          nb::sig("def redis_key(self, key: bytes | str) -> str"), "key"_a,
          "The Redis key an entry is stored under.");

  nb::class_<tiered_program_cache, program_cache>(
      m, "TieredProgramCache",
      "A local cache in front of a remote one (docs/cache-remote.md): gets try local, then "
      "remote (a remote hit is copied into local); puts go to local, then to remote, in the "
      "background with write_behind. Remote errors count as misses. Tiers passed in stay usable "
      "on their own and stay open when this cache closes (it flushes); the tiers of one from "
      "open_program_cache close with it.")
      .def(
          "__init__",
          [](tiered_program_cache* self, nb::handle local, nb::handle remote, bool write_behind,
             std::int64_t max_pending_puts) {
            if (max_pending_puts <= 0) throw nb::value_error("max_pending_puts must be positive");
            auto local_tier = borrow_tier(local, "local");
            auto remote_tier = borrow_tier(remote, "remote");
            tiered_cache_options o;
            o.write_behind = write_behind;
            o.max_pending_puts = static_cast<std::size_t>(max_pending_puts);
            nb::gil_scoped_release release;
            new (self) tiered_program_cache(std::move(local_tier), std::move(remote_tier), o);
          },
          nb::sig("def __init__(self, local: ProgramCache, remote: ProgramCache, *, "
                  "write_behind: bool = True, max_pending_puts: int = 256) -> None"),
          "local"_a, "remote"_a, nb::kw_only(), "write_behind"_a = true, "max_pending_puts"_a = 256)
      .def_prop_ro(
          "local",
          [](nb::handle self) {
            return tier_object(nb::cast<tiered_program_cache&>(self).local(), self);
          },
          nb::sig("def local(self) -> ProgramCache"))
      .def_prop_ro(
          "remote",
          [](nb::handle self) {
            return tier_object(nb::cast<tiered_program_cache&>(self).remote(), self);
          },
          nb::sig("def remote(self) -> ProgramCache"))
      .def("flush", &tiered_program_cache::flush, nb::call_guard<nb::gil_scoped_release>(),
           "Returns once every earlier put has reached the remote tier (or failed there).")
      .def_prop_ro(
          "tier_stats",
          [](const tiered_program_cache& c) {
            const tiered_cache_stats s = c.tier_stats();
            nb::dict d = counts_dict({{"local_hits", s.local_hits},
                                      {"remote_hits", s.remote_hits},
                                      {"misses", s.misses},
                                      {"remote_errors", s.remote_errors},
                                      {"remote_puts_dropped", s.remote_puts_dropped},
                                      {"remote_puts_pending", s.remote_puts_pending}});
            d["local"] = stats_dict(s.local);
            d["remote"] = stats_dict(s.remote);
            return d;
          },
          "Per-tier counters: local_hits, remote_hits, misses, remote_errors, "
          "remote_puts_dropped, remote_puts_pending, and each tier's own stats (local, remote).");

  m.def(
      "open_program_cache",
      [](std::string_view spec) -> nb::object {
        std::unique_ptr<program_cache> cache = open_program_cache(spec);
        if (!cache) return nb::none();
        return owned_by_python<in_memory_program_cache, sqlite_program_cache,
                               file_stream_program_cache, redis_program_cache,
                               tiered_program_cache>(std::move(cache));
      },
      nb::sig("def open_program_cache(spec: str) -> InMemoryProgramCache | SQLiteProgramCache | "
              "FileStreamProgramCache | RedisProgramCache | TieredProgramCache | None"),
      "spec"_a,
      "A cache from a spec as the CLI takes it: \"memory\", \"sqlite:FILE\", \"dir:DIR\" or DIR, "
      "\"none\" (None), \"redis://...\", \"LOCAL+redis://...\" (tiered). An empty spec is the "
      "default directory ($CUCORE_REMOTE_CACHE adds a Redis tier).");
  m.def(
      "default_cache_dir", [] { return default_cache_dir().string(); },
      "$CUCORE_CACHE_DIR, else $XDG_CACHE_HOME/cucore, else ~/.cache/cucore.");
}

}  // namespace cucore::python
