#include "key/compiler_version_memo.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace cucore::detail {
namespace {

// One record per line, tab-separated: library, path, inode, size, mtime_ns, version.
constexpr std::string_view kHeader = "# cucore compiler versions v1";

bool storable(std::string_view text) {
  return !text.empty() && text.find_first_of("\t\n\r") == std::string_view::npos;
}

}  // namespace

compiler_version_memo::compiler_version_memo(std::filesystem::path file) : file_(std::move(file)) {}

void compiler_version_memo::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  std::ifstream in(file_);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return;  // missing or foreign: start empty
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    record r;
    std::string inode;
    std::string size;
    std::string mtime;
    if (!std::getline(fields, r.library, '\t') || !std::getline(fields, r.file.path, '\t') ||
        !std::getline(fields, inode, '\t') || !std::getline(fields, size, '\t') ||
        !std::getline(fields, mtime, '\t') || !std::getline(fields, r.version)) {
      continue;
    }
    try {
      r.file.inode = std::stoull(inode);
      r.file.size = std::stoull(size);
      r.file.mtime_ns = std::stoll(mtime);
    } catch (...) {
      continue;  // a damaged line is skipped; the probe runs again
    }
    if (storable(r.version)) records_.push_back(std::move(r));
  }
}

std::optional<std::string> compiler_version_memo::lookup(std::string_view library,
                                                         const file_identity& file) {
  std::lock_guard lock(mutex_);
  load_locked();
  for (const auto& r : records_) {
    if (r.library == library && r.file == file) return r.version;
  }
  return std::nullopt;
}

void compiler_version_memo::remember(std::string_view library, const file_identity& file,
                                     std::string_view version) noexcept {
  try {
    if (!storable(library) || !storable(file.path) || !storable(version)) return;
    std::lock_guard lock(mutex_);
    load_locked();
    std::erase_if(records_, [&](const record& r) {
      return r.library == library && r.file.path == file.path;
    });
    records_.push_back(record{std::string(library), file, std::string(version)});

    std::ostringstream text;
    text << kHeader << '\n';
    for (const auto& r : records_) {
      text << r.library << '\t' << r.file.path << '\t' << r.file.inode << '\t' << r.file.size
           << '\t' << r.file.mtime_ns << '\t' << r.version << '\n';
    }
    const std::string data = text.str();
    std::error_code ec;
    std::filesystem::create_directories(file_.parent_path(), ec);
    std::string temp = file_.string() + ".tmp-XXXXXX";
    int fd = ::mkostemp(temp.data(), O_CLOEXEC);
    if (fd < 0) return;
    // mkostemp makes it 0600; give readers what the directory gives them (a group-shared cache's
    // members read it too), never write access to the world.
    struct stat dir {};
    if (::stat(file_.parent_path().c_str(), &dir) == 0) {
      (void)::fchmod(fd, ((dir.st_mode & 0666) | 0600) & ~mode_t{S_IWOTH});
    }
    bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
    ok = (::close(fd) == 0) && ok;
    if (!ok || ::rename(temp.c_str(), file_.c_str()) != 0) ::unlink(temp.c_str());
  } catch (...) {
    // Best effort: the next process probes again.
  }
}

}  // namespace cucore::detail
