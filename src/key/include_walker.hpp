// The include walk behind include tracking (include_tracking.hpp): NVRTC's lookup of every name the
// program and its headers may include (the memo of each file's scan: header_memo.hpp; the stat
// answers a walk rested on: walk_manifest.hpp). The walk and its name lookup are in
// include_walk.cpp, the includes named through macros in include_macros.cpp. Include only from
// those and include_tracking.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "key/conditional_scan.hpp"
#include "key/header_memo.hpp"
#include "key/include_scanner.hpp"
#include "key/include_tracking.hpp"
#include "key/walk_manifest.hpp"

namespace cucore::detail {

// The directory of a path: "" for none, "/" for the root.
std::string dir_of(const std::string& path);
// DIR/NAME (NAME alone for no DIR).
std::string join_path(const std::string& dir, const std::string& name);

// One walk over a program's include closure.
class include_walker {
 public:
  include_walker(const include_search& search, header_digest_memo& memo)
      : search_(search), memo_(memo) {}

  include_closure run(std::string_view code);

  // What the walk did, for the key and its manifest.
  std::size_t hashed() const { return hashed_; }
  bool manifest_ok() const { return manifest_ok_; }
  std::vector<stat_check> take_checks() { return std::move(checks_); }
  const std::string& nvrtc_directory() const { return nvrtc_directory_; }

 private:
  // A file or in-memory header in the closure, reached by one route, with what it includes.
  struct node {
    std::string path;      // spelled path, or the in-memory name
    std::string dir;       // the directory quoted includes from it search first
    std::string real_dir;  // a symlink's target directory, searched too (which one NVRTC takes is
                           // not measured); empty for a regular file
    // The include_path index it was found in (for #include_next), -1 beside its includer (or in
    // memory), kByPath when opened by the path it was named by (an absolute #include, a
    // pre-include found as given): NVRTC's #include_next then acts as #include (traced).
    int search_index = -1;
    bool in_memory = false;
    std::shared_ptr<const scanned_file> data;
  };
  static constexpr int kByPath = -2;

  struct pending_reference {
    std::size_t node_index;
    include_reference ref;
  };

  void drain();

  // Follows the references of one node, except those in a group the preprocessor never enters
  // with what is known now (kept aside: revisit_skipped).
  void process(std::size_t index);

  // The skipped references whose group may now be entered: a header that joined since defines
  // a macro their conditions name.
  void revisit_skipped();

  void handle(const node& from, std::size_t from_index, const include_reference& ref);

  const node& node_at(std::size_t index) const { return index == SIZE_MAX ? top_ : nodes_[index]; }

  // ---- Which macros may be defined (for skipping groups never entered).

  void note_defined(const scanned_file& data);

  std::function<bool(std::string_view)> may_be_defined_fn();

  // A name may be defined unless it is not reserved for the implementation, nothing in the
  // closure or on the command line defines it, and NVRTC's built-in preamble does not either.
  bool may_be_defined(std::string_view name);

  // Every name the NVRTC builtins libraries beside the NVRTC library may #define (its built-in
  // preamble defines NULL, CUDARTAPI, va_start, ...: measured). null when they cannot be read:
  // then no name counts as undefined.
  const std::unordered_set<std::string>* builtin_macros();

  // ---- Name resolution.

  const include_header* in_memory_named(const std::string& name) const;

  // One directory of a search: DIR/NAME, then DIR/NAME.stdh when NVRTC tries that too.
  bool try_in(const std::string& dir, const std::string& name, int search_index);

  // Resolves one header name from `from` as NVRTC 13 does (measured: docs/cache-keys.md):
  // in-memory headers by the exact text first; then, for "quoted" names, the includer's directory
  // (the program's: that of options.name; an in-memory header's: that of its name, from the
  // current directory), unless no_source_include; then include_path in order. <angle> names skip
  // the includer's directory. #include_next goes on after the directory its includer was found in
  // by this route (from the start when that was not a search directory). In each directory NAME,
  // then NAME.stdh when the last component has no '.'. An absolute name is only itself. The
  // search stops at the first regular file; each candidate before it is recorded absent.
  void resolve_name(const node& from, const include_reference& ref, const std::string& name,
                    include_form form);

  // -include NAME (measured): in-memory headers; then NAME as given; then the current directory
  // and include_path in order, each DIR + "/" + NAME (an absolute NAME too) and its .stdh.
  void resolve_pre_include(const std::string& name);

  // Stats `path`; a regular file joins the closure (once per spelling), anything else is
  // recorded absent. A file already in the closure is walked again when this route continues
  // its search from another place (#include_next). Returns whether it was a regular file.
  bool try_candidate(const std::string& path, int search_index);

  void add_in_memory(const include_header& h);

  std::string absolute(const std::string& path);

  const std::string& current_directory();

  // The file's digest and references: from the memo when its identity matches, else read, hash
  // and scan (memoised when the file has settled and did not change while it was read).
  // defines_only: a library whose macro names are all that matter (no digest, no scan).
  std::shared_ptr<const scanned_file> load(const std::string& path, const header_identity& id,
                                           bool defines_only);

  // ---- Macro-named includes (include_macros.cpp).

  // Names the implementation may predefine (or a header we cannot see may define).
  static bool reserved_name(std::string_view id) { return reserved_identifier(id); }

  // The definitions of a file that joined the closure, indexed by name for expand().
  void index_definitions(const scanned_file& data);

  // Every object-like definition of `name` visible anywhere in the closure, or from -D.
  std::vector<std::string> definitions_of(const std::string& name) const;

  // Every function-like definition of `name` visible anywhere in the closure.
  std::vector<const function_macro_definition*> function_definitions_of(
      const std::string& name) const;

  // Expands the identifiers of `text` with every visible definition (object-like, and
  // function-like where a call follows); false when an identifier that may be a macro has no
  // visible definition we can use, or the expansion grows past its bounds.
  bool expand(const std::string& text, int depth, std::vector<std::string>& results) const;

  // Once any __has_include wrapper is in the closure, every call-shaped header name is a possible
  // __has_include (see wrapper_info).
  void resolve_wrapper_calls();

  void resolve_computed();

  static std::string spelled(const include_reference& ref);

  void finish_unresolved();

  // A path the walk has stat'd: whether it is a regular file, and then what it holds.
  struct known_file {
    bool regular = false;
    std::shared_ptr<const scanned_file> data;
    std::string real_dir;
  };

  const include_search& search_;
  header_digest_memo& memo_;
  node top_;  // the program text: not a file, so not in nodes_; resolves like one
  std::deque<node> nodes_;
  std::size_t next_ = 0;
  std::size_t calls_done_ = 0;
  bool calls_done_top_ = false;
  bool bare_has_include_ = false;
  std::unordered_map<std::string, known_file> seen_;
  std::unordered_set<std::string> routes_;  // path + '\n' + search index, walked
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t> spellings_;  // by device, inode
  std::set<std::string> seen_memory_;
  std::vector<pending_reference> computed_;
  std::vector<pending_reference> skipped_;   // in groups never entered, as far as is known now
  std::unordered_set<std::string> defined_;  // names the closure or the command line may define
  // Every definition in the closure by name (pointers into the nodes' shared data).
  std::unordered_map<std::string, std::vector<const std::string*>> object_definitions_;
  std::unordered_map<std::string, std::vector<const function_macro_definition*>>
      function_definitions_;
  std::size_t defined_version_ = 0;  // grows with defined_
  std::size_t skipped_version_ = 0;  // defined_version_ when skipped_ was last revisited
  bool builtins_loaded_ = false;
  std::optional<std::unordered_set<std::string>> builtins_;
  std::set<std::string> unresolved_;
  std::set<std::string> resolved_computed_;
  std::string cwd_;
  bool remembered_ = false;
  include_closure out_;
  std::size_t hashed_ = 0;
  std::vector<stat_check> checks_;
  bool manifest_ok_ = true;      // every file settled and readable: the stats tell all that matters
  std::string nvrtc_directory_;  // where the builtins libraries were listed, if they were
};

}  // namespace cucore::detail
