// The names of an enum's values, in one table that to_string and the parsers both read, so a name
// and its parse cannot disagree.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace cucore::detail {

// Names for the values 0 to N-1 of Enum, in declaration order.
template <class Enum, std::size_t N>
class enum_names {
 public:
  constexpr explicit enum_names(std::array<std::string_view, N> names) : names_(names) {}

  // The value's name; `fallback` for a value no enumerator has (one made by a cast). Every name is
  // a string literal, so data() is null-terminated.
  constexpr std::string_view operator()(Enum value,
                                        std::string_view fallback = "unknown") const noexcept {
    const auto index = static_cast<std::size_t>(value);
    return index < N ? names_[index] : fallback;
  }

  // The value named exactly `name`.
  constexpr std::optional<Enum> find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < N; ++i) {
      if (names_[i] == name) return static_cast<Enum>(i);
    }
    return std::nullopt;
  }

 private:
  std::array<std::string_view, N> names_;
};

// Whether V is one of its enum's named values. GCC and Clang print a named value in
// __PRETTY_FUNCTION__ by its name and any other as a cast, "(ns::enum)7" (what magic_enum rests
// on).
template <auto V>
consteval bool is_named_value() {
  const std::string_view signature = __PRETTY_FUNCTION__;
  const auto at = signature.find("V = ");
  return at != std::string_view::npos && signature[at + 4] != '(';
}

template <class Enum, std::size_t... I>
consteval bool values_run_to(std::index_sequence<I...>) {
  using underlying = std::underlying_type_t<Enum>;
  constexpr std::size_t count = sizeof...(I);
  return (is_named_value<static_cast<Enum>(static_cast<underlying>(I))>() && ...) &&
         !is_named_value<static_cast<Enum>(static_cast<underlying>(count))>();
}

// The table for the enum of `Last`, one name per value in declaration order. It does not compile
// unless the enum's values are exactly 0, 1, ... Last and every one is named: what -Wswitch
// checked for the switches these tables replace, and a value added after Last is caught too.
template <auto Last, class... Names>
consteval auto name_each(const Names&... names) {
  using Enum = decltype(Last);
  static_assert(std::is_enum_v<Enum>);
  static_assert(sizeof...(Names) == static_cast<std::size_t>(Last) + 1,
                "name every value of the enum, in declaration order, up to Last");
  static_assert(values_run_to<Enum>(std::make_index_sequence<sizeof...(Names)>{}),
                "the enum's values must be 0, 1, ... Last, each named: a value after Last is "
                "missing from the table (make it Last and name it)");
  return enum_names<Enum, sizeof...(Names)>({std::string_view(names)...});
}

}  // namespace cucore::detail
