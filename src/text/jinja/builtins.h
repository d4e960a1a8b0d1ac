// Helpers the Jinja interpreter and its filters share: JavaScript-like
// conversions and comparisons (the reference is @huggingface/jinja), string
// and mapping methods (`s.split(...)`, `d.items()`), argument access, and the
// `is` tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"
#include "util/error.h"

namespace sluice::text::jinja {

// An error naming the template line of `n`.
[[noreturn]] void fail_at(const Ast& n, const std::string& msg);

bool numeric(const Value& v);  // Int, Float or Bool
double num(const Value& v);
std::string js_to_string(const Value& v);  // String(value) in JavaScript (used by `~` and string `+`)
bool loose_eq(const Value& a, const Value& b);   // ==
bool strict_eq(const Value& a, const Value& b);  // ===

std::vector<uint32_t> code_points(const std::string& s);
std::string from_cps(const std::vector<uint32_t>& v, size_t b, size_t e);
std::string map_case(const std::string& s, bool upper);
std::string title_case(const std::string& s);
std::string js_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

// Call arguments: keyword arguments come last as one KwArgs value.
ValuePtr kwarg(const std::vector<ValuePtr>& args, const std::string& name);
size_t positional_count(const std::vector<ValuePtr>& args);
ValuePtr arg(const std::vector<ValuePtr>& args, size_t k, const std::string& name);  // positional k or keyword

// Methods of strings and mappings (null when there is none of that name).
ValuePtr string_member(const ValuePtr& self, const std::string& name);
ValuePtr object_member(const ValuePtr& self, const std::string& name);

// `v is name` (defined, none, string, odd, ...).
bool apply_test(const Ast& n, const Value& v, const std::string& name);

template <typename T>
std::vector<T> py_slice(const std::vector<T>& a, const Value* start, const Value* stop, const Value* step) {
  const int64_t n = int64_t(a.size());
  int64_t st = step && step->type == Type::Int ? step->i : 1;
  if (st == 0) fail("slice step cannot be zero");
  int64_t b, e;
  auto given = [](const Value* v) { return v && v->type == Type::Int; };
  if (st > 0) {
    b = given(start) ? start->i : 0;
    b = b < 0 ? std::max<int64_t>(n + b, 0) : std::min(b, n);
    e = given(stop) ? stop->i : n;
    e = e < 0 ? std::max<int64_t>(n + e, 0) : std::min(e, n);
  } else {
    b = given(start) ? start->i : n - 1;
    b = b < 0 ? std::max<int64_t>(n + b, -1) : std::min(b, n - 1);
    e = given(stop) ? stop->i : -1;
    e = e < -1 ? std::max<int64_t>(n + e, -1) : std::min(e, n - 1);
  }
  std::vector<T> out;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) out.push_back(a[size_t(k)]);
  return out;
}

}  // namespace sluice::text::jinja
