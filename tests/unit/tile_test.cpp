// Tile code (NVRTC 13.1+) through the library: the tile_ir target, the Tile IR carried alongside a
// mixed program's PTX or cubin, cached in one entry, and the new options' flags. The library loads
// one NVRTC per process, so each test runs in a forked child that points cucore at a toolkit root
// first (this process itself never loads NVRTC): NVRTC 13.5 from
// <source>/.cache/cuda-versions/13.5/root (scripts/fetch-cuda-versions.sh), or from
// $CUCORE_CUDA_VERSIONS_DIR/13.5/root; and the default toolkit (NVRTC 13.0) for what an older
// NVRTC says.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/error.hpp"
#include "cucore/program.hpp"
#include "cucore/toolkit.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

// The NVRTC 13.5 toolkit root, or nullopt after failing the test with what to do.
std::optional<std::filesystem::path> cuda_13_5_root() {
  const char* dir = std::getenv("CUCORE_CUDA_VERSIONS_DIR");
  const std::filesystem::path versions =
      dir != nullptr && *dir != '\0'
          ? std::filesystem::path(dir)
          : std::filesystem::path(CUCORE_SOURCE_DIR) / ".cache" / "cuda-versions";
  const auto root = versions / "13.5" / "root";
  if (!std::filesystem::exists(root / "lib" / "libnvrtc.so.13")) {
    ADD_FAILURE() << "no NVRTC 13.5 toolkit root at " << root
                  << ": run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR to a "
                     "directory holding 13.5/root)";
    return std::nullopt;
  }
  return root;
}

// Runs `body` in a child whose cucore loads NVRTC from `root` only (nullopt: the default search);
// its report, "" for success, is the test's result.
void in_child(const std::optional<std::filesystem::path>& root,
              const std::function<std::string()>& body) {
  testing::child_process child([&] {
    if (root) {
      ::setenv("CUCORE_CUDA_HOME", root->c_str(), 1);
      ::setenv("CUCORE_CUDA_HOME_ONLY", "1", 1);
    }
    return body();
  });
  EXPECT_EQ(child.wait(), "");
}

// Failures found in a child, reported back as text.
struct findings {
  std::string text;
  void check(bool ok, const std::string& what) {
    if (!ok) text += what + "\n";
  }
};

bool has(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::string_view bytes_text(const object_code& c) {
  return {reinterpret_cast<const char*>(c.code().data()), c.size()};
}

// One Tile kernel (a tiled copy) and one SIMT kernel (tests/data/mixed_tile.cu).
const std::string kMixed = testing::data_file("mixed_tile.cu");

program_options tile_options() {
  program_options o;
  o.name = "mixed.cu";
  o.arch = "sm_100";
  o.std = "c++20";
  o.enable_tile = true;
  return o;
}

constexpr std::string_view kTileIrMagic("\x7fTileIR", 7);

TEST(Tile, MixedProgramCubinCarriesItsTileIr) {
  const auto root = cuda_13_5_root();
  if (!root) return;
  in_child(root, [] {
    findings f;
    f.check(toolkit::nvrtc_version() >= version{13, 5},
            "NVRTC " + toolkit::nvrtc_version().to_string() + " loaded, not 13.5");
    program p(kMixed, source_type::cxx, tile_options());
    const object_code cubin = p.compile(code_type::cubin);
    f.check(cubin.type() == code_type::cubin && cubin.size() > 0, "no cubin");
    f.check(has(bytes_text(cubin), "simt_scale"), "the cubin lacks the SIMT kernel");
    f.check(!has(bytes_text(cubin), "tile_copy"), "the cubin holds the Tile kernel");
    const auto tile = cubin.tile_ir();
    f.check(tile.has_value(), "no Tile IR alongside the cubin");
    if (!tile) return f.text;
    f.check(tile->type() == code_type::tile_ir, "the Tile IR's type is not tile_ir");
    f.check(bytes_text(*tile).starts_with(kTileIrMagic), "the Tile IR lacks its magic");
    f.check(has(bytes_text(*tile), "tile_copy"), "the Tile IR lacks the Tile kernel");
    f.check(!has(bytes_text(*tile), "simt_scale"), "the Tile IR holds the SIMT kernel");
    // The same compile to the tile_ir target gives the same Tile IR.
    const object_code alone = p.compile(code_type::tile_ir);
    f.check(alone.type() == code_type::tile_ir && !alone.tile_ir(), "tile_ir target: wrong shape");
    f.check(alone == *tile, "the tile_ir target's bytes differ from those alongside the cubin");
    // PTX holds the SIMT kernel only, and carries the Tile IR too.
    const object_code ptx = p.compile(code_type::ptx);
    f.check(has(ptx.text(), "simt_scale") && !has(ptx.text(), "tile_copy"), "PTX: wrong kernels");
    f.check(ptx.tile_ir() && *ptx.tile_ir() == *tile, "PTX: no or other Tile IR alongside");
    // Name expressions resolve for either kind of kernel.
    const std::vector<std::string> names = {"tile_copy", "simt_scale"};
    const object_code named = p.compile(code_type::cubin, names);
    f.check(named.symbol("tile_copy") == "_Z9tile_copyPfPKfl", "tile_copy's lowered name");
    f.check(named.symbol("simt_scale") == "_Z10simt_scalePfPKf", "simt_scale's lowered name");
    return f.text;
  });
}

TEST(Tile, CubinAndTileIrAreCachedTogetherAndHitWithTheUncachedBytes) {
  const auto root = cuda_13_5_root();
  if (!root) return;
  in_child(root, [] {
    findings f;
    testing::temp_dir dir;
    const object_code plain =
        program(kMixed, source_type::cxx, tile_options()).compile(code_type::cubin);
    const object_code plain_ir =
        program(kMixed, source_type::cxx, tile_options()).compile(code_type::tile_ir);
    if (!plain.tile_ir()) return std::string("no Tile IR alongside the uncached cubin");
    f.check(*plain.tile_ir() == plain_ir,
            "uncached: the Tile IR alongside differs from the target's");
    auto round = [&](program_cache& cache, const std::string& which) {
      for (const auto target : {code_type::cubin, code_type::tile_ir}) {
        const std::string what = which + " " + std::string(to_string(target)) + ": ";
        program miss(kMixed, source_type::cxx, tile_options());
        const object_code first = miss.compile(target, {}, &cache);
        f.check(miss.last_cache_outcome() == cache_outcome::miss, what + "not a miss first");
        program hit(kMixed, source_type::cxx, tile_options());
        const object_code second = hit.compile(target, {}, &cache);
        f.check(hit.last_cache_outcome() == cache_outcome::hit, what + "not a hit second");
        const object_code& expected = target == code_type::cubin ? plain : plain_ir;
        f.check(first == expected, what + "the miss's result differs from the uncached compile");
        f.check(second == expected, what + "the hit's result differs from the uncached compile");
        if (target == code_type::cubin) {
          f.check(second.tile_ir() && *second.tile_ir() == plain_ir,
                  what + "the hit has no Tile IR, or another one");
        }
      }
    };
    {
      in_memory_program_cache cache;
      round(cache, "memory");
    }
    {
      file_stream_program_cache cache(dir / "fs");
      round(cache, "directory");
    }
    {
      file_stream_program_cache reopened(dir / "fs");  // from disk, not a memo
      program p(kMixed, source_type::cxx, tile_options());
      const object_code hit = p.compile(code_type::cubin, {}, &reopened);
      f.check(p.last_cache_outcome() == cache_outcome::hit && hit == plain,
              "directory, reopened: no hit, or other bytes");
    }
    {
      sqlite_program_cache cache(dir / "c.db");
      round(cache, "sqlite");
    }
    // The keys of the two targets, and of the same options without Tile code, differ.
    program_cache_key_inputs in;
    in.code = kMixed;
    in.options = tile_options();
    in.target = code_type::cubin;
    const auto cubin_key = make_program_cache_key(in);
    in.target = code_type::tile_ir;
    const auto tile_key = make_program_cache_key(in);
    in.target = code_type::cubin;
    in.options.enable_tile.reset();
    in.options.simt_only = true;
    const auto simt_key = make_program_cache_key(in);
    f.check(cubin_key.hex() != tile_key.hex(), "cubin and tile_ir targets share a key");
    f.check(cubin_key.hex() != simt_key.hex(), "enable_tile and simt_only share a key");
    return f.text;
  });
}

TEST(Tile, OnlyAndSimtOnlyAndNotEnabledSayWhatNvrtcProduced) {
  const auto root = cuda_13_5_root();
  if (!root) return;
  in_child(root, [] {
    findings f;
    auto compile_error_of = [&](code_type target, auto&& set) -> std::string {
      program_options o = tile_options();
      set(o);
      try {
        (void)program(kMixed, source_type::cxx, o).compile(target);
      } catch (const compile_error& e) {
        return e.what();
      }
      return "(compiled)";
    };
    // tile_only: the Tile IR, and no cubin (an error naming it).
    {
      program_options o = tile_options();
      o.enable_tile.reset();
      o.tile_only = true;
      const object_code ir = program(kMixed, source_type::cxx, o).compile(code_type::tile_ir);
      f.check(bytes_text(ir).starts_with(kTileIrMagic), "tile_only: no Tile IR");
      const std::string e = compile_error_of(code_type::cubin, [](auto& x) {
        x.enable_tile.reset();
        x.tile_only = true;
      });
      f.check(has(e, "\"--tile-only\" compiled only Tile code"), "tile_only cubin: " + e);
    }
    // simt_only: the cubin without Tile IR; the tile_ir target is an error naming it.
    {
      program_options o = tile_options();
      o.enable_tile.reset();
      o.simt_only = true;
      const object_code cubin = program(kMixed, source_type::cxx, o).compile(code_type::cubin);
      f.check(cubin.size() > 0 && !cubin.tile_ir(), "simt_only: Tile IR alongside");
      const std::string e = compile_error_of(code_type::tile_ir, [](auto& x) {
        x.enable_tile.reset();
        x.simt_only = true;
      });
      f.check(has(e, "\"--simt-only\" generated no Tile code"), "simt_only tile_ir: " + e);
    }
    // No Tile option: NVRTC ignores the annotations and fails on cuda_tile.h; a program without
    // Tile code asked for Tile IR is an error saying to enable it.
    {
      program_options o = tile_options();
      o.enable_tile.reset();
      try {
        (void)program("__global__ void k(int* p) { *p = 1; }\n", source_type::cxx, o)
            .compile(code_type::tile_ir);
        f.check(false, "no Tile option: Tile IR returned");
      } catch (const compile_error& e) {
        f.check(has(e.what(), "Tile code is not enabled"), std::string("not enabled: ") + e.what());
      }
    }
    // Enabled, but no Tile function: NVRTC still makes a Tile IR (289 bytes: a module with a
    // placeholder kernel "__$dummy_kernel"), returned as it is.
    {
      program p("__global__ void k(int* p) { *p = 1; }\n", source_type::cxx, tile_options());
      const auto alongside = p.compile(code_type::cubin).tile_ir();
      f.check(alongside && bytes_text(*alongside).starts_with(kTileIrMagic) &&
                  has(bytes_text(*alongside), "dummy_kernel"),
              "no Tile function: no placeholder Tile IR alongside");
      f.check(alongside && p.compile(code_type::tile_ir) == *alongside,
              "no Tile function: the tile_ir target differs");
    }
    // default_tile makes unannotated functions Tile functions; diagnose_implicit_tile_var then
    // reports a namespace-scope pointer that cannot be __tile__.
    {
      const std::string source = std::string(kMixed) + "int* global_pointer;\n";
      program_options o = tile_options();
      o.default_tile = true;
      o.device_as_default_execution_space = true;
      const object_code cubin = program(source, source_type::cxx, o).compile(code_type::cubin);
      f.check(cubin.tile_ir().has_value(), "default_tile: no Tile IR");
      o.diagnose_implicit_tile_var = true;
      try {
        (void)program(source, source_type::cxx, o).compile(code_type::cubin);
        f.check(false, "diagnose_implicit_tile_var: compiled");
      } catch (const compile_error& e) {
        f.check(has(e.log(), "cannot be or contain a pointer"),
                "diagnose_implicit_tile_var: " + e.log());
      }
    }
    return f.text;
  });
}

constexpr const char* kReorder =
    "struct S { int a; int b; __device__ S() : b(1), a(2) {} };\n"
    "__global__ void k(int* o) { S s; o[0] = s.a + s.b; }\n";

TEST(Tile, WarningOptionsOfNvrtc13_5) {
  const auto root = cuda_13_5_root();
  if (!root) return;
  in_child(root, [] {
    findings f;
    program_options o;
    o.arch = "sm_100";
    program plain(kReorder, source_type::cxx, o);
    (void)plain.compile(code_type::cubin);
    f.check(!has(plain.log(), "will be done before"), "a reorder warning without wreorder");
    o.wreorder = true;
    program warned(kReorder, source_type::cxx, o);
    (void)warned.compile(code_type::cubin);
    f.check(has(warned.log(), "warning #1719-D"), "wreorder: no warning: " + warned.log());
    o.wreorder.reset();
    for (const std::vector<std::string>& kinds :
         {std::vector<std::string>{"reorder"},
          std::vector<std::string>{"deprecated-declarations", "reorder"}}) {
      o.warning_as_error = kinds;
      try {
        (void)program(kReorder, source_type::cxx, o).compile(code_type::cubin);
        f.check(false, "warning_as_error: compiled");
      } catch (const compile_error& e) {
        f.check(has(e.log(), "error: the initialization of member"),
                "warning_as_error: " + e.log());
      }
    }
    // NVRTC checks the kinds itself.
    o.warning_as_error = {"bogus"};
    try {
      (void)program(kReorder, source_type::cxx, o).compile(code_type::cubin);
      f.check(false, "warning_as_error bogus: compiled");
    } catch (const compile_error& e) {
      f.check(has(e.log(), "bogus is undefined for --warning-as-error"), "bogus: " + e.log());
    }
    return f.text;
  });
}

// The default toolkit's NVRTC 13.0 knows none of the new options: its own error names each, and
// the tile_ir target is refused naming the version it needs.
TEST(Tile, Nvrtc13_0RefusesTheNewOptionsByName) {
  in_child(std::nullopt, [] {
    findings f;
    if (toolkit::nvrtc_version() >= version{13, 1}) {
      return "the default toolkit's NVRTC is " + toolkit::nvrtc_version().to_string() +
             ", not 13.0: this test checks what NVRTC 13.0 says";
    }
    const std::vector<std::pair<std::function<void(program_options&)>, std::string>> cases = {
        {[](auto& o) { o.enable_tile = true; }, "--enable-tile"},
        {[](auto& o) { o.tile_only = true; }, "--tile-only"},
        {[](auto& o) { o.simt_only = true; }, "--simt-only"},
        {[](auto& o) { o.default_tile = true; }, "-default-tile"},
        {[](auto& o) { o.diagnose_implicit_tile_var = true; }, "--diagnose-implicit-tile-var"},
        {[](auto& o) { o.wreorder = true; }, "--Wreorder"},
        {[](auto& o) { o.warning_as_error = {"all-warnings"}; }, "--warning-as-error=all-warnings"},
    };
    for (const auto& [set, flag] : cases) {
      program_options o;
      o.arch = "sm_90";
      set(o);
      try {
        (void)program(kReorder, source_type::cxx, o).compile(code_type::cubin);
        f.check(false, flag + ": compiled");
      } catch (const compile_error& e) {
        f.check(has(e.log(), "unrecognized option " + flag + " found"), flag + ": " + e.log());
      }
    }
    program_options o;
    o.arch = "sm_90";
    try {
      (void)program(kReorder, source_type::cxx, o).compile(code_type::tile_ir);
      f.check(false, "tile_ir on 13.0: compiled");
    } catch (const invalid_argument& e) {
      f.check(has(e.what(), "the tile_ir target needs NVRTC 13.1 or newer"),
              std::string("tile_ir on 13.0: ") + e.what());
    }
    return f.text;
  });
}

}  // namespace
}  // namespace cucore
