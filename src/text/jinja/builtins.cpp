#include "text/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "text/jinja/env.h"
#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text::jinja {

void fail_at(const Ast& n, const std::string& msg) { fail("template line {}: {}", n.line, msg); }

bool numeric(const Value& v) { return v.type == Type::Int || v.type == Type::Float || v.type == Type::Bool; }
double num(const Value& v) { return v.type == Type::Int ? double(v.i) : v.type == Type::Float ? v.f : (v.b ? 1 : 0); }

// String(value) in JavaScript (used by `~` and string `+`).
std::string js_to_string(const Value& v) {
  switch (v.type) {
    case Type::Float: {
      JsonOptions o;
      return to_json(v, o);
    }
    case Type::Array: {
      std::string s;
      for (size_t k = 0; k < v.arr.size(); ++k) {
        if (k) s += ',';
        if (v.arr[k]->type != Type::Null && v.arr[k]->type != Type::Undefined) s += js_to_string(*v.arr[k]);
      }
      return s;
    }
    case Type::Object:
    case Type::Namespace:
    case Type::KwArgs: return "[object Map]";
    default: return v.to_string();
  }
}

bool loose_eq(const Value& a, const Value& b) {
  const bool an = a.type == Type::Null || a.type == Type::Undefined, bn = b.type == Type::Null || b.type == Type::Undefined;
  if (an || bn) return an && bn;
  if (numeric(a) && numeric(b)) return num(a) == num(b);
  if (a.type == Type::String && b.type == Type::String) return a.s == b.s;
  if ((a.type == Type::String && numeric(b)) || (numeric(a) && b.type == Type::String)) {
    const std::string t = js_trim(a.type == Type::String ? a.s : b.s, true, true);
    double x = 0;
    if (!t.empty()) {
      char* end = nullptr;
      x = std::strtod(t.c_str(), &end);
      if (*end) return false;
    }
    return x == num(a.type == Type::String ? b : a);
  }
  return &a == &b;
}

bool strict_eq(const Value& a, const Value& b) {
  if (a.type == Type::Undefined || a.type == Type::Null || b.type == Type::Undefined || b.type == Type::Null)
    return a.type == b.type;
  if ((a.type == Type::Int || a.type == Type::Float) && (b.type == Type::Int || b.type == Type::Float))
    return num(a) == num(b);
  if (a.type != b.type) return false;
  if (a.type == Type::String) return a.s == b.s;
  if (a.type == Type::Bool) return a.b == b.b;
  return &a == &b;
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  size_t i = 0, len = 0;
  while (i < s.size()) {
    int32_t cp = utf8_decode(s, i, &len);
    out.push_back(cp < 0 ? 0xFFFD : uint32_t(cp));
    i += len;
  }
  return out;
}
std::string from_cps(const std::vector<uint32_t>& v, size_t b, size_t e) {
  std::string s;
  for (size_t k = b; k < e; ++k) utf8_append(s, v[k]);
  return s;
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  for (uint32_t c : code_points(s)) utf8_append(out, uint32_t(upper ? utf8proc_toupper(int32_t(c)) : utf8proc_tolower(int32_t(c))));
  return out;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  auto word = [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; };
  for (size_t k = 0; k < out.size(); ++k)
    if (word(out[k]) && (k == 0 || !word(out[k - 1]))) out[k] = char(std::toupper(uint8_t(out[k])));
  return out;
}

ValuePtr kwarg(const std::vector<ValuePtr>& args, const std::string& name) {
  if (!args.empty() && args.back()->type == Type::KwArgs) return args.back()->get(name);
  return nullptr;
}
size_t positional_count(const std::vector<ValuePtr>& args) {
  return !args.empty() && args.back()->type == Type::KwArgs ? args.size() - 1 : args.size();
}
ValuePtr arg(const std::vector<ValuePtr>& args, size_t k, const std::string& name) {
  if (k < positional_count(args)) return args[k];
  return kwarg(args, name);
}

std::string js_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return s;
  int64_t left = count < 0 ? INT64_MAX : count;
  std::string out;
  if (from.empty()) {
    auto cps = code_points(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (left > 0) {
        out += to;
        --left;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  while (left > 0) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    --left;
  }
  return out + s.substr(pos);
}

namespace {

// str.split(sep=None, maxsplit=-1): on runs of whitespace without sep.
ValuePtr split_string(const std::string& s, std::vector<ValuePtr>& args) {
  ValuePtr sep = positional_count(args) > 0 ? args[0] : make_null();
  ValuePtr maxv = positional_count(args) > 1 ? args[1] : make_int(-1);
  if (sep->type != Type::String && sep->type != Type::Null) fail("split(): sep must be a string or None");
  if (maxv->type != Type::Int) fail("split(): maxsplit must be an integer");
  const int64_t maxsplit = maxv->i;
  std::vector<ValuePtr> out;
  if (sep->type == Type::Null) {
    std::string t = js_trim(s, true, false);
    size_t i = 0, len = 0;
    while (i < t.size()) {
      size_t b = i;
      while (b < t.size()) {
        int32_t cp = utf8_decode(t, b, &len);
        if (!js_space(uint32_t(cp))) break;
        b += len;
      }
      if (b >= t.size()) break;
      size_t e = b;
      while (e < t.size()) {
        int32_t cp = utf8_decode(t, e, &len);
        if (js_space(uint32_t(cp))) break;
        e += len;
      }
      if (maxsplit != -1 && int64_t(out.size()) >= maxsplit) {
        out.push_back(make_string(t.substr(b)));
        break;
      }
      out.push_back(make_string(t.substr(b, e - b)));
      i = e;
    }
  } else {
    if (sep->s.empty()) fail("split(): empty separator");
    std::vector<std::string> parts;
    size_t pos = 0;
    while (true) {
      size_t f = s.find(sep->s, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sep->s.size();
    }
    parts.push_back(s.substr(pos));
    if (maxsplit != -1 && int64_t(parts.size()) > maxsplit) {
      std::string rest;
      for (size_t k = size_t(maxsplit); k < parts.size(); ++k) rest += (k > size_t(maxsplit) ? sep->s : "") + parts[k];
      parts.resize(size_t(maxsplit));
      parts.push_back(rest);
    }
    for (auto& p : parts) out.push_back(make_string(p));
  }
  return make_array(std::move(out));
}

}  // namespace

ValuePtr string_member(const ValuePtr& self, const std::string& name) {
  const std::string s = self->s;
  auto fn = [](Function f) { return make_function(std::move(f)); };
  if (name == "length") return make_int(js_length(s));
  if (name == "upper") return fn([s](auto&, Env&) { return make_string(map_case(s, true)); });
  if (name == "lower") return fn([s](auto&, Env&) { return make_string(map_case(s, false)); });
  if (name == "strip") return fn([s](auto&, Env&) { return make_string(js_trim(s, true, true)); });
  if (name == "lstrip") return fn([s](auto&, Env&) { return make_string(js_trim(s, true, false)); });
  if (name == "rstrip") return fn([s](auto&, Env&) { return make_string(js_trim(s, false, true)); });
  if (name == "title") return fn([s](auto&, Env&) { return make_string(title_case(s)); });
  if (name == "capitalize")
    return fn([s](auto&, Env&) {
      auto cps = code_points(s);
      if (cps.empty()) return make_string("");
      return make_string(map_case(from_cps(cps, 0, 1), true) + from_cps(cps, 1, cps.size()));
    });
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return fn([s, start, name](std::vector<ValuePtr>& args, Env&) {
      if (args.empty()) fail("{}() requires at least one argument", name);
      auto test = [&](const std::string& p) {
        return p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
      };
      if (args[0]->type == Type::String) return make_bool(test(args[0]->s));
      if (args[0]->type == Type::Array) {
        for (const auto& e : args[0]->arr) {
          if (e->type != Type::String) fail("{}() tuple elements must be strings", name);
          if (test(e->s)) return make_bool(true);
        }
        return make_bool(false);
      }
      fail("{}() argument must be a string or tuple of strings", name);
    });
  }
  if (name == "split") return fn([s](std::vector<ValuePtr>& args, Env&) { return split_string(s, args); });
  if (name == "replace")
    return fn([s](std::vector<ValuePtr>& args, Env&) {
      if (positional_count(args) < 2) fail("replace() requires at least two arguments");
      if (args[0]->type != Type::String || args[1]->type != Type::String) fail("replace() arguments must be strings");
      ValuePtr c = arg(args, 2, "count");
      int64_t count = -1;
      if (c && c->type == Type::Int) count = c->i;
      else if (c && c->type != Type::Null) fail("replace() count must be an integer or None");
      return make_string(js_replace(s, args[0]->s, args[1]->s, count));
    });
  return nullptr;
}

ValuePtr object_member(const ValuePtr& self, const std::string& name) {
  Value* o = self.get();
  if (name == "get")
    return make_function([self](std::vector<ValuePtr>& args, Env&) -> ValuePtr {
      if (args.empty() || args[0]->type != Type::String) fail("get(): key must be a string");
      if (auto v = self->get(args[0]->s)) return v;
      return args.size() > 1 ? args[1] : make_null();
    });
  auto items = [self]() {
    std::vector<ValuePtr> out;
    for (const auto& [k, v] : self->obj) out.push_back(make_array({make_string(k), v}));
    return make_array(std::move(out));
  };
  if (name == "items") return make_function([items](auto&, Env&) { return items(); });
  if (name == "keys")
    return make_function([self](auto&, Env&) {
      std::vector<ValuePtr> out;
      for (const auto& kv : self->obj) out.push_back(make_string(kv.first));
      return make_array(std::move(out));
    });
  if (name == "values")
    return make_function([self](auto&, Env&) {
      std::vector<ValuePtr> out;
      for (const auto& kv : self->obj) out.push_back(kv.second);
      return make_array(std::move(out));
    });
  (void)o;
  return nullptr;
}

bool apply_test(const Ast& n, const Value& v, const std::string& name) {
  if (name == "defined") return v.type != Type::Undefined;
  if (name == "undefined") return v.type == Type::Undefined;
  if (name == "none") return v.type == Type::Null;
  if (name == "string") return v.type == Type::String;
  if (name == "number") return v.type == Type::Int || v.type == Type::Float;
  if (name == "integer") return v.type == Type::Int;
  if (name == "boolean") return v.type == Type::Bool;
  if (name == "true") return v.type == Type::Bool && v.b;
  if (name == "false") return v.type == Type::Bool && !v.b;
  if (name == "callable") return v.type == Type::Function;
  if (name == "mapping") return v.type == Type::Object;
  if (name == "iterable") return v.type == Type::Array || v.type == Type::String;
  if (name == "sequence") return v.type == Type::Array || v.type == Type::Object || v.type == Type::String;
  if (name == "odd" || name == "even") {
    if (v.type != Type::Int) fail_at(n, "cannot test " + name + " on " + v.type_name());
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return v.type == Type::String && v.s == map_case(v.s, false);
  if (name == "upper") return v.type == Type::String && v.s == map_case(v.s, true);
  fail_at(n, "unsupported test '" + name + "'");
}

}  // namespace sluice::text::jinja
