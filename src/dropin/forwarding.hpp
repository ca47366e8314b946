// The shape every drop-in's exported functions share (docs/transparent-cache.md): a function
// forwarded as it is, a getter answered from the record of a hit or forwarded to the real library,
// and the real-symbol lookup the shim (src/dropin/shim.h) calls. The macros expect, in the
// drop-in's file, real() (its real library, or nullptr), kNoLibrary (the answer without one) and
// `programs` (its dropin::program_table).
#pragma once

#include <optional>
#include <type_traits>

#define CUCORE_EXPORT extern "C" __attribute__((visibility("default")))

namespace cucore::dropin {

template <class T>
inline constexpr bool is_optional = false;
template <class T>
inline constexpr bool is_optional<std::optional<T>> = true;

// A getter's answer for a handle whose state is `s` (nullptr: none): the record's output
// (`select(hit)`) when the last compile was a hit and the caller gave somewhere to write (`given`),
// through `answer`; else the real library's, `forward()`. An optional output the record lacks (an
// older drop-in's record) has `compile_real(*s)` compile the real program first: its failure (a
// result code) is the answer, else the real library's.
template <class State, class Select, class Answer, class CompileReal, class Forward>
auto answer_getter(State* s, bool given, Select select, Answer answer, CompileReal compile_real,
                   Forward forward) {
  if (s != nullptr && s->hit && given) {
    const auto& output = select(*s->hit);
    if constexpr (is_optional<std::remove_cvref_t<decltype(output)>>) {
      if (output) return answer(*output);
      if (const auto failed = compile_real(*s)) return *failed;
    } else {
      return answer(output);
    }
  }
  return forward();
}

// compile_real of a drop-in whose records hold every output: never called.
template <class... Args>
std::optional<int> every_output_recorded(Args&&...) noexcept;

}  // namespace cucore::dropin

// The exported `ret name params`, forwarded as it is: the real library's REAL_FN called with ARGS,
// or FAIL without the library or where it lacks the function.
#define CUCORE_DROPIN_FORWARD(ret, name, params, args, real_fn, fail)     \
  CUCORE_EXPORT ret name params {                                         \
    const auto* r = real();                                               \
    return r != nullptr && (real_fn) != nullptr ? (real_fn)args : (fail); \
  }

// The exported getter `result name(handle_type handle, out_type out)`: answered (ANSWER,
// dropin::answer_size or answer_bytes) from the record's MEMBER on a hit, else by the real
// library's REAL_FN (kNoLibrary where it lacks it). COMPILE_REAL(real, handle, state) compiles the
// real program for an optional MEMBER a record lacks (dropin::every_output_recorded where none is).
#define CUCORE_DROPIN_GETTER(result, name, handle_type, out_type, answer, member, real_fn, \
                             compile_real)                                                 \
  CUCORE_EXPORT result name(handle_type handle, out_type out) {                            \
    const auto* r = real();                                                                \
    if (r == nullptr || (real_fn) == nullptr) return kNoLibrary;                           \
    return cucore::dropin::answer_getter(                                                  \
        programs::state_of(handle).get(), out != nullptr,                                  \
        [](const auto& hit) -> const auto& { return hit.member; },                         \
        [&](const auto& o) { return cucore::dropin::answer(o, out); },                     \
        [&](auto& s) { return compile_real(*r, handle, s); },                              \
        [&] { return (real_fn)(handle, out); });                                           \
  }

// A getter pair: SIZE_NAME (size_t*) and GET_NAME (OUT_TYPE), whose real functions are REAL_SIZE
// and REAL_GET.
#define CUCORE_DROPIN_GETTER_PAIR(result, handle_type, size_name, get_name, out_type, member,   \
                                  real_size, real_get, compile_real)                            \
  CUCORE_DROPIN_GETTER(result, size_name, handle_type, size_t*, answer_size, member, real_size, \
                       compile_real)                                                            \
  CUCORE_DROPIN_GETTER(result, get_name, handle_type, out_type, answer_bytes, member, real_get, \
                       compile_real)

// The real library's `name` for the shim (src/dropin/shim.h): functions the engine does not
// implement go straight to it, and a name it lacks makes the shim answer an error.
#define CUCORE_DROPIN_REAL_SYMBOL()                                                   \
  CUCORE_EXPORT void* cucore_dropin_real_symbol(const char* name) {                   \
    const auto* r = real();                                                           \
    return r != nullptr && name != nullptr ? r->api->library->symbol(name) : nullptr; \
  }
