#pragma once
// Replacing the functions a loaded shared library imports, in that library alone: its GOT slots
// (the dynamic relocations JUMP_SLOT and GLOB_DAT naming a symbol) are pointed at replacements.
// The rest of the process keeps calling the originals.

#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

struct got_replacement {
  std::string_view symbol;  // the imported name (any version)
  void* replacement;
};

// Patches the library behind `handle` (a dlopen handle); idempotent. False, with `error` set,
// when its dynamic section cannot be read or a slot cannot be made writable (then nothing that
// library calls can be vouched for).
bool patch_imports(void* handle, const std::vector<got_replacement>& replacements,
                   std::string& error);

}  // namespace cucore::detail
