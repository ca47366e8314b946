// The reader of cucore's environment variables (common/environment.hpp): the table, and each
// accessor on a variable unset, empty, valid, malformed and out of range.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "common/environment.hpp"

namespace cucore::env {
namespace {

// Sets (or, with nullopt, unsets) a variable for one test; restores what was there.
class scoped_variable {
 public:
  scoped_variable(variable v, std::optional<std::string> value) : name_(env::name(v)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    set(value);
  }
  ~scoped_variable() { set(old_); }
  scoped_variable(const scoped_variable&) = delete;
  scoped_variable& operator=(const scoped_variable&) = delete;

  void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(Environment, TableListsEachVariableOnceInOrder) {
  std::set<std::string_view> names;
  std::size_t i = 0;
  for (const auto& row : variables()) {
    EXPECT_EQ(static_cast<std::size_t>(row.id), i++);
    EXPECT_TRUE(row.name.starts_with("CUCORE_")) << row.name;
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
    EXPECT_EQ(name(row.id), row.name);
    EXPECT_EQ(variable_named(row.name), row.id);
    EXPECT_FALSE(row.values.empty()) << row.name;
    EXPECT_FALSE(row.purpose.empty()) << row.name;
    if (row.type == kind::number) {
      EXPECT_LT(row.min, row.max) << row.name;
    }
  }
  EXPECT_EQ(variable_named("CUCORE_NO_SUCH_VARIABLE"), std::nullopt);
  EXPECT_EQ(variable_named("HOME"), std::nullopt);
}

// docs/environment.md's table names the same variables as the code's.
TEST(Environment, DocumentedTableMatches) {
  std::ifstream in(std::string(CUCORE_SOURCE_DIR) + "/docs/environment.md");
  ASSERT_TRUE(in) << "docs/environment.md";
  std::set<std::string> documented;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("| `CUCORE_")) continue;
    documented.insert(line.substr(3, line.find('`', 3) - 3));
  }
  std::set<std::string> listed;
  for (const auto& row : variables()) listed.emplace(row.name);
  EXPECT_EQ(documented, listed);
}

TEST(Environment, Text) {
  scoped_variable dir(variable::cache_dir, std::nullopt);
  EXPECT_EQ(text(variable::cache_dir), std::nullopt);
  EXPECT_EQ(text_even_empty(variable::cache_dir), std::nullopt);
  dir.set("");
  EXPECT_EQ(text(variable::cache_dir), std::nullopt);
  EXPECT_EQ(text_even_empty(variable::cache_dir), std::string_view());
  dir.set("/tmp/a cache");
  EXPECT_EQ(text(variable::cache_dir), "/tmp/a cache");
  EXPECT_EQ(text_even_empty(variable::cache_dir), "/tmp/a cache");
  // Read afresh on every call, never cached.
  dir.set("/elsewhere");
  EXPECT_EQ(text(variable::cache_dir), "/elsewhere");
  EXPECT_EQ(text(variable::cache_dir)->data()[10], '\0');  // NUL-terminated, as getenv's
}

TEST(Environment, FlagUnsetAndEmpty) {
  scoped_variable stats(variable::cache_stats, std::nullopt);
  EXPECT_FALSE(flag(variable::cache_stats).is_set());
  EXPECT_FALSE(flag(variable::cache_stats).malformed());
  EXPECT_EQ(flag(variable::cache_stats).value, std::nullopt);
  stats.set("");
  EXPECT_FALSE(flag(variable::cache_stats).is_set());
  EXPECT_FALSE(flag(variable::cache_stats).malformed());
}

TEST(Environment, FlagExactWords) {
  scoped_variable stats(variable::cache_stats, std::nullopt);
  for (const char* on : {"1", "true", "yes", "on"}) {
    stats.set(on);
    EXPECT_EQ(flag(variable::cache_stats).value, true) << on;
  }
  for (const char* off : {"0", "false", "no", "off"}) {
    stats.set(off);
    EXPECT_EQ(flag(variable::cache_stats).value, false) << off;
  }
  for (const char* bad : {"TRUE", "On", " 1", "2", "yes!", "falsehood"}) {
    stats.set(bad);
    const auto r = flag(variable::cache_stats);
    EXPECT_TRUE(r.malformed()) << bad;
    EXPECT_EQ(r.text, bad);
  }
}

TEST(Environment, FlagAnyCase) {
  scoped_variable recipes(variable::cache_recipes, "TRUE");
  EXPECT_EQ(flag(variable::cache_recipes).value, true);
  recipes.set("Off");
  EXPECT_EQ(flag(variable::cache_recipes).value, false);
  recipes.set(" on");
  EXPECT_TRUE(flag(variable::cache_recipes).malformed());
}

TEST(Environment, FlagAnyCaseTrimmed) {
  scoped_variable shared(variable::cache_shared, " Yes\t");
  EXPECT_EQ(flag(variable::cache_shared).value, true);
  shared.set("  0 ");
  EXPECT_EQ(flag(variable::cache_shared).value, false);
  shared.set("maybe");
  EXPECT_TRUE(flag(variable::cache_shared).malformed());
  shared.set("   ");
  EXPECT_TRUE(flag(variable::cache_shared).malformed());
}

TEST(Environment, FlagOneIsNeverMalformed) {
  scoped_variable only(variable::cuda_home_only, "1");
  EXPECT_EQ(flag(variable::cuda_home_only).value, true);
  for (const char* other : {"yes", "true", "0", "2"}) {
    only.set(other);
    EXPECT_EQ(flag(variable::cuda_home_only).value, false) << other;
    EXPECT_FALSE(flag(variable::cuda_home_only).malformed()) << other;
  }
}

TEST(Environment, Number) {
  scoped_variable rate(variable::verify, std::nullopt);
  EXPECT_FALSE(number(variable::verify).is_set());
  rate.set("");
  EXPECT_FALSE(number(variable::verify).is_set());
  EXPECT_FALSE(number(variable::verify).malformed());
  for (const auto& [text, value] :
       {std::pair{"0", 0.0}, {"1", 1.0}, {"0.25", 0.25}, {"2.5e-1", 0.25}}) {
    rate.set(text);
    EXPECT_EQ(number(variable::verify).value, value) << text;
  }
  for (const char* bad : {"x", "0.5x", "half", "nan", "inf", "1.01", "-0.5", "0.5 "}) {
    rate.set(bad);
    EXPECT_TRUE(number(variable::verify).malformed()) << bad;
  }
}

TEST(Environment, NumberRangeIsTheRows) {
  scoped_variable wait(variable::single_flight_wait, "86400");
  EXPECT_EQ(number(variable::single_flight_wait).value, 86400.0);
  wait.set("86400.5");
  EXPECT_TRUE(number(variable::single_flight_wait).malformed());
  wait.set("-1");
  EXPECT_TRUE(number(variable::single_flight_wait).malformed());
  wait.set("0.1");
  EXPECT_EQ(number(variable::single_flight_wait).value, 0.1);
}

TEST(Environment, WholeNumber) {
  scoped_variable ms(variable::server_timeout_ms, std::nullopt);
  EXPECT_FALSE(whole_number(variable::server_timeout_ms).is_set());
  ms.set("");
  EXPECT_FALSE(whole_number(variable::server_timeout_ms).malformed());
  ms.set("5000");
  EXPECT_EQ(whole_number(variable::server_timeout_ms).value, 5000u);
  ms.set("0");
  EXPECT_EQ(whole_number(variable::server_timeout_ms).value, 0u);
  ms.set("18446744073709551615");
  EXPECT_EQ(whole_number(variable::server_timeout_ms).value, 18446744073709551615u);
  for (const char* bad : {"-1", "18446744073709551616", "12ms", "1.5", "ten"}) {
    ms.set(bad);
    EXPECT_TRUE(whole_number(variable::server_timeout_ms).malformed()) << bad;
  }
}

TEST(Environment, LogThreshold) {
  scoped_variable level(variable::log, std::nullopt);
  EXPECT_EQ(log_threshold(), std::nullopt);
  for (const char* silent : {"", "0", "off", "none"}) {
    level.set(silent);
    EXPECT_EQ(log_threshold(), std::nullopt) << silent;
  }
  level.set("debug");
  EXPECT_EQ(log_threshold(), log_level::debug);
  level.set("info");
  EXPECT_EQ(log_threshold(), log_level::info);
  level.set("error");
  EXPECT_EQ(log_threshold(), log_level::error);
  for (const char* warning : {"warning", "1", "loud", "DEBUG"}) {
    level.set(warning);
    EXPECT_EQ(log_threshold(), log_level::warning) << warning;
  }
}

}  // namespace
}  // namespace cucore::env
