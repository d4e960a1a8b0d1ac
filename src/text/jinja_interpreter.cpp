#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "text/jinja.h"
#include "text/jinja_ast.h"
#include "text/jinja_value.h"
#include "text/utf8.h"
#include "util/error.h"

namespace sluice::text::jinja {

class Env {
 public:
  explicit Env(Env* parent = nullptr) : parent_(parent) {}
  ValuePtr lookup(const std::string& name) const {
    for (const Env* e = this; e; e = e->parent_) {
      auto it = e->vars_.find(name);
      if (it != e->vars_.end()) return it->second;
    }
    return make_undefined();
  }
  void set(const std::string& name, ValuePtr v) { vars_[name] = std::move(v); }

 private:
  Env* parent_;
  std::map<std::string, ValuePtr> vars_;
};

namespace {

struct BreakSignal {};
struct ContinueSignal {};

[[noreturn]] void rt(const Ast& n, const std::string& msg) { fail("template line {}: {}", n.line, msg); }

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
  if (name == "split")
    return fn([s](std::vector<ValuePtr>& args, Env&) {
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
    });
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

class Interp {
  int depth_ = 0;

 public:
  std::string block(const std::vector<AstPtr>& stmts, Env& env) {
    std::string out;
    for (const auto& s : stmts) {
      ValuePtr v = eval(*s, env);
      if (v->type == Type::Null || v->type == Type::Undefined) continue;
      try {
        out += v->to_string();
      } catch (const Error& e) {
        if (std::string(e.what()).rfind("template line ", 0) == 0) throw;
        rt(*s, e.what());
      }
    }
    return out;
  }

  ValuePtr eval(const Ast& n, Env& env) {
    struct Depth {
      int& d;
      explicit Depth(int& x, const Ast& n) : d(x) {
        if (++d > 1000) rt(n, "recursion too deep (macro calling itself?)");
      }
      ~Depth() { --d; }
    } depth(depth_, n);
    try {
      return eval_inner(n, env);
    } catch (const Error& e) {
      std::string m = e.what();
      if (m.rfind("template line ", 0) == 0) throw;
      rt(n, m);
    }
  }

 private:
  ValuePtr eval_inner(const Ast& n, Env& env) {
    switch (n.kind) {
      case Node::Text: return make_string(n.str);
      case Node::Output: return eval(*n.kids[0], env);
      case Node::If: return make_string(block(eval(*n.kids[0], env)->truthy() ? n.body : n.alt, env));
      case Node::For: return eval_for(n, env);
      case Node::Set: return eval_set(n, env);
      case Node::Macro: {
        const Ast* node = &n;
        env.set(n.str, make_function([this, node](std::vector<ValuePtr>& args, Env& scope) {
                  Env mscope(&scope);
                  bind(*node, node->params, args, mscope);
                  return make_string(block(node->body, mscope));
                }));
        return make_null();
      }
      case Node::CallBlock: {
        const Ast* node = &n;
        Env* def_env = &env;
        auto caller = make_function([this, node, def_env](std::vector<ValuePtr>& args, Env&) {
          Env cenv(def_env);
          bind(*node, node->params, args, cenv);
          return make_string(block(node->body, cenv));
        });
        const Ast& call = *n.kids[0];
        std::vector<ValuePtr> args = eval_args(call, 1, env);
        ValuePtr f = eval(*call.kids[0], env);
        if (f->type != Type::Function) rt(n, "cannot call something that is not a function");
        Env cenv(&env);
        cenv.set("caller", caller);
        return f->fn(args, cenv);
      }
      case Node::FilterBlock: {
        ValuePtr body = make_string(block(n.body, env));
        const Ast& f = *n.kids[0];
        if (f.kind == Node::Ident) return apply_filter(n, body, f.str, {}, env);
        std::vector<ValuePtr> args = eval_args(f, 1, env);
        return apply_filter(n, body, f.kids[0]->str, args, env);
      }
      case Node::Break: throw BreakSignal{};
      case Node::Continue: throw ContinueSignal{};
      case Node::Int: return make_int(int64_t(n.num));
      case Node::Float: return make_float(n.num);
      case Node::Str: return make_string(n.str);
      case Node::Ident: return env.lookup(n.str);
      case Node::Array:
      case Node::Tuple: {
        std::vector<ValuePtr> a;
        for (const auto& k : n.kids) a.push_back(eval(*k, env));
        auto v = make_array(std::move(a));
        v->tuple = n.kind == Node::Tuple;
        return v;
      }
      case Node::ObjectLit: {
        auto o = make_object();
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          ValuePtr key = eval(*n.kids[k], env);
          if (key->type != Type::String) rt(n, "object literal keys must be strings");
          o->put(key->s, eval(*n.kids[k + 1], env));
        }
        return o;
      }
      case Node::Member: return eval_member(n, env);
      case Node::Call: {
        std::vector<ValuePtr> args = eval_args(n, 1, env);
        ValuePtr f = eval(*n.kids[0], env);
        if (f->type != Type::Function) rt(n, std::string("cannot call something that is not a function: got ") + f->type_name());
        return f->fn(args, env);
      }
      case Node::Binary: return eval_binary(n, env);
      case Node::Unary: {
        ValuePtr a = eval(*n.kids[0], env);
        if (n.str == "not") return make_bool(!a->truthy());
        if (!numeric(*a)) rt(n, "unary " + n.str + " needs a number, got " + a->type_name());
        double s = n.str == "-" ? -1 : 1;
        if (a->type == Type::Float) return make_float(s * a->f);
        return make_int(int64_t(s * num(*a)));
      }
      case Node::Filter: {
        ValuePtr v = eval(*n.kids[0], env);
        std::vector<ValuePtr> args;
        if (!n.params.empty()) args = eval_list(n.params, env);
        return apply_filter(n, v, n.str, args, env, !n.params.empty() || false);
      }
      case Node::Test: {
        ValuePtr v = eval(*n.kids[0], env);
        bool r = test(n, *v, n.str);
        return make_bool(n.flag ? !r : r);
      }
      case Node::Ternary: return eval(*n.kids[0], env)->truthy() ? eval(*n.kids[1], env) : eval(*n.kids[2], env);
      case Node::Select: return eval(*n.kids[1], env)->truthy() ? eval(*n.kids[0], env) : make_undefined();
      default: rt(n, "unsupported expression");
    }
  }

  std::vector<ValuePtr> eval_list(const std::vector<AstPtr>& all, Env& env, size_t from = 0) {
    std::vector<const Ast*> items;
    for (size_t k = from; k < all.size(); ++k) items.push_back(all[k].get());
    std::vector<ValuePtr> pos;
    auto kw = std::make_shared<Value>();
    kw->type = Type::KwArgs;
    for (const Ast* a : items) {
      if (a->kind == Node::Spread) {
        ValuePtr v = eval(*a->kids[0], env);
        if (v->type != Type::Array) rt(*a, "cannot unpack a non-list with *");
        for (auto& e : v->arr) pos.push_back(e);
      } else if (a->kind != Node::KwArg && a->kind != Node::KwSpread) {
        pos.push_back(eval(*a, env));
      }
    }
    for (const Ast* a : items) {
      if (a->kind == Node::KwArg) {
        if (kw->get(a->str)) rt(*a, "keyword argument '" + a->str + "' given twice");
        kw->put(a->str, eval(*a->kids[0], env));
      } else if (a->kind == Node::KwSpread) {
        ValuePtr v = eval(*a->kids[0], env);
        if (v->type != Type::Object) rt(*a, "argument after ** must be a mapping");
        for (auto& [k, e] : v->obj) kw->put(k, e);
      }
    }
    if (!kw->obj.empty()) pos.push_back(kw);
    return pos;
  }
  std::vector<ValuePtr> eval_args(const Ast& call, size_t from, Env& env) { return eval_list(call.kids, env, from); }

  void bind(const Ast& n, const std::vector<AstPtr>& params, std::vector<ValuePtr> args, Env& scope) {
    ValuePtr kw;
    if (!args.empty() && args.back()->type == Type::KwArgs) {
      kw = args.back();
      args.pop_back();
    }
    std::vector<std::pair<std::string, const Ast*>> defaults;
    auto extra_kw = make_object();
    if (kw) extra_kw->obj = kw->obj;
    for (size_t k = 0; k < params.size(); ++k) {
      const Ast& p = *params[k];
      const std::string& name = p.str;
      ValuePtr v = k < args.size() ? args[k] : nullptr;
      if (!v && extra_kw->get(name)) {
        v = extra_kw->get(name);
        extra_kw->obj.erase(std::find_if(extra_kw->obj.begin(), extra_kw->obj.end(), [&](auto& e) { return e.first == name; }));
      }
      if (!v && p.kind == Node::KwArg) defaults.emplace_back(name, p.kids[0].get());
      scope.set(name, v ? v : make_undefined());
    }
    scope.set("kwargs", extra_kw);
    std::vector<ValuePtr> rest;
    for (size_t k = params.size(); k < args.size(); ++k) rest.push_back(args[k]);
    scope.set("varargs", make_array(std::move(rest)));
    for (auto& [name, expr] : defaults) scope.set(name, eval(*expr, scope));
    (void)n;
  }

  ValuePtr eval_for(const Ast& n, Env& env) {
    Env scope(&env);
    const Ast& var = *n.kids[0];
    const Ast* iter_node = n.kids[1].get();
    const Ast* cond = nullptr;
    if (iter_node->kind == Node::Select) {
      cond = iter_node->kids[1].get();
      iter_node = iter_node->kids[0].get();
    }
    ValuePtr it = eval(*iter_node, scope);
    std::vector<ValuePtr> items;
    if (it->type == Type::Array) {
      items = it->arr;
    } else if (it->type == Type::Object) {
      for (auto& kv : it->obj) items.push_back(make_string(kv.first));
    } else {
      rt(n, std::string("for loop needs a list or mapping, got ") + it->type_name());
    }
    auto assign = [&](Env& e, const ValuePtr& cur) {
      if (var.kind == Node::Ident) {
        e.set(var.str, cur);
        return;
      }
      if (cur->type != Type::Array) rt(n, std::string("cannot unpack ") + cur->type_name());
      if (cur->arr.size() != var.kids.size()) rt(n, "wrong number of items to unpack");
      for (size_t k = 0; k < var.kids.size(); ++k) {
        if (var.kids[k]->kind != Node::Ident) rt(n, "can only unpack into names");
        e.set(var.kids[k]->str, cur->arr[k]);
      }
    };
    if (cond) {
      std::vector<ValuePtr> kept;
      for (auto& cur : items) {
        Env le(&scope);
        assign(le, cur);
        if (eval(*cond, le)->truthy()) kept.push_back(cur);
      }
      items.swap(kept);
    }
    std::string out;
    bool none = true;
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      auto loop = make_object();
      loop->put("index", make_int(i + 1));
      loop->put("index0", make_int(i));
      loop->put("revindex", make_int(len - i));
      loop->put("revindex0", make_int(len - i - 1));
      loop->put("first", make_bool(i == 0));
      loop->put("last", make_bool(i == len - 1));
      loop->put("length", make_int(len));
      loop->put("previtem", i > 0 ? items[size_t(i - 1)] : make_undefined());
      loop->put("nextitem", i < len - 1 ? items[size_t(i + 1)] : make_undefined());
      scope.set("loop", loop);
      assign(scope, items[size_t(i)]);
      try {
        out += block(n.body, scope);
      } catch (const ContinueSignal&) {
        continue;
      } catch (const BreakSignal&) {
        break;
      }
      none = false;
    }
    if (none) out += block(n.alt, scope);
    return make_string(out);
  }

  ValuePtr eval_set(const Ast& n, Env& env) {
    ValuePtr rhs = n.kids.size() > 1 ? eval(*n.kids[1], env) : make_string(block(n.body, env));
    const Ast& lhs = *n.kids[0];
    if (lhs.kind == Node::Ident) {
      env.set(lhs.str, rhs);
    } else if (lhs.kind == Node::Tuple) {
      if (rhs->type != Type::Array) rt(n, std::string("cannot unpack ") + rhs->type_name() + " in set");
      if (rhs->arr.size() != lhs.kids.size()) rt(n, "wrong number of items to unpack in set");
      for (size_t k = 0; k < lhs.kids.size(); ++k) {
        if (lhs.kids[k]->kind != Node::Ident) rt(n, "can only unpack into names");
        env.set(lhs.kids[k]->str, rhs->arr[k]);
      }
    } else if (lhs.kind == Node::Member) {
      ValuePtr obj = eval(*lhs.kids[0], env);
      if (obj->type != Type::Namespace) rt(n, "cannot assign an attribute of something that is not a namespace");
      if (lhs.flag || lhs.kids[1]->kind != Node::Ident) rt(n, "namespace attribute must be a name");
      obj->put(lhs.kids[1]->str, rhs);
    } else {
      rt(n, "invalid left-hand side in set");
    }
    return make_null();
  }

  ValuePtr eval_member(const Ast& n, Env& env) {
    ValuePtr obj = eval(*n.kids[0], env);
    const Ast& p = *n.kids[1];
    if (n.flag && p.kind == Node::Slice) {
      ValuePtr a = p.kids[0] ? eval(*p.kids[0], env) : make_undefined();
      ValuePtr b = p.kids[1] ? eval(*p.kids[1], env) : make_undefined();
      ValuePtr c = p.kids[2] ? eval(*p.kids[2], env) : make_undefined();
      for (auto* v : {a.get(), b.get(), c.get()})
        if (v->type != Type::Int && v->type != Type::Undefined) rt(n, "slice bounds must be integers");
      if (obj->type == Type::Array) return make_array(py_slice(obj->arr, a.get(), b.get(), c.get()));
      if (obj->type == Type::String) {
        auto cps = py_slice(code_points(obj->s), a.get(), b.get(), c.get());
        return make_string(from_cps(cps, 0, cps.size()));
      }
      rt(n, std::string("cannot slice ") + obj->type_name());
    }
    ValuePtr key;
    if (n.flag)
      key = eval(p, env);
    else if (p.kind == Node::Int)
      key = make_int(int64_t(p.num));
    else
      key = make_string(p.str);
    ValuePtr r;
    if (obj->type == Type::Object || obj->type == Type::Namespace || obj->type == Type::KwArgs) {
      if (key->type != Type::String) rt(n, std::string("cannot access a property with ") + key->type_name());
      r = obj->get(key->s);
      if (!r && obj->type == Type::Object) r = object_member(obj, key->s);
    } else if (obj->type == Type::Array || obj->type == Type::String) {
      if (key->type == Type::Int) {
        if (obj->type == Type::Array) {
          int64_t k = key->i < 0 ? int64_t(obj->arr.size()) + key->i : key->i;
          if (k >= 0 && k < int64_t(obj->arr.size())) r = obj->arr[size_t(k)];
        } else {
          auto cps = code_points(obj->s);
          int64_t k = key->i < 0 ? int64_t(cps.size()) + key->i : key->i;
          if (k >= 0 && k < int64_t(cps.size())) r = make_string(from_cps(cps, size_t(k), size_t(k) + 1));
        }
      } else if (key->type == Type::String) {
        if (obj->type == Type::Array && key->s == "length") r = make_int(int64_t(obj->arr.size()));
        if (obj->type == Type::String) r = string_member(obj, key->s);
      } else {
        rt(n, std::string("cannot index with ") + key->type_name());
      }
    } else if (key->type != Type::String) {
      rt(n, std::string("cannot access a property with ") + key->type_name());
    }
    return r ? r : make_undefined();
  }

  ValuePtr eval_binary(const Ast& n, Env& env) {
    ValuePtr l = eval(*n.kids[0], env);
    const std::string& op = n.str;
    if (op == "and") return l->truthy() ? eval(*n.kids[1], env) : l;
    if (op == "or") return l->truthy() ? l : eval(*n.kids[1], env);
    ValuePtr r = eval(*n.kids[1], env);
    if (op == "==") return make_bool(loose_eq(*l, *r));
    if (op == "!=") return make_bool(!loose_eq(*l, *r));
    if (l->type == Type::Undefined || r->type == Type::Undefined) {
      if (r->type == Type::Undefined && (op == "in" || op == "not in")) return make_bool(op == "not in");
      rt(n, "cannot apply '" + op + "' to an undefined value");
    }
    if (l->type == Type::Null || r->type == Type::Null) rt(n, "cannot apply '" + op + "' to none");
    if (op == "~") return make_string(js_to_string(*l) + js_to_string(*r));
    if (op == "**" && numeric(*l) && numeric(*r)) {
      double a = num(*l), b = num(*r), res = std::pow(a, b);
      if (!std::isfinite(res)) rt(n, "exponentiation result is not finite");
      if (l->type == Type::Float || r->type == Type::Float || b < 0) return make_float(res);
      return make_int(int64_t(res));
    }
    const bool ln = l->type == Type::Int || l->type == Type::Float, rn = r->type == Type::Int || r->type == Type::Float;
    if (ln && rn) {
      const bool fl = l->type == Type::Float || r->type == Type::Float;
      double a = num(*l), b = num(*r);
      if (op == "+" || op == "-" || op == "*") {
        if (!fl) return make_int(op == "+" ? l->i + r->i : op == "-" ? l->i - r->i : l->i * r->i);
        return make_float(op == "+" ? a + b : op == "-" ? a - b : a * b);
      }
      if (op == "/") return make_float(a / b);
      if (op == "//") {
        if (b == 0) rt(n, "integer division by zero");
        double q = std::floor(a / b);
        return fl ? make_float(q) : make_int(int64_t(q));
      }
      if (op == "%") {
        if (b == 0) rt(n, "modulo by zero");
        return fl ? make_float(std::fmod(a, b)) : make_int(l->i % r->i);
      }
      if (op == "<") return make_bool(a < b);
      if (op == ">") return make_bool(a > b);
      if (op == "<=") return make_bool(a <= b);
      if (op == ">=") return make_bool(a >= b);
    } else if (l->type == Type::Array && r->type == Type::Array) {
      if (op == "+") {
        auto a = l->arr;
        a.insert(a.end(), r->arr.begin(), r->arr.end());
        return make_array(std::move(a));
      }
    } else if (r->type == Type::Array) {
      bool member = false;
      for (const auto& e : r->arr) member = member || strict_eq(*e, *l);
      if (op == "in") return make_bool(member);
      if (op == "not in") return make_bool(!member);
    }
    if ((l->type == Type::String || r->type == Type::String) && op == "+")
      return make_string(js_to_string(*l) + js_to_string(*r));
    if (l->type == Type::String && r->type == Type::String) {
      if (op == "in") return make_bool(r->s.find(l->s) != std::string::npos);
      if (op == "not in") return make_bool(r->s.find(l->s) == std::string::npos);
      if (op == "<" || op == ">" || op == "<=" || op == ">=") {
        int c = l->s.compare(r->s);
        return make_bool(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
      }
    }
    if (l->type == Type::String && r->type == Type::Object) {
      if (op == "in") return make_bool(r->get(l->s) != nullptr);
      if (op == "not in") return make_bool(r->get(l->s) == nullptr);
    }
    rt(n, "unsupported operator '" + op + "' between " + l->type_name() + " and " + r->type_name());
  }

  bool test(const Ast& n, const Value& v, const std::string& name) {
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
      if (v.type != Type::Int) rt(n, "cannot test " + name + " on " + v.type_name());
      return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "lower") return v.type == Type::String && v.s == map_case(v.s, false);
    if (name == "upper") return v.type == Type::String && v.s == map_case(v.s, true);
    rt(n, "unsupported test '" + name + "'");
  }

  ValuePtr apply_filter(const Ast& n, const ValuePtr& v, const std::string& name, std::vector<ValuePtr> args, Env& env,
                        bool called = false) {
    (void)env;
    if (name == "safe") return v;
    if (name == "tojson") {
      JsonOptions o;
      if (auto ind = kwarg(args, "indent")) {
        if (ind->type == Type::Int) o.indent = int(ind->i);
        else if (ind->type != Type::Null) rt(n, "tojson: indent must be an integer");
      }
      if (auto a = kwarg(args, "ensure_ascii")) o.ensure_ascii = a->truthy();
      if (auto a = kwarg(args, "sort_keys")) o.sort_keys = a->truthy();
      if (auto sp = kwarg(args, "separators")) {
        if (sp->type == Type::Array && sp->arr.size() == 2 && sp->arr[0]->type == Type::String && sp->arr[1]->type == Type::String) {
          o.custom_seps = true;
          o.item_sep = sp->arr[0]->s;
          o.key_sep = sp->arr[1]->s;
        } else if (sp->type != Type::Null) {
          rt(n, "tojson: separators must be a pair of strings");
        }
      }
      return make_string(to_json(*v, o));
    }
    if (name == "default" || name == "d") {
      ValuePtr def = positional_count(args) > 0 ? args[0] : make_string("");
      ValuePtr boolean = arg(args, 1, "boolean");
      bool b = boolean && boolean->truthy();
      if (v->type == Type::Undefined || (b && !v->truthy())) return def;
      return v;
    }
    if (name == "join") {
      std::vector<std::string> parts;
      if (v->type == Type::String) {
        for (uint32_t c : code_points(v->s)) {
          std::string s;
          utf8_append(s, c);
          parts.push_back(s);
        }
      } else if (v->type == Type::Array) {
        for (const auto& e : v->arr) parts.push_back(e->type == Type::Null || e->type == Type::Undefined ? "" : js_to_string(*e));
      } else {
        rt(n, std::string("join needs a list, got ") + v->type_name());
      }
      ValuePtr sep = arg(args, 0, "separator");
      if (!called && v->type == Type::String) return v;
      std::string s, sp = sep && sep->type == Type::String ? sep->s : "";
      for (size_t k = 0; k < parts.size(); ++k) s += (k ? sp : "") + parts[k];
      return make_string(s);
    }
    if (name == "length" || name == "count") {
      if (v->type == Type::String) return make_int(js_length(v->s));
      if (v->type == Type::Array) return make_int(int64_t(v->arr.size()));
      if (v->type == Type::Object) return make_int(int64_t(v->obj.size()));
      rt(n, std::string("length of ") + v->type_name());
    }
    if (name == "string") {
      if (v->type == Type::Array) return make_string(to_json(*v, JsonOptions{}, 0, false));
      return make_string(v->to_string());
    }
    if (name == "trim") {
      if (v->type != Type::String) rt(n, "trim needs a string");
      return make_string(js_trim(v->s, true, true));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      if (v->type != Type::String) rt(n, name + " needs a string");
      ValuePtr f = string_member(v, name);
      std::vector<ValuePtr> none;
      return f->fn(none, env);
    }
    if (name == "items") {
      if (v->type != Type::Object) rt(n, "items needs a mapping");
      std::vector<ValuePtr> none;
      return object_member(v, "items")->fn(none, env);
    }
    if (name == "list") {
      if (v->type == Type::Array) return v;
      if (v->type == Type::String) {
        std::vector<ValuePtr> out;
        for (uint32_t c : code_points(v->s)) {
          std::string s;
          utf8_append(s, c);
          out.push_back(make_string(s));
        }
        return make_array(std::move(out));
      }
      rt(n, std::string("list of ") + v->type_name());
    }
    if (name == "first" || name == "last") {
      if (v->type != Type::Array) rt(n, name + " needs a list");
      if (v->arr.empty()) return make_undefined();
      return name == "first" ? v->arr.front() : v->arr.back();
    }
    if (name == "reverse") {
      if (v->type != Type::Array) rt(n, "reverse needs a list");
      auto a = v->arr;
      std::reverse(a.begin(), a.end());
      return make_array(std::move(a));
    }
    if (name == "int" || name == "float") {
      ValuePtr def = arg(args, 0, "default");
      if (v->type == Type::String) {
        const char* s = v->s.c_str();
        char* end = nullptr;
        double d = name == "int" ? double(std::strtoll(s, &end, 10)) : std::strtod(s, &end);
        if (end == s) return def ? def : (name == "int" ? make_int(0) : make_float(0));
        return name == "int" ? make_int(int64_t(d)) : make_float(d);
      }
      if (v->type == Type::Int || v->type == Type::Float) {
        if (called) return v;
        return name == "int" ? make_int(int64_t(std::floor(num(*v)))) : make_float(num(*v));
      }
      if (v->type == Type::Bool) return name == "int" ? make_int(v->b) : make_float(v->b);
      rt(n, name + " of " + v->type_name());
    }
    if (name == "abs") {
      if (v->type == Type::Int) return make_int(std::llabs(v->i));
      if (v->type == Type::Float) return make_float(std::fabs(v->f));
      rt(n, "abs needs a number");
    }
    if (name == "indent") {
      if (v->type != Type::String) rt(n, "indent needs a string");
      ValuePtr w = arg(args, 0, "width");
      ValuePtr first = arg(args, 1, "first");
      ValuePtr blank = arg(args, 2, "blank");
      std::string pad = w && w->type == Type::String ? w->s : std::string(size_t(w && w->type == Type::Int ? w->i : 4), ' ');
      std::string out;
      size_t start = 0, k = 0;
      while (true) {
        size_t e = v->s.find('\n', start);
        std::string line = v->s.substr(start, e == std::string::npos ? std::string::npos : e - start);
        bool do_pad = (k == 0 ? (first && first->truthy()) : true) && (!line.empty() || (blank && blank->truthy()));
        out += (k ? "\n" : "") + (do_pad ? pad : "") + line;
        if (e == std::string::npos) break;
        start = e + 1;
        ++k;
      }
      return make_string(out);
    }
    if (name == "replace") {
      if (v->type != Type::String) rt(n, "replace needs a string");
      return string_member(v, "replace")->fn(args, env);
    }
    if (name == "map" || name == "selectattr" || name == "rejectattr") {
      if (v->type != Type::Array) rt(n, name + " needs a list");
      std::vector<ValuePtr> out;
      if (name == "map") {
        ValuePtr attr = kwarg(args, "attribute");
        if (!attr || attr->type != Type::String) {
          if (positional_count(args) > 0 && args[0]->type == Type::String) {
            std::string fname = args[0]->s;
            std::vector<ValuePtr> rest(args.begin() + 1, args.end());
            for (const auto& e : v->arr) out.push_back(apply_filter(n, e, fname, rest, env, rest.size() > 0));
            return make_array(std::move(out));
          }
          rt(n, "map needs attribute= or a filter name");
        }
        ValuePtr def = kwarg(args, "default");
        for (const auto& e : v->arr) {
          ValuePtr x = e->type == Type::Object ? e->get(attr->s) : nullptr;
          out.push_back(x ? x : (def ? def : make_undefined()));
        }
        return make_array(std::move(out));
      }
      if (positional_count(args) < 1 || args[0]->type != Type::String) rt(n, name + " needs an attribute name");
      const std::string attr = args[0]->s;
      for (const auto& e : v->arr) {
        ValuePtr x = e->type == Type::Object ? e->get(attr) : nullptr;
        if (!x) x = make_undefined();
        bool ok;
        if (positional_count(args) >= 2) {
          if (args[1]->type != Type::String) rt(n, name + ": test name must be a string");
          const std::string t = args[1]->s;
          if ((t == "equalto" || t == "eq" || t == "==") && positional_count(args) >= 3)
            ok = strict_eq(*x, *args[2]);
          else
            ok = test(n, *x, t);
        } else {
          ok = x->truthy();
        }
        if (ok == (name == "selectattr")) out.push_back(e);
      }
      return make_array(std::move(out));
    }
    if (name == "unique") {
      if (v->type != Type::Array) rt(n, "unique needs a list");
      std::vector<ValuePtr> out;
      for (const auto& e : v->arr) {
        bool seen = false;
        for (const auto& o : out) seen = seen || strict_eq(*o, *e);
        if (!seen) out.push_back(e);
      }
      return make_array(std::move(out));
    }
    rt(n, "unsupported filter '" + name + "'");
  }
};

}  // namespace


Template::Template(const std::string& source) { program_ = parse(lex(source)); }
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::json& context) const {
  Env global;
  global.set("true", make_bool(true));
  global.set("false", make_bool(false));
  global.set("none", make_null());
  global.set("True", make_bool(true));
  global.set("False", make_bool(false));
  global.set("None", make_null());
  global.set("raise_exception", make_function([](std::vector<ValuePtr>& args, Env&) -> ValuePtr {
               fail("raise_exception: {}", args.empty() ? std::string() : args[0]->to_string());
             }));
  global.set("range", make_function([](std::vector<ValuePtr>& args, Env&) {
               std::vector<int64_t> a;
               for (size_t k = 0; k < positional_count(args); ++k) {
                 if (args[k]->type != Type::Int) fail("range() arguments must be integers");
                 a.push_back(args[k]->i);
               }
               if (a.empty() || a.size() > 3) fail("range() takes 1 to 3 arguments");
               int64_t start = a.size() == 1 ? 0 : a[0], stop = a.size() == 1 ? a[0] : a[1], step = a.size() == 3 ? a[2] : 1;
               if (step == 0) fail("range() step must not be zero");
               std::vector<ValuePtr> out;
               for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
                 out.push_back(make_int(k));
                 if (out.size() > 10000000) fail("range() too long");
               }
               return make_array(std::move(out));
             }));
  global.set("namespace", make_function([](std::vector<ValuePtr>& args, Env&) {
               auto ns = std::make_shared<Value>();
               ns->type = Type::Namespace;
               size_t npos = positional_count(args);
               if (npos > 1) fail("namespace() takes at most 1 positional argument");
               if (npos == 1) {
                 if (args[0]->type != Type::Object) fail("namespace() argument must be a mapping");
                 ns->obj = args[0]->obj;
               }
               if (npos < args.size())
                 for (auto& [k, v] : args.back()->obj) ns->put(k, v);
               return ns;
             }));
  if (!context.is_object()) fail("template context must be a JSON object");
  for (const auto& [k, v] : context.items()) global.set(k, from_json(v));
  Interp in;
  return in.block(program_, global);
}

}  // namespace sluice::text::jinja
