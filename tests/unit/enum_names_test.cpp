// The name tables behind cucore's to_string functions (common/enum_names.hpp): what the table and
// its checks do, and that each public to_string names every value of its enum apart.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/enum_names.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/graph/definition.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"

namespace cucore {
namespace {

enum class colour { red, green, blue };
enum class gappy { a = 0, b = 2 };

constexpr auto kColourNames = detail::name_each<colour::blue>("red", "green", "blue");

TEST(EnumNames, NamesEachValueAndFindsItBack) {
  EXPECT_EQ(kColourNames(colour::green), "green");
  EXPECT_EQ(kColourNames.find("blue"), colour::blue);
  EXPECT_EQ(kColourNames.find("Blue"), std::nullopt);  // exact: callers fold case themselves
  EXPECT_EQ(kColourNames(static_cast<colour>(7)), "unknown");
  EXPECT_EQ(kColourNames(static_cast<colour>(7), "other"), "other");
}

TEST(EnumNames, KnowsWhichValuesAreNamed) {
  // What name_each's static_asserts rest on, on this compiler.
  static_assert(detail::is_named_value<colour::red>());
  static_assert(!detail::is_named_value<static_cast<colour>(3)>());
  static_assert(!detail::is_named_value<static_cast<gappy>(1)>());
  static_assert(detail::is_named_value<gappy::b>());
  SUCCEED();
}

// Every value 0..last named, none "unknown", no two alike.
template <class Enum>
void expect_distinct_names(Enum last) {
  SCOPED_TRACE("the enum whose last value is " + std::string(to_string(last)));
  std::set<std::string> seen;
  for (int i = 0; i <= static_cast<int>(last); ++i) {
    const std::string name(to_string(static_cast<Enum>(i)));
    EXPECT_NE(name, "unknown") << i;
    EXPECT_TRUE(seen.insert(name).second) << name << " names two values";
  }
}

// Each enum by its last value.
template <class... Last>
void expect_each_distinct(Last... last) {
  (expect_distinct_names(last), ...);
}

TEST(EnumNames, EveryPublicToStringNamesEachValueApart) {
  expect_each_distinct(code_type::tile_ir, source_type::nvvm, compiler_backend::driver,
                       compile_server_mode::automatic, cache_outcome::miss, verify_outcome::queued,
                       pch_status::failed, auto_pch_status::discarded, flight_outcome::unclaimed,
                       miss_kind::other, cache_skip_reason::option_file, graph_node_kind::other,
                       conditional_kind::switch_);
}

TEST(EnumNames, ParsersReadTheSameNames) {
  for (int i = 0; i <= static_cast<int>(code_type::tile_ir); ++i) {
    const auto type = static_cast<code_type>(i);
    EXPECT_EQ(parse_code_type(to_string(type)), type);
  }
  for (auto type : {source_type::cxx, source_type::ptx, source_type::nvvm}) {
    EXPECT_EQ(parse_source_type(to_string(type)), type);
  }
  for (auto mode :
       {compile_server_mode::off, compile_server_mode::on, compile_server_mode::automatic}) {
    EXPECT_EQ(parse_compile_server_mode(to_string(mode)), mode);
  }
  EXPECT_EQ(parse_source_type("CUDA"), source_type::cxx);
  EXPECT_EQ(parse_compile_server_mode("AUTO"), compile_server_mode::automatic);
}

}  // namespace
}  // namespace cucore
