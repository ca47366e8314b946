// Automatic precompiled headers (docs/compilation.md, "Precompiled headers"): cucore's management
// of NVRTC 13's automatic PCH for c++ compiles, on unless program_options::auto_pch is false.
//
// What NVRTC does (measured, docs/compilation.md): with --pch it precompiles the leading
// preprocessing directives of a program (its "prefix": the #include lines before the first other
// token) into a file holding an image of its PCH heap, and a later compile whose prefix and options
// match maps that image instead of parsing the headers again. NVRTC never checks whether the
// headers changed since (an edited header is compiled from the old image), crashes the process on a
// truncated file (SIGBUS), serializes its front ends across threads anyway, and an image is usable
// only where the heap sits at the address it was made at: in the process that made it.
//
// So cucore decides which image NVRTC may see. Each prefix gets its own --pch-dir, named by the
// program cache key of the prefix alone (make_program_cache_key over the prefix text, the options
// and the program name: every header the prefix can read enters it through the key's include
// tracking; NVRTC is the process's own, which images never leave). An edited, added or deleted
// header changes that key, so NVRTC never sees an image built from other contents. An image is used
// only while its file is the one NVRTC wrote (device, inode, size, times), and only if making it
// logged nothing (a compile from an image does not repeat the headers' diagnostics). Flags that
// would change the output or the log are fixed:
// --instantiate-templates-in-pch=false (true reorders symbols), --pch-messages=false,
// --pch-verbose=false. None of this enters a cache key: the output is the plain compile's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "pch/pch_prefix.hpp"
#include "program/nvrtc_services.hpp"

namespace cucore::detail {

struct nvrtc_api;

// One c++ compile's automatic PCH. Constructed before the compile (it decides: off, plain, create
// or use, and holds the heap for create and use), told the outcome after it. Never throws for
// what it finds (anything unexpected makes the compile plain, said at debug level) except
// std::bad_alloc.
class auto_pch_compile final : public nvrtc_pch_session {
 public:
  // `header_memo`: the header digest memo of the cache the compile goes through (its digests and
  // scans serve the prefix key), or nullopt (this process's memo). `extra_identity`: what else
  // tells the compile's flags apart (a compile server's worker compiling a drop-in's own option
  // list gives that list: options carry only the drop-in's reading of it).
  auto_pch_compile(const nvrtc_api& api, std::string_view code, const program_options& options,
                   code_type target, std::optional<std::filesystem::path> header_memo,
                   std::string_view extra_identity = {});
  ~auto_pch_compile() override;
  auto_pch_compile(const auto_pch_compile&) = delete;
  auto_pch_compile& operator=(const auto_pch_compile&) = delete;

  // The flags to append to NVRTC's (empty for a plain compile).
  const std::vector<std::string>& flags() const noexcept override { return flags_; }
  bool active() const noexcept { return !flags_.empty(); }
  auto_pch_status status() const noexcept override { return status_; }

  // After nvrtcCompileProgram succeeded for `prog` with flags(): what NVRTC made of the PCH. True
  // when the compile must run again without PCH (the session is then plain): NVRTC's log speaks
  // of precompiled headers, so it is not the plain compile's; or an image made under another
  // program name was used and the output or log holds that name (a name the prefix scans did not
  // see: the prefix's images are keyed by the whole name from then on).
  bool succeeded(_nvrtcProgram* prog, const std::string& log) override;
  // After it failed: true when the compile should run again without PCH (a catastrophic error,
  // such as NVRTC failing to map its PCH memory when TMPDIR is full, or a log that speaks of
  // precompiled headers); the session is then plain.
  bool failed(const std::string& log) override;
  // After the plain retry that failed() asked for succeeded: automatic PCH is turned off for the
  // process (the failure came from PCH mode, not the code).
  void retry_succeeded() override;

 private:
  void finish_plain(auto_pch_status status);
  bool retry_for_pch_diagnostics(const std::string& log);
  bool retry_for_makers_name(_nvrtcProgram* prog, const std::string& log);

  const nvrtc_api& api_;
  std::vector<std::string> flags_;
  auto_pch_status status_ = auto_pch_status::off;
  std::optional<program_cache_key> prefix_key_;  // checked before an image made is kept
  std::string identity_;                         // its hex
  std::string sighting_;  // what counts the prefix's compiles (text, flags, name)
  std::string failure_;   // the catastrophic error that made failed() ask for a retry
  std::string maker_;     // the program name whose compile made the image used, if another
  bool creating_ = false;
  std::unique_lock<std::mutex> heap_;
  program_options options_;  // for messages
};

// Test and benchmark hooks (also behind cucore::clear_auto_pch).
struct auto_pch_totals {
  std::size_t images = 0;   // images kept now
  std::uint64_t bytes = 0;  // their files' size
  std::string root;         // this process's directory ("" until the first image)
};
auto_pch_totals auto_pch_state();

// When this process makes a prefix's image. A compile server's worker is told per request: its
// requests come from many processes, and the server decides which worker makes an image and when
// (after the compile that asked, off its critical path).
enum class auto_pch_creation : std::uint8_t {
  second_sight,  // at the prefix's second compile in this process (the default)
  now,           // at this compile, whatever was seen before
  never,         // never: an image made before is used, none is made
};
void set_auto_pch_creation(auto_pch_creation when);

}  // namespace cucore::detail
