// Per-program notes of the last stored key (cache/program_notes.hpp).
#include "cache/program_notes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "cache/posix_file.hpp"

namespace cucore::detail {

namespace {

// A note lives in one of 256 slots per kind (the identity's first two digits): the directory
// stays bounded (512 names, one file each or a link), and a slot another program took answers
// nothing (the identity is checked on reading).
std::string slot_name(char tag, const std::string& identity) {
  return std::string(1, tag) + identity.substr(0, 2);
}

// Notes of caches without a directory (in memory), bounded.
std::mutex& memory_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, program_note>& memory_notes() {
  static std::map<std::string, program_note> notes;
  return notes;
}
constexpr std::size_t kMemoryNotes = 4096;

constexpr std::string_view kMagic = "cucore-note-2 ";

// "cucore-note-2 KEY NAME_ID SOURCE_ID\n" then the fields.
struct stored_note {
  program_note note;
  std::string by_name, by_source;
};

std::optional<stored_note> decode(std::string text) {
  if (!text.starts_with(kMagic)) return std::nullopt;
  const auto end = text.find('\n');
  if (end == std::string::npos) return std::nullopt;
  const std::string head = text.substr(kMagic.size(), end - kMagic.size());
  const auto a = head.find(' ');
  const auto b = a == std::string::npos ? a : head.find(' ', a + 1);
  if (b == std::string::npos) return std::nullopt;
  stored_note out;
  out.note.key_hex = head.substr(0, a);
  out.by_name = head.substr(a + 1, b - a - 1);
  out.by_source = head.substr(b + 1);
  out.note.fields = text.substr(end + 1);
  if (out.note.fields.empty()) return std::nullopt;
  return out;
}

}  // namespace

void record_program_note(const std::optional<std::filesystem::path>& directory,
                         std::string_view key_hex, const program_note_identity& id,
                         std::string_view encoded) noexcept {
  try {
    if (!directory) {
      std::lock_guard lock(memory_mutex());
      auto& notes = memory_notes();
      if (notes.size() >= kMemoryNotes) notes.clear();
      for (const auto& n : {"N" + id.by_name, "S" + id.by_source}) {
        notes[n] = {std::string(key_hex), std::string(encoded)};
      }
      return;
    }
    struct stat parent {};
    if (::stat(directory->c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode)) return;
    const std::filesystem::path dir = *directory / "programs";
    // The statistics directory's permissions, not the umask's (a cache shared by a group).
    if (::mkdir(dir.c_str(), 0700) == 0) ::chmod(dir.c_str(), parent.st_mode & 07777);
    // One file, by temporary name and rename; the second name a hard link to it (renamed over
    // the old one too: a reader sees a whole note or the previous one).
    const std::string text = std::string(kMagic) + std::string(key_hex) + " " + id.by_name + " " +
                             id.by_source + "\n" + std::string(encoded);
    const std::string first = (dir / slot_name('N', id.by_name)).string();
    const std::string temp = first + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                          parent.st_mode & 0666);
    if (fd < 0) return;
    ::fchmod(fd, parent.st_mode & 0666);
    const bool written =
        !posix::write_fully(fd, std::as_bytes(std::span<const char>(text.data(), text.size())));
    ::close(fd);
    const std::string second = (dir / slot_name('S', id.by_source)).string();
    const std::string second_temp = second + ".tmp-" + std::to_string(::getpid());
    if (written && ::link(temp.c_str(), second_temp.c_str()) == 0) {
      if (::rename(second_temp.c_str(), second.c_str()) != 0) ::unlink(second_temp.c_str());
    }
    if (!written || ::rename(temp.c_str(), first.c_str()) != 0) ::unlink(temp.c_str());
  } catch (...) {
    // Best effort: no note, no explanation.
  }
}

std::optional<program_note> nearest_program_note(
    const std::optional<std::filesystem::path>& directory, const program_note_identity& id) {
  for (const char tag : {'N', 'S'}) {
    const std::string& identity = tag == 'N' ? id.by_name : id.by_source;
    if (!directory) {
      std::lock_guard lock(memory_mutex());
      const auto it = memory_notes().find(std::string(1, tag) + identity);
      if (it != memory_notes().end()) return it->second;
      continue;
    }
    std::ifstream in(*directory / "programs" / slot_name(tag, identity), std::ios::binary);
    if (!in) continue;
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto stored = decode(std::move(text));
    if (stored && (tag == 'N' ? stored->by_name : stored->by_source) == identity) {
      return std::move(stored->note);
    }
  }
  return std::nullopt;
}

std::vector<program_note> all_program_notes(const std::optional<std::filesystem::path>& directory) {
  std::map<std::string, program_note> by_key;
  if (!directory) {
    std::lock_guard lock(memory_mutex());
    for (const auto& [slot, note] : memory_notes()) by_key.emplace(note.key_hex, note);
  } else {
    std::error_code ec;
    for (const auto& file : std::filesystem::directory_iterator(*directory / "programs", ec)) {
      const std::string name = file.path().filename().string();
      // Slots only (N or S and two hex digits): no temporary files, nothing else.
      if (name.size() != 3 || (name[0] != 'N' && name[0] != 'S')) continue;
      std::error_code type_ec;
      if (file.is_symlink(type_ec) || !file.is_regular_file(type_ec)) continue;
      std::ifstream in(file.path(), std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), {});
      if (auto stored = decode(std::move(text))) {
        by_key.emplace(stored->note.key_hex, std::move(stored->note));
      }
    }
  }
  std::vector<program_note> out;
  out.reserve(by_key.size());
  for (auto& [key, note] : by_key) out.push_back(std::move(note));
  return out;
}

}  // namespace cucore::detail
