// The Jinja interpreter: statements and expressions over the syntax tree
// (text/jinja/ast.h), with filters in text/jinja/filters.cpp and the shared
// value helpers in text/jinja/builtins.cpp.
#include <algorithm>
#include <cmath>
#include <map>

#include "text/jinja.h"
#include "text/jinja/ast.h"
#include "text/jinja/builtins.h"
#include "text/jinja/env.h"
#include "text/jinja/filters.h"
#include "text/jinja/value.h"
#include "text/utf8.h"
#include "util/error.h"
#include "util/json_depth.h"

namespace sluice::text::jinja {

namespace {

struct BreakSignal {};
struct ContinueSignal {};

// Nested evaluations at most (a macro calling itself, deep nesting). Each level holds a few
// frames of eval/eval_inner/block; under AddressSanitizer eval_inner's frame alone is ~8 KiB,
// and 1,000 levels overflowed an 8 MiB stack (found by the fuzzer). Real chat templates nest
// a few dozen levels.
constexpr int kMaxEvalDepth = 256;

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
        fail_at(*s, e.what());
      }
    }
    return out;
  }

  ValuePtr eval(const Ast& n, Env& env) {
    struct Depth {
      int& d;
      explicit Depth(int& x, const Ast& n) : d(x) {
        if (++d > kMaxEvalDepth) fail_at(n, "recursion too deep (macro calling itself?)");
      }
      ~Depth() { --d; }
    } depth(depth_, n);
    try {
      return eval_inner(n, env);
    } catch (const Error& e) {
      std::string m = e.what();
      if (m.rfind("template line ", 0) == 0) throw;
      fail_at(n, m);
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
      case Node::Macro: return eval_macro(n, env);
      case Node::CallBlock: return eval_call_block(n, env);
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
          if (key->type != Type::String) fail_at(n, "object literal keys must be strings");
          o->put(key->s, eval(*n.kids[k + 1], env));
        }
        return o;
      }
      case Node::Member: return eval_member(n, env);
      case Node::Call: {
        std::vector<ValuePtr> args = eval_args(n, 1, env);
        ValuePtr f = eval(*n.kids[0], env);
        if (f->type != Type::Function) fail_at(n, std::string("cannot call something that is not a function: got ") + f->type_name());
        return f->fn(args, env);
      }
      case Node::Binary: return eval_binary(n, env);
      case Node::Unary: {
        ValuePtr a = eval(*n.kids[0], env);
        if (n.str == "not") return make_bool(!a->truthy());
        if (!numeric(*a)) fail_at(n, "unary " + n.str + " needs a number, got " + a->type_name());
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
        bool r = apply_test(n, *v, n.str);
        return make_bool(n.flag ? !r : r);
      }
      case Node::Ternary: return eval(*n.kids[0], env)->truthy() ? eval(*n.kids[1], env) : eval(*n.kids[2], env);
      case Node::Select: return eval(*n.kids[1], env)->truthy() ? eval(*n.kids[0], env) : make_undefined();
      default: fail_at(n, "unsupported expression");
    }
  }

  // {% macro NAME(PARAMS) %}: defines NAME as a function in env.
  ValuePtr eval_macro(const Ast& n, Env& env) {
    const Ast* node = &n;
    env.set(n.str, make_function([this, node](std::vector<ValuePtr>& args, Env& scope) {
              Env mscope(&scope);
              bind(*node, node->params, args, mscope);
              return make_string(block(node->body, mscope));
            }));
    return make_null();
  }

  // {% call MACRO(ARGS) %}BODY{% endcall %}: MACRO called with `caller` rendering BODY.
  ValuePtr eval_call_block(const Ast& n, Env& env) {
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
    if (f->type != Type::Function) fail_at(n, "cannot call something that is not a function");
    Env cenv(&env);
    cenv.set("caller", caller);
    return f->fn(args, cenv);
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
        if (v->type != Type::Array) fail_at(*a, "cannot unpack a non-list with *");
        for (auto& e : v->arr) pos.push_back(e);
      } else if (a->kind != Node::KwArg && a->kind != Node::KwSpread) {
        pos.push_back(eval(*a, env));
      }
    }
    for (const Ast* a : items) {
      if (a->kind == Node::KwArg) {
        if (kw->get(a->str)) fail_at(*a, "keyword argument '" + a->str + "' given twice");
        kw->put(a->str, eval(*a->kids[0], env));
      } else if (a->kind == Node::KwSpread) {
        ValuePtr v = eval(*a->kids[0], env);
        if (v->type != Type::Object) fail_at(*a, "argument after ** must be a mapping");
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
      fail_at(n, std::string("for loop needs a list or mapping, got ") + it->type_name());
    }
    auto assign = [&](Env& e, const ValuePtr& cur) {
      if (var.kind == Node::Ident) {
        e.set(var.str, cur);
        return;
      }
      if (cur->type != Type::Array) fail_at(n, std::string("cannot unpack ") + cur->type_name());
      if (cur->arr.size() != var.kids.size()) fail_at(n, "wrong number of items to unpack");
      for (size_t k = 0; k < var.kids.size(); ++k) {
        if (var.kids[k]->kind != Node::Ident) fail_at(n, "can only unpack into names");
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
      if (rhs->type != Type::Array) fail_at(n, std::string("cannot unpack ") + rhs->type_name() + " in set");
      if (rhs->arr.size() != lhs.kids.size()) fail_at(n, "wrong number of items to unpack in set");
      for (size_t k = 0; k < lhs.kids.size(); ++k) {
        if (lhs.kids[k]->kind != Node::Ident) fail_at(n, "can only unpack into names");
        env.set(lhs.kids[k]->str, rhs->arr[k]);
      }
    } else if (lhs.kind == Node::Member) {
      ValuePtr obj = eval(*lhs.kids[0], env);
      if (obj->type != Type::Namespace) fail_at(n, "cannot assign an attribute of something that is not a namespace");
      if (lhs.flag || lhs.kids[1]->kind != Node::Ident) fail_at(n, "namespace attribute must be a name");
      obj->put(lhs.kids[1]->str, rhs);
    } else {
      fail_at(n, "invalid left-hand side in set");
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
        if (v->type != Type::Int && v->type != Type::Undefined) fail_at(n, "slice bounds must be integers");
      if (obj->type == Type::Array) return make_array(py_slice(obj->arr, a.get(), b.get(), c.get()));
      if (obj->type == Type::String) {
        auto cps = py_slice(code_points(obj->s), a.get(), b.get(), c.get());
        return make_string(from_cps(cps, 0, cps.size()));
      }
      fail_at(n, std::string("cannot slice ") + obj->type_name());
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
      if (key->type != Type::String) fail_at(n, std::string("cannot access a property with ") + key->type_name());
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
        fail_at(n, std::string("cannot index with ") + key->type_name());
      }
    } else if (key->type != Type::String) {
      fail_at(n, std::string("cannot access a property with ") + key->type_name());
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
      fail_at(n, "cannot apply '" + op + "' to an undefined value");
    }
    if (l->type == Type::Null || r->type == Type::Null) fail_at(n, "cannot apply '" + op + "' to none");
    if (op == "~") return make_string(js_to_string(*l) + js_to_string(*r));
    if (op == "**" && numeric(*l) && numeric(*r)) {
      double a = num(*l), b = num(*r), res = std::pow(a, b);
      if (!std::isfinite(res)) fail_at(n, "exponentiation result is not finite");
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
        if (b == 0) fail_at(n, "integer division by zero");
        double q = std::floor(a / b);
        return fl ? make_float(q) : make_int(int64_t(q));
      }
      if (op == "%") {
        if (b == 0) fail_at(n, "modulo by zero");
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
    fail_at(n, "unsupported operator '" + op + "' between " + l->type_name() + " and " + r->type_name());
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
  for (const auto& [k, v] : context.items()) {
    check_json_depth(v, fmt::format("template variable '{}'", k));  // from_json recurses
    global.set(k, from_json(v));
  }
  Interp in;
  return in.block(program_, global);
}

}  // namespace sluice::text::jinja
