// Per-program notes of the last stored key (key/program_notes.hpp).
#include "key/program_notes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <mutex>

#include "common/sha256.hpp"

namespace cucore::detail {

namespace {

std::string field(const std::vector<key_field>& fields, std::string_view label) {
  for (const auto& f : fields) {
    if (f.label == label) return f.payload;
  }
  return {};
}

// The two names a program's note goes by: "N" + its name and target, "S" + its source and target.
std::vector<std::string> note_names(const std::vector<key_field>& fields) {
  const std::string target = field(fields, "code_type") + "\n" + field(fields, "target_type");
  std::vector<std::string> out;
  for (const auto& [tag, what] :
       {std::pair{"N", field(fields, "options_name")}, std::pair{"S", field(fields, "code")}}) {
    const std::string id = std::string(tag) + "\n" + what + "\n" + target;
    const auto hex = sha256_hex(std::as_bytes(std::span<const char>(id.data(), id.size())));
    out.push_back(std::string(tag) + std::string(hex.data(), 40));
  }
  return out;
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

constexpr std::string_view kMagic = "cucore-note-1 ";

std::optional<program_note> decode(std::string text) {
  if (!text.starts_with(kMagic)) return std::nullopt;
  const auto end = text.find('\n');
  if (end == std::string::npos) return std::nullopt;
  program_note note;
  note.key_hex = text.substr(kMagic.size(), end - kMagic.size());
  note.fields = text.substr(end + 1);
  if (note.fields.empty()) return std::nullopt;
  return note;
}

}  // namespace

void record_program_note(const std::optional<std::filesystem::path>& directory,
                         std::string_view key_hex, const std::vector<key_field>& fields,
                         std::string_view encoded) noexcept {
  try {
    const auto names = note_names(fields);
    if (!directory) {
      std::lock_guard lock(memory_mutex());
      auto& notes = memory_notes();
      if (notes.size() >= kMemoryNotes) notes.clear();
      for (const auto& n : names) notes[n] = {std::string(key_hex), std::string(encoded)};
      return;
    }
    struct stat parent {};
    if (::stat(directory->c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode)) return;
    const std::filesystem::path dir = *directory / "programs";
    ::mkdir(dir.c_str(), parent.st_mode & 07777);
    // One file, by temporary name and rename; the second name a hard link to it (renamed over
    // the old one too: a reader sees a whole note or the previous one).
    const std::string text =
        std::string(kMagic) + std::string(key_hex) + "\n" + std::string(encoded);
    const std::string first = (dir / names[0]).string();
    const std::string temp = first + ".tmp-" + std::to_string(::getpid());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                          parent.st_mode & 0666);
    if (fd < 0) return;
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w <= 0) break;
      done += static_cast<std::size_t>(w);
    }
    ::close(fd);
    const std::string second = (dir / names[1]).string();
    const std::string second_temp = second + ".tmp-" + std::to_string(::getpid());
    if (done == text.size() && ::link(temp.c_str(), second_temp.c_str()) == 0) {
      if (::rename(second_temp.c_str(), second.c_str()) != 0) ::unlink(second_temp.c_str());
    }
    if (done != text.size() || ::rename(temp.c_str(), first.c_str()) != 0) ::unlink(temp.c_str());
  } catch (...) {
    // Best effort: no note, no explanation.
  }
}

std::optional<program_note> nearest_program_note(
    const std::optional<std::filesystem::path>& directory, const std::vector<key_field>& fields) {
  for (const auto& n : note_names(fields)) {
    if (!directory) {
      std::lock_guard lock(memory_mutex());
      const auto it = memory_notes().find(n);
      if (it != memory_notes().end()) return it->second;
      continue;
    }
    std::ifstream in(*directory / "programs" / n, std::ios::binary);
    if (!in) continue;
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (auto note = decode(std::move(text))) return note;
  }
  return std::nullopt;
}

}  // namespace cucore::detail
