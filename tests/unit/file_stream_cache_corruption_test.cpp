// The directory cache's damaged entries: every damaged file is a miss, counted, pruned, never a
// crash or a wrong value; verify() finds, removes or moves aside what is not an entry; list()
// reads headers only.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "file_stream_test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // file_stream_test_support.hpp and the shared test helpers

// ---------------------------------------------------------------------------------------------
// Corruption: every damaged file is a miss, counted, pruned; never a crash or a wrong value.

struct damaged_case {
  std::string what;
  std::function<void(std::vector<std::byte>&, const detail::entry_header&)> damage;
};

std::vector<damaged_case> damage_cases() {
  std::vector<damaged_case> cases;
  for (std::size_t cut : {0, 1, 7, 8, 11, 12, 19, 20, 25}) {
    cases.push_back({"truncated to " + std::to_string(cut),
                     [cut](std::vector<std::byte>& b, const detail::entry_header&) {
                       b.resize(std::min(cut, b.size()));
                     }});
  }
  cases.push_back({"truncated in the payload", [](auto& b, const auto& h) {
                     b.resize(h.payload_offset + h.payload_length / 2);
                   }});
  cases.push_back({"last byte missing", [](auto& b, const auto&) { b.pop_back(); }});
  cases.push_back({"trailing bytes", [](auto& b, const auto&) { b.push_back(std::byte{0}); }});
  cases.push_back(
      {"zeroed", [](auto& b, const auto&) { std::fill(b.begin(), b.end(), std::byte{0}); }});
  auto flip = [](std::string what, std::function<std::size_t(const detail::entry_header&)> at) {
    return damaged_case{"bit flip in " + what,
                        [at](auto& b, const auto& h) { b[at(h)] ^= std::byte{0x10}; }};
  };
  cases.push_back(flip("magic", [](const auto&) { return 0; }));
  cases.push_back(flip("format version", [](const auto&) { return 8; }));
  cases.push_back(flip("code type", [](const auto&) { return 12; }));
  cases.push_back(flip("reserved", [](const auto&) { return 14; }));
  cases.push_back(flip("key length", [](const auto&) { return 16; }));
  cases.push_back(flip("key", [](const auto&) { return 20; }));
  cases.push_back(flip("name", [](const auto& h) { return 20 + h.key.size() + 4; }));
  cases.push_back(flip("symbol", [](const auto& h) { return h.payload_offset - 20; }));
  cases.push_back(flip("payload length", [](const auto& h) { return h.payload_offset - 16; }));
  cases.push_back(flip("checksum", [](const auto& h) { return h.payload_offset - 8; }));
  cases.push_back(flip("first payload byte", [](const auto& h) { return h.payload_offset; }));
  cases.push_back(flip("last payload byte",
                       [](const auto& h) { return h.payload_offset + h.payload_length - 1; }));
  cases.push_back({"format version 2", [](auto& b, const auto&) { b[8] = std::byte{2}; }});
  cases.push_back({"foreign file", [](auto& b, const auto&) {
                     const std::string text = "#!/bin/sh\necho not a cache entry\n";
                     b.assign(reinterpret_cast<const std::byte*>(text.data()),
                              reinterpret_cast<const std::byte*>(text.data()) + text.size());
                   }});
  return cases;
}

TEST(FileStreamCache, DamagedEntriesAreMissesAndArePruned) {
  const object_code code(code_type::cubin, std::vector<std::byte>(300, std::byte{0x42}), "damaged",
                         symbol_map{{"f<int>", "_Z1fIiEvv"}});
  for (const auto& c : damage_cases()) {
    SCOPED_TRACE(c.what);
    temp_dir dir;
    log_capture logs;
    file_stream_program_cache cache(dir.path(), fast());
    cache.put("k", code);
    const fs::path file = entry_file(dir.path(), "k");
    auto bytes = read_bytes(file);
    auto header = detail::read_entry_header(bytes);
    ASSERT_TRUE(header);
    c.damage(bytes, *header);
    write_bytes(file, bytes);
    EXPECT_FALSE(cache.get("k"));
    EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
    EXPECT_EQ(cache.stats().misses, 1u);
    EXPECT_FALSE(fs::exists(file)) << "pruned";
    EXPECT_EQ(logs.at(log_level::warning).size(), 1u);
    cache.put("k", code);
    ASSERT_TRUE(cache.get("k")) << "a fresh put works again";
    EXPECT_EQ(*cache.get("k"), code);
  }
}

// A hit reads a large entry without zero-filling its buffer and checks the checksum over the whole
// payload: one flipped byte anywhere in 256 KiB of code (first, page and 64 KiB boundaries, middle,
// last) is a miss, never stale code; the undamaged entry is a hit with the same bytes.
TEST(FileStreamCache, AFlippedByteAnywhereInALargePayloadIsAMiss) {
  std::mt19937_64 rng(9);
  std::vector<std::byte> payload((256u << 10) + 1000);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  const object_code code(code_type::cubin, payload, "large", symbol_map{{"k<1>", "_Z1kILi1EEvv"}});
  temp_dir dir;
  log_capture logs;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("k", code);
  const fs::path file = entry_file(dir.path(), "k");
  const auto good = read_bytes(file);
  auto header = detail::read_entry_header(good);
  ASSERT_TRUE(header);
  ASSERT_EQ(header->payload_length, payload.size());
  auto hit = cache.get("k");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, code);
  const std::size_t p = header->payload_offset;
  const std::size_t n = payload.size();
  std::uint64_t dropped = 0;
  for (std::size_t at :
       {p, p + 4095, p + 4096, p + (64u << 10) - 1, p + (64u << 10), p + n / 2, p + n - 1}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    auto bytes = good;
    bytes[at] ^= std::byte{0x01};
    write_bytes(file, bytes);
    EXPECT_FALSE(cache.get("k"));
    EXPECT_EQ(cache.stats().corrupt_dropped, ++dropped);
    EXPECT_FALSE(fs::exists(file)) << "pruned";
    write_bytes(file, good);
    auto again = cache.get("k");
    ASSERT_TRUE(again) << "the undamaged entry is a hit";
    EXPECT_EQ(*again, code);
  }
}

TEST(FileStreamCache, AnotherKeysEntryAtThisPathIsAMiss) {
  // The file name is a hash: a file copied (or a hash collision) onto another key's path must
  // not be served for that key; the echoed key catches it.
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("a", code_of(10, "a"));
  cache.put("b", code_of(10, "b"));
  fs::copy_file(entry_file(dir.path(), "a"), entry_file(dir.path(), "b"),
                fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.get("b"));
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);
  EXPECT_FALSE(fs::exists(entry_file(dir.path(), "b")));
  EXPECT_EQ(cache.get("a")->name(), "a");
}

TEST(FileStreamCache, VerifyFindsAndRemovesDamagedAndStrayFiles) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  for (int i = 0; i < 8; ++i)
    cache.put("k" + std::to_string(i), code_of(200, "k" + std::to_string(i)));
  // Damage: a truncation, a bit flip, a misplaced copy, a foreign file in a shard, a stray file at
  // the top of entries/, a symlink in a shard, and a directory in a shard.
  const fs::path k0 = entry_file(dir.path(), "k0");
  fs::resize_file(k0, 30);
  const fs::path k1 = entry_file(dir.path(), "k1");
  auto b1 = read_bytes(k1);
  b1[b1.size() / 2] ^= std::byte{4};
  write_bytes(k1, b1);
  fs::copy_file(entry_file(dir.path(), "k3"), entry_file(dir.path(), "k2"),
                fs::copy_options::overwrite_existing);
  write_text(k0.parent_path() / "README", "not an entry");
  write_text(dir / "entries/stray", "stray");
  write_text(dir / "outside", "outside the cache");
  fs::create_symlink(dir / "outside", k0.parent_path() / "link");
  fs::create_directory(k0.parent_path() / "nested");

  cucore::cache_verify_report report = cache.verify(false);
  EXPECT_EQ(report.ok, 5u);       // k3..k7
  EXPECT_EQ(report.corrupt, 7u);  // k0, k1, k2 (misplaced), README, stray, link, nested
  EXPECT_EQ(report.entries, 12u);
  EXPECT_EQ(report.removed, 0u);
  EXPECT_TRUE(fs::exists(k0)) << "verify(false) removes nothing";

  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 7u);
  EXPECT_EQ(report.removed, 7u) << "the directory too";
  EXPECT_EQ(report.moved_aside, 0u);
  EXPECT_EQ(cache.stats().corrupt_dropped, 7u);
  EXPECT_TRUE(fs::exists(dir / "outside")) << "the symlink was removed, not its target";
  report = cache.verify(false);
  EXPECT_EQ(report.ok, 5u);
  EXPECT_EQ(report.corrupt, 0u) << "repaired: nothing to report on the next run";
  EXPECT_TRUE(report.notes.empty());
  for (int i = 3; i < 8; ++i) EXPECT_TRUE(cache.get("k" + std::to_string(i)));
}

// A directory tree where an entry belongs (a person's mkdir, an unpacked archive, another tool):
// verify(true) removes it with everything inside, without following a symbolic link out of the
// cache, and says so; the key then works and the next verify finds nothing.
TEST(FileStreamCache, VerifyRemovesADirectoryTreeWithoutFollowingLinks) {
  temp_dir dir;
  file_stream_program_cache cache(dir / "c", fast());
  cache.put("k", code_of(10));
  const fs::path file = entry_file(dir / "c", "k");
  fs::remove(file);
  fs::create_directories(file / "a/b/c");
  write_text(file / "a/b/c/deep", "deep");
  write_text(file / "top", "top");
  ASSERT_EQ(::mkfifo((file / "a/fifo").c_str(), 0644), 0);
  fs::create_directories(dir / "outside/keep");
  write_text(dir / "outside/keep/precious", "precious");
  fs::create_directory_symlink(dir / "outside", file / "a/link-to-dir");
  fs::create_symlink(dir / "outside/keep/precious", file / "a/b/link-to-file");

  cache_verify_report report = cache.verify(false);
  EXPECT_EQ(report.corrupt, 1u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0], file.string() + " is a directory, not an entry");
  EXPECT_TRUE(fs::is_directory(file)) << "verify(false) removes nothing";

  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 1u);
  EXPECT_EQ(report.removed, 1u);
  EXPECT_EQ(report.moved_aside, 0u);
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_TRUE(
      report.notes[0].starts_with("removed " + file.string() + " (a directory, not an entry"))
      << report.notes[0];
  EXPECT_FALSE(fs::exists(fs::symlink_status(file)));
  EXPECT_EQ(testing::read_text(dir / "outside/keep/precious"), "precious")
      << "nothing outside the cache was followed";
  EXPECT_TRUE(tmp_files(dir / "c").empty()) << "removed, not left in tmp/";
  EXPECT_EQ(cache.stats().corrupt_dropped, 1u);

  cache.put("k", code_of(11));
  EXPECT_EQ(cache.get("k"), code_of(11));
  report = cache.verify(true);
  EXPECT_EQ(report.corrupt, 0u);
  EXPECT_EQ(report.ok, 1u);
  EXPECT_TRUE(report.notes.empty());
}

// What cannot be removed (here a file inside a directory its owner cannot write) is moved out of
// the key's way into tmp/, and the note says where and how to remove it; verify retries it later.
TEST(FileStreamCache, VerifyMovesAsideWhatItCannotRemove) {
  expect_as_nobody([](const fs::path& root, const fs::path& file) -> std::string {
    file_stream_program_cache cache(root, fast());
    cache.put("k", code_of(10));
    CHILD_EXPECT(fs::exists(file));
    fs::remove(file);
    fs::create_directories(file / "locked");
    write_text(file / "locked/stuck", "cannot be unlinked: its directory is not writable");
    write_text(file / "loose", "can go");
    CHILD_EXPECT(::chmod((file / "locked").c_str(), 0500) == 0);

    cache_verify_report report = cache.verify(true);
    auto notes = [&] {
      std::string all;
      for (const auto& n : report.notes) all += n + "\n";
      return all;
    };
    if (report.notes.size() != 1u) return "notes: " + notes();
    CHILD_EXPECT(report.corrupt == 1u);
    CHILD_EXPECT(report.removed == 0u);
    CHILD_EXPECT(report.moved_aside == 1u);
    const std::string& note = report.notes[0];
    CHILD_EXPECT(note.starts_with("moved " + file.string() +
                                  " (a directory, not an entry) aside to " +
                                  (root / "tmp/aside-").string()));
    CHILD_EXPECT(note.find("locked/stuck: Permission denied") != std::string::npos);
    CHILD_EXPECT(note.find("rm -rf " + (root / "tmp/aside-").string()) != std::string::npos);
    CHILD_EXPECT(!fs::exists(fs::symlink_status(file)));
    CHILD_EXPECT(cache.stats().corrupt_dropped == 1u);
    // The key works again.
    cache.put("k", code_of(11));
    CHILD_EXPECT(cache.get("k") == code_of(11));
    // The next verify has nothing corrupt, and says what is still left in tmp/.
    report = cache.verify(true);
    CHILD_EXPECT(report.corrupt == 0u);
    CHILD_EXPECT(report.notes.size() == 1u);
    CHILD_EXPECT(report.notes[0].find("set aside by an earlier repair") != std::string::npos);
    // Once it can be removed, verify removes it.
    for (const auto& p : fs::directory_iterator(root / "tmp")) {
      CHILD_EXPECT(::chmod((p.path() / "locked").c_str(), 0700) == 0);
    }
    report = cache.verify(true);
    CHILD_EXPECT(report.notes.empty());
    CHILD_EXPECT(tmp_files(root).empty());
    return "";
  });
}

TEST(FileStreamCache, ListReadsHeadersOnly) {
  temp_dir dir;
  file_stream_program_cache cache(dir.path(), fast());
  cache.put("small",
            object_code(code_type::ptx, std::vector<std::byte>(10), "s", symbol_map{{"a", "b"}}));
  // 8 MiB: listed from a prefix of the file.
  cache.put("big", code_of(8 << 20, "big"));
  // A header longer than the first read (a large symbol map), and a payload beyond it.
  symbol_map many;
  for (int i = 0; i < 3000; ++i) many["expr<" + std::to_string(i) + ">"] = std::string(40, 'm');
  cache.put("many", object_code(code_type::cubin, std::vector<std::byte>(1 << 20), "many", many));
  cache.put("damaged", code_of(10));
  fs::resize_file(entry_file(dir.path(), "damaged"), 12);
  set_times(entry_file(dir.path(), "small"), 1000);

  auto list = cache.list();
  std::map<std::string, cache_entry_info> by_name;
  for (auto& info : list) by_name[info.name] = info;
  ASSERT_EQ(by_name.size(), 3u) << "the damaged entry is not listed";
  const auto& small = by_name.at("s");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(small.key.data()), small.key.size()),
            "small");
  EXPECT_EQ(small.type, code_type::ptx);
  EXPECT_EQ(small.symbol_count, 1u);
  EXPECT_EQ(small.payload_bytes, 10u);
  EXPECT_EQ(small.stored_bytes, fs::file_size(entry_file(dir.path(), "small")));
  ASSERT_TRUE(small.last_used);
  const auto age = std::chrono::system_clock::now() - *small.last_used;
  EXPECT_GT(age, std::chrono::seconds(990));
  EXPECT_LT(age, std::chrono::seconds(1010));
  EXPECT_EQ(by_name.at("big").payload_bytes, 8u << 20);
  EXPECT_EQ(by_name.at("many").symbol_count, 3000u);
  EXPECT_EQ(by_name.at("many").payload_bytes, 1u << 20);
}

}  // namespace
}  // namespace cucore
