// The three-valued evaluation of #if conditions, and the groups it shows can never be entered
// (conditional_scan.hpp).
#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "key/conditional_scan.hpp"
#include "key/preprocessor_tokens.hpp"

namespace cucore::detail {

std::vector<pp::token> pp::tokenize(std::string_view e, bool& ok) {
  std::vector<token> out;
  static constexpr std::string_view kPuncts[] = {"&&", "||", "==", "!=", "<=", ">=", "<<", ">>"};
  std::size_t i = 0;
  while (i < e.size()) {
    const char c = e[i];
    if (hspace(c)) {
      ++i;
    } else if (ident_start(c)) {
      std::size_t j = i;
      while (j < e.size() && ident_char(e[j])) ++j;
      const std::string_view word = e.substr(i, j - i);
      // C++'s alternative tokens are operators in #if too.
      static constexpr std::pair<std::string_view, std::string_view> kAlternative[] = {
          {"and", "&&"},   {"or", "||"},   {"not", "!"}, {"not_eq", "!="},
          {"bitand", "&"}, {"bitor", "|"}, {"xor", "^"}, {"compl", "~"}};
      token t{token::identifier, word};
      for (const auto& [alt, op] : kAlternative) {
        if (word == alt) t = {token::punct, op};
      }
      if (word == "and_eq" || word == "or_eq" || word == "xor_eq") ok = false;
      out.push_back(t);
      i = j;
    } else if (digit(c) || (c == '.' && i + 1 < e.size() && digit(e[i + 1]))) {
      std::size_t j = i + 1;
      while (j < e.size() &&
             (ident_char(e[j]) || e[j] == '.' ||
              (e[j] == '\'' && j + 1 < e.size() && ident_char(e[j + 1])) ||
              ((e[j] == '+' || e[j] == '-') && std::strchr("eEpP", e[j - 1]) != nullptr))) {
        ++j;
      }
      out.push_back({token::number, e.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::size_t j = i + 1;
      while (j < e.size() && e[j] != c) j += e[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, e.size());
      out.push_back({token::other, e.substr(i, j - i)});
      i = j;
    } else {
      std::string_view p = e.substr(i, 1);
      for (const auto two : kPuncts) {
        if (e.substr(i, 2) == two) p = two;
      }
      out.push_back({token::punct, p});
      i += p.size();
    }
  }
  out.push_back({token::end, {}});
  return out;
}

namespace {

using pp::digit;
using pp::ident_char;
using pp::token;
using pp::tokenize;

// A value of #if arithmetic: intmax_t or uintmax_t (the preprocessor's only types), as bits.
struct number {
  std::uint64_t bits = 0;
  bool is_unsigned = false;
  std::int64_t as_signed() const { return static_cast<std::int64_t>(bits); }
  bool nonzero() const { return bits != 0; }
};
// A value of the evaluation: known, or unknown (nullopt).
using value = std::optional<number>;

value signed_value(std::int64_t v) {
  return number{static_cast<std::uint64_t>(v), false};
}
value truth_value(bool b) {
  return number{b ? 1u : 0u, false};
}

// An integer literal's value and type; nullopt for anything else (floating, user-defined, digit
// separators (their reading depends on --std), too large, a suffix that is not u, l, ll in one
// of the standard's orders).
value integer_value(std::string_view text) {
  if (text.find('\'') != std::string_view::npos) return std::nullopt;
  std::size_t i = 0;
  int base = 10;
  if (text.size() > 1 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    i = 2;
  } else if (text.size() > 1 && text[0] == '0' && (text[1] == 'b' || text[1] == 'B')) {
    base = 2;
    i = 2;
  } else if (text[0] == '0') {
    base = 8;
  }
  const std::size_t digits_from = i;
  std::uint64_t v = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    int d = 0;
    if (digit(c)) {
      d = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      break;
    }
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, static_cast<std::uint64_t>(base), &v) ||
        __builtin_add_overflow(v, static_cast<std::uint64_t>(d), &v)) {
      return std::nullopt;
    }
  }
  if (i == digits_from) return std::nullopt;
  const std::string_view suffix = text.substr(i);
  static constexpr std::string_view kUnsigned[] = {"u",   "U",   "ul",  "uL",  "Ul",  "UL",
                                                   "ull", "uLL", "Ull", "ULL", "lu",  "lU",
                                                   "Lu",  "LU",  "llu", "llU", "LLu", "LLU"};
  static constexpr std::string_view kSigned[] = {"", "l", "L", "ll", "LL"};
  bool is_unsigned = false;
  if (std::find(std::begin(kUnsigned), std::end(kUnsigned), suffix) != std::end(kUnsigned)) {
    is_unsigned = true;
  } else if (std::find(std::begin(kSigned), std::end(kSigned), suffix) == std::end(kSigned)) {
    return std::nullopt;
  }
  // A hexadecimal, octal or binary literal takes the first type of int, unsigned int, long,
  // unsigned long (l: of the last three; ll: long long, unsigned long long) that holds it, and
  // an unsigned type makes it uintmax_t in #if: 0x80000000 to 0xffffffff are unsigned int
  // (measured: `-1 > 0x80000000` is true for NVRTC). A decimal one only takes signed types, and
  // has none to take past INT64_MAX (ill-formed; compilers differ).
  if (!is_unsigned && v > static_cast<std::uint64_t>(INT64_MAX)) {
    if (base == 10) return std::nullopt;
    is_unsigned = true;
  }
  if (!is_unsigned && base != 10 && suffix.empty() && v > static_cast<std::uint64_t>(INT32_MAX) &&
      v <= static_cast<std::uint64_t>(UINT32_MAX)) {
    is_unsigned = true;
  }
  return number{v, is_unsigned};
}

// Recursive descent over the #if grammar. Every identifier that may be a macro makes the whole
// condition unknown before parsing (a macro may expand to operators and change the parse); so
// the only unknowns left here are __has_include-like operators and character literals. The
// arithmetic is the preprocessor's: intmax_t and uintmax_t, the usual arithmetic conversions (a
// result is unsigned when either operand is, the ?: too); anything undefined or
// implementation-defined (signed overflow, division by zero, shifts out of range or of negative
// values) is unknown.
class evaluator {
 public:
  explicit evaluator(std::vector<token> tokens) : t_(std::move(tokens)) {}

  std::optional<value> run() {
    value v = conditional();
    if (failed_ || t_[p_].kind != token::end) return std::nullopt;
    return v;
  }

 private:
  bool is(std::string_view punct) const {
    return t_[p_].kind == token::punct && t_[p_].text == punct;
  }
  bool accept(std::string_view punct) {
    if (!is(punct)) return false;
    ++p_;
    return true;
  }

  value conditional() {
    const value c = logical_or();
    if (!accept("?")) return c;
    value a = conditional();
    if (!accept(":")) failed_ = true;
    value b = conditional();
    // Either branch's type decides the result's: both must be known.
    if (!a || !b) return std::nullopt;
    const bool u = a->is_unsigned || b->is_unsigned;
    a->is_unsigned = b->is_unsigned = u;
    if (c) return c->nonzero() ? a : b;
    return a->bits == b->bits ? a : std::nullopt;
  }
  value logical_or() {
    value l = logical_and();
    while (accept("||")) {
      const value r = logical_and();
      if ((l && l->nonzero()) || (r && r->nonzero())) {
        l = truth_value(true);
      } else if (l && r) {
        l = truth_value(false);
      } else {
        l = std::nullopt;
      }
    }
    return l;
  }
  value logical_and() {
    value l = bit_or();
    while (accept("&&")) {
      const value r = bit_or();
      if ((l && !l->nonzero()) || (r && !r->nonzero())) {
        l = truth_value(false);
      } else if (l && r) {
        l = truth_value(true);
      } else {
        l = std::nullopt;
      }
    }
    return l;
  }
  // A binary operator's operands after the usual arithmetic conversions: `op` gets both and
  // whether the common type is unsigned.
  template <class Next, class Op>
  value binary(Next next, std::initializer_list<std::string_view> ops, Op op) {
    value l = (this->*next)();
    for (;;) {
      std::string_view matched;
      for (const auto o : ops) {
        if (is(o)) matched = o;
      }
      if (matched.empty()) return l;
      ++p_;
      const value r = (this->*next)();
      l = l && r ? op(matched, *l, *r, l->is_unsigned || r->is_unsigned) : std::nullopt;
    }
  }
  static value bits_of(std::uint64_t bits, bool u) { return number{bits, u}; }
  value bit_or() {
    return binary(&evaluator::bit_xor, {"|"},
                  [](auto, number a, number b, bool u) { return bits_of(a.bits | b.bits, u); });
  }
  value bit_xor() {
    return binary(&evaluator::bit_and, {"^"},
                  [](auto, number a, number b, bool u) { return bits_of(a.bits ^ b.bits, u); });
  }
  value bit_and() {
    return binary(&evaluator::equality, {"&"},
                  [](auto, number a, number b, bool u) { return bits_of(a.bits & b.bits, u); });
  }
  value equality() {
    return binary(&evaluator::relational, {"==", "!="},
                  [](std::string_view o, number a, number b, bool) {
                    return truth_value(o == "==" ? a.bits == b.bits : a.bits != b.bits);
                  });
  }
  value relational() {
    return binary(&evaluator::shift, {"<", ">", "<=", ">="},
                  [](std::string_view o, number a, number b, bool u) {
                    // <0, 0, >0 in the common type.
                    const int c = u ? (a.bits < b.bits   ? -1
                                       : a.bits > b.bits ? 1
                                                         : 0)
                                    : (a.as_signed() < b.as_signed()   ? -1
                                       : a.as_signed() > b.as_signed() ? 1
                                                                       : 0);
                    if (o == "<") return truth_value(c < 0);
                    if (o == ">") return truth_value(c > 0);
                    if (o == "<=") return truth_value(c <= 0);
                    return truth_value(c >= 0);
                  });
  }
  value shift() {
    // The result has the left operand's type; the count's type does not matter.
    return binary(&evaluator::additive, {"<<", ">>"},
                  [](std::string_view o, number a, number b, bool) -> value {
                    if ((!b.is_unsigned && b.as_signed() < 0) || b.bits > 63) return std::nullopt;
                    const unsigned n = static_cast<unsigned>(b.bits);
                    if (a.is_unsigned) return bits_of(o == ">>" ? a.bits >> n : a.bits << n, true);
                    if (a.as_signed() < 0) return std::nullopt;
                    if (o == ">>") return signed_value(a.as_signed() >> n);
                    if (a.as_signed() > (INT64_MAX >> n)) return std::nullopt;
                    return signed_value(a.as_signed() << n);
                  });
  }
  value additive() {
    return binary(&evaluator::multiplicative, {"+", "-"},
                  [](std::string_view o, number a, number b, bool u) -> value {
                    if (u) return bits_of(o == "+" ? a.bits + b.bits : a.bits - b.bits, true);
                    std::int64_t r = 0;
                    if (o == "+" ? __builtin_add_overflow(a.as_signed(), b.as_signed(), &r)
                                 : __builtin_sub_overflow(a.as_signed(), b.as_signed(), &r)) {
                      return std::nullopt;
                    }
                    return signed_value(r);
                  });
  }
  value multiplicative() {
    return binary(&evaluator::unary, {"*", "/", "%"},
                  [](std::string_view o, number a, number b, bool u) -> value {
                    if (o == "*") {
                      if (u) return bits_of(a.bits * b.bits, true);
                      std::int64_t r = 0;
                      if (__builtin_mul_overflow(a.as_signed(), b.as_signed(), &r)) {
                        return std::nullopt;
                      }
                      return signed_value(r);
                    }
                    if (b.bits == 0) return std::nullopt;
                    if (u) return bits_of(o == "/" ? a.bits / b.bits : a.bits % b.bits, true);
                    if (a.as_signed() == INT64_MIN && b.as_signed() == -1) return std::nullopt;
                    return signed_value(o == "/" ? a.as_signed() / b.as_signed()
                                                 : a.as_signed() % b.as_signed());
                  });
  }
  value unary() {
    if (accept("!")) {
      const value v = unary();
      return v ? truth_value(!v->nonzero()) : std::nullopt;
    }
    if (accept("-")) {
      const value v = unary();
      if (!v) return std::nullopt;
      if (v->is_unsigned) return bits_of(0 - v->bits, true);
      return v->as_signed() != INT64_MIN ? signed_value(-v->as_signed()) : std::nullopt;
    }
    if (accept("+")) return unary();
    if (accept("~")) {
      const value v = unary();
      return v ? bits_of(~v->bits, v->is_unsigned) : std::nullopt;
    }
    return primary();
  }
  // Skips a balanced parenthesised group at p_ (which must be '(').
  void skip_parenthesised() {
    if (!accept("(")) {
      failed_ = true;
      return;
    }
    for (int depth = 1; depth > 0;) {
      if (t_[p_].kind == token::end) {
        failed_ = true;
        return;
      }
      if (is("(")) ++depth;
      if (is(")")) --depth;
      ++p_;
    }
  }
  value primary() {
    const token& t = t_[p_];
    switch (t.kind) {
      case token::number:
        ++p_;
        return integer_value(t.text);
      case token::other:  // a character literal: its value is the compiler's to decide
        ++p_;
        return std::nullopt;
      case token::identifier:
        ++p_;
        if (t.text == "defined") {
          // The operand's definedness was decided before parsing: the name was replaced.
          failed_ = true;
          return std::nullopt;
        }
        if (t.text == "true") return truth_value(true);
        if (t.text == "false") return truth_value(false);
        if (t.text == "__defined_false__") return truth_value(false);
        if (t.text == "__defined_unknown__") return std::nullopt;
        if (is("(")) {  // __has_include(...), __has_cpp_attribute(...), ...
          skip_parenthesised();
          return std::nullopt;
        }
        return truth_value(false);  // an identifier no macro can be: 0 in #if
      case token::punct:
        if (accept("(")) {
          const value v = conditional();
          if (!accept(")")) failed_ = true;
          return v;
        }
        break;
      case token::end:
        break;
    }
    failed_ = true;
    return std::nullopt;
  }

  std::vector<token> t_;
  std::size_t p_ = 0;
  bool failed_ = false;
};

bool has_operator(std::string_view name) {
  return name == "__has_include" || name == "__has_include_next" || name == "__has_embed" ||
         name == "__has_cpp_attribute" || name == "__has_attribute" || name == "__has_builtin" ||
         name == "__has_feature" || name == "__has_extension";
}

}  // namespace

truth evaluate_condition(std::string_view condition,
                         const std::function<bool(std::string_view)>& may_be_defined) {
  const std::size_t space = condition.find(' ');
  const std::string_view directive = condition.substr(0, space);
  const std::string_view operand =
      space == std::string_view::npos ? std::string_view() : condition.substr(space + 1);
  if (directive == "else") return truth::is_true;
  if (directive == "ifdef" || directive == "ifndef" || directive == "elifdef" ||
      directive == "elifndef") {
    std::size_t end = 0;
    while (end < operand.size() && ident_char(operand[end])) ++end;
    if (end == 0 || digit(operand[0])) return truth::unknown;
    if (may_be_defined(operand.substr(0, end))) return truth::unknown;
    const bool negated = directive == "ifndef" || directive == "elifndef";
    return negated ? truth::is_true : truth::is_false;
  }
  if (directive != "if" && directive != "elif") return truth::unknown;
  bool ok = true;
  std::vector<token> tokens = tokenize(operand, ok);
  if (!ok) return truth::unknown;
  // defined X / defined ( X ): replaced by its answer. Any other identifier that may be a macro:
  // the expansion is unknown, and so is the condition.
  std::vector<token> replaced;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const token& t = tokens[i];
    if (t.kind == token::identifier && t.text == "defined") {
      std::size_t k = i + 1;
      const bool paren = tokens[k].kind == token::punct && tokens[k].text == "(";
      if (paren) ++k;
      if (tokens[k].kind != token::identifier) return truth::unknown;
      const std::string_view name = tokens[k].text;
      if (paren && !(tokens[k + 1].kind == token::punct && tokens[k + 1].text == ")")) {
        return truth::unknown;
      }
      replaced.push_back(
          {token::identifier, may_be_defined(name) ? "__defined_unknown__" : "__defined_false__"});
      i = paren ? k + 1 : k;
      continue;
    }
    if (t.kind == token::identifier && has_operator(t.text)) {
      // The operator and its parenthesised operand, unexamined (the operand is no expression).
      replaced.push_back(t);
      std::size_t k = i + 1;
      if (!(tokens[k].kind == token::punct && tokens[k].text == "(")) return truth::unknown;
      int depth = 0;
      for (; tokens[k].kind != token::end; ++k) {
        if (tokens[k].kind == token::punct && tokens[k].text == "(") ++depth;
        if (tokens[k].kind == token::punct && tokens[k].text == ")") --depth;
        replaced.push_back(tokens[k]);
        if (depth == 0) break;
      }
      if (depth != 0) return truth::unknown;
      i = k;
      continue;
    }
    if (t.kind == token::identifier && may_be_defined(t.text)) {
      return truth::unknown;
    }
    replaced.push_back(t);
  }
  const auto v = evaluator(std::move(replaced)).run();
  if (!v || !*v) return truth::unknown;
  return (*v)->nonzero() ? truth::is_true : truth::is_false;
}

conditional_pruner::conditional_pruner(
    const conditional_structure& structure,
    const std::function<bool(std::string_view)>& may_be_defined) {
  if (!structure.known) return;
  const auto& groups = structure.groups;
  // Per chain: whether an earlier group of it is certainly entered (chains in text order of
  // their first groups, a few at a time: a short list beats a map).
  std::vector<std::uint32_t> entered;
  for (const conditional_group& g : groups) {
    const bool after_entered = std::find(entered.begin(), entered.end(), g.chain) != entered.end();
    const bool any_defined = std::any_of(g.names.begin(), g.names.end(),
                                         [&](const std::string& n) { return may_be_defined(n); });
    const truth t = any_defined ? evaluate_condition(g.condition, may_be_defined)
                                : static_cast<truth>(g.when_undefined);
    if ((t == truth::is_false || after_entered) && g.first_line <= g.last_line) {
      dead_.emplace_back(g.first_line, g.last_line);
    }
    if (t == truth::is_true && !after_entered) entered.push_back(g.chain);
  }
}

bool conditional_pruner::never_entered(std::uint32_t line) const {
  return std::any_of(dead_.begin(), dead_.end(),
                     [line](const auto& r) { return r.first <= line && line <= r.second; });
}

}  // namespace cucore::detail
