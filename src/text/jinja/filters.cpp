#include "text/jinja/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "text/jinja/env.h"
#include "text/utf8.h"

namespace sluice::text::jinja {

namespace {

using Filter = ValuePtr (*)(const FilterCall&);

ValuePtr filter_safe(const FilterCall& f) {
  return f.v;
}

ValuePtr filter_tojson(const FilterCall& f) {
  JsonOptions o;
  if (auto ind = kwarg(f.args, "indent")) {
    if (ind->type == Type::Int) o.indent = int(ind->i);
    else if (ind->type != Type::Null) fail_at(f.n, "tojson: indent must be an integer");
  }
  if (auto a = kwarg(f.args, "ensure_ascii")) o.ensure_ascii = a->truthy();
  if (auto a = kwarg(f.args, "sort_keys")) o.sort_keys = a->truthy();
  if (auto sp = kwarg(f.args, "separators")) {
    if (sp->type == Type::Array && sp->arr.size() == 2 && sp->arr[0]->type == Type::String && sp->arr[1]->type == Type::String) {
      o.custom_seps = true;
      o.item_sep = sp->arr[0]->s;
      o.key_sep = sp->arr[1]->s;
    } else if (sp->type != Type::Null) {
      fail_at(f.n, "tojson: separators must be a pair of strings");
    }
  }
  return make_string(to_json(*f.v, o));
}

ValuePtr filter_default(const FilterCall& f) {
  ValuePtr def = positional_count(f.args) > 0 ? f.args[0] : make_string("");
  ValuePtr boolean = arg(f.args, 1, "boolean");
  bool b = boolean && boolean->truthy();
  if (f.v->type == Type::Undefined || (b && !f.v->truthy())) return def;
  return f.v;
}

ValuePtr filter_join(const FilterCall& f) {
  std::vector<std::string> parts;
  if (f.v->type == Type::String) {
    for (uint32_t c : code_points(f.v->s)) {
      std::string s;
      utf8_append(s, c);
      parts.push_back(s);
    }
  } else if (f.v->type == Type::Array) {
    for (const auto& e : f.v->arr) parts.push_back(e->type == Type::Null || e->type == Type::Undefined ? "" : js_to_string(*e));
  } else {
    fail_at(f.n, std::string("join needs a list, got ") + f.v->type_name());
  }
  ValuePtr sep = arg(f.args, 0, "separator");
  if (!f.called && f.v->type == Type::String) return f.v;
  std::string s, sp = sep && sep->type == Type::String ? sep->s : "";
  for (size_t k = 0; k < parts.size(); ++k) s += (k ? sp : "") + parts[k];
  return make_string(s);
}

ValuePtr filter_length(const FilterCall& f) {
  if (f.v->type == Type::String) return make_int(js_length(f.v->s));
  if (f.v->type == Type::Array) return make_int(int64_t(f.v->arr.size()));
  if (f.v->type == Type::Object) return make_int(int64_t(f.v->obj.size()));
  fail_at(f.n, std::string("length of ") + f.v->type_name());
}

ValuePtr filter_string(const FilterCall& f) {
  if (f.v->type == Type::Array) return make_string(to_json(*f.v, JsonOptions{}, 0, false));
  return make_string(f.v->to_string());
}

ValuePtr filter_trim(const FilterCall& f) {
  if (f.v->type != Type::String) fail_at(f.n, "trim needs a string");
  return make_string(js_trim(f.v->s, true, true));
}

ValuePtr filter_upper(const FilterCall& f) {
  if (f.v->type != Type::String) fail_at(f.n, f.name + " needs a string");
  ValuePtr method = string_member(f.v, f.name);
  std::vector<ValuePtr> none;
  return method->fn(none, f.env);
}

ValuePtr filter_items(const FilterCall& f) {
  if (f.v->type != Type::Object) fail_at(f.n, "items needs a mapping");
  std::vector<ValuePtr> none;
  return object_member(f.v, "items")->fn(none, f.env);
}

ValuePtr filter_list(const FilterCall& f) {
  if (f.v->type == Type::Array) return f.v;
  if (f.v->type == Type::String) {
    std::vector<ValuePtr> out;
    for (uint32_t c : code_points(f.v->s)) {
      std::string s;
      utf8_append(s, c);
      out.push_back(make_string(s));
    }
    return make_array(std::move(out));
  }
  fail_at(f.n, std::string("list of ") + f.v->type_name());
}

ValuePtr filter_first(const FilterCall& f) {
  if (f.v->type != Type::Array) fail_at(f.n, f.name + " needs a list");
  if (f.v->arr.empty()) return make_undefined();
  return f.name == "first" ? f.v->arr.front() : f.v->arr.back();
}

ValuePtr filter_reverse(const FilterCall& f) {
  if (f.v->type != Type::Array) fail_at(f.n, "reverse needs a list");
  auto a = f.v->arr;
  std::reverse(a.begin(), a.end());
  return make_array(std::move(a));
}

ValuePtr filter_int(const FilterCall& f) {
  ValuePtr def = arg(f.args, 0, "default");
  if (f.v->type == Type::String) {
    const char* s = f.v->s.c_str();
    char* end = nullptr;
    double d = f.name == "int" ? double(std::strtoll(s, &end, 10)) : std::strtod(s, &end);
    if (end == s) return def ? def : (f.name == "int" ? make_int(0) : make_float(0));
    return f.name == "int" ? make_int(int64_t(d)) : make_float(d);
  }
  if (f.v->type == Type::Int || f.v->type == Type::Float) {
    if (f.called) return f.v;
    return f.name == "int" ? make_int(int64_t(std::floor(num(*f.v)))) : make_float(num(*f.v));
  }
  if (f.v->type == Type::Bool) return f.name == "int" ? make_int(f.v->b) : make_float(f.v->b);
  fail_at(f.n, f.name + " of " + f.v->type_name());
}

ValuePtr filter_abs(const FilterCall& f) {
  if (f.v->type == Type::Int) return make_int(std::llabs(f.v->i));
  if (f.v->type == Type::Float) return make_float(std::fabs(f.v->f));
  fail_at(f.n, "abs needs a number");
}

ValuePtr filter_indent(const FilterCall& f) {
  if (f.v->type != Type::String) fail_at(f.n, "indent needs a string");
  ValuePtr w = arg(f.args, 0, "width");
  ValuePtr first = arg(f.args, 1, "first");
  ValuePtr blank = arg(f.args, 2, "blank");
  std::string pad = w && w->type == Type::String ? w->s : std::string(size_t(w && w->type == Type::Int ? w->i : 4), ' ');
  std::string out;
  size_t start = 0, k = 0;
  while (true) {
    size_t e = f.v->s.find('\n', start);
    std::string line = f.v->s.substr(start, e == std::string::npos ? std::string::npos : e - start);
    bool do_pad = (k == 0 ? (first && first->truthy()) : true) && (!line.empty() || (blank && blank->truthy()));
    out += (k ? "\n" : "") + (do_pad ? pad : "") + line;
    if (e == std::string::npos) break;
    start = e + 1;
    ++k;
  }
  return make_string(out);
}

ValuePtr filter_replace(const FilterCall& f) {
  if (f.v->type != Type::String) fail_at(f.n, "replace needs a string");
  return string_member(f.v, "replace")->fn(f.args, f.env);
}

ValuePtr filter_map(const FilterCall& f) {
  if (f.v->type != Type::Array) fail_at(f.n, f.name + " needs a list");
  std::vector<ValuePtr> out;
  if (f.name == "map") {
    ValuePtr attr = kwarg(f.args, "attribute");
    if (!attr || attr->type != Type::String) {
      if (positional_count(f.args) > 0 && f.args[0]->type == Type::String) {
        std::string fname = f.args[0]->s;
        std::vector<ValuePtr> rest(f.args.begin() + 1, f.args.end());
        for (const auto& e : f.v->arr) out.push_back(apply_filter(f.n, e, fname, rest, f.env, rest.size() > 0));
        return make_array(std::move(out));
      }
      fail_at(f.n, "map needs attribute= or a filter name");
    }
    ValuePtr def = kwarg(f.args, "default");
    for (const auto& e : f.v->arr) {
      ValuePtr x = e->type == Type::Object ? e->get(attr->s) : nullptr;
      out.push_back(x ? x : (def ? def : make_undefined()));
    }
    return make_array(std::move(out));
  }
  if (positional_count(f.args) < 1 || f.args[0]->type != Type::String) fail_at(f.n, f.name + " needs an attribute name");
  const std::string attr = f.args[0]->s;
  for (const auto& e : f.v->arr) {
    ValuePtr x = e->type == Type::Object ? e->get(attr) : nullptr;
    if (!x) x = make_undefined();
    bool ok;
    if (positional_count(f.args) >= 2) {
      if (f.args[1]->type != Type::String) fail_at(f.n, f.name + ": test name must be a string");
      const std::string t = f.args[1]->s;
      if ((t == "equalto" || t == "eq" || t == "==") && positional_count(f.args) >= 3)
        ok = strict_eq(*x, *f.args[2]);
      else
        ok = apply_test(f.n, *x, t);
    } else {
      ok = x->truthy();
    }
    if (ok == (f.name == "selectattr")) out.push_back(e);
  }
  return make_array(std::move(out));
}

ValuePtr filter_unique(const FilterCall& f) {
  if (f.v->type != Type::Array) fail_at(f.n, "unique needs a list");
  std::vector<ValuePtr> out;
  for (const auto& e : f.v->arr) {
    bool seen = false;
    for (const auto& o : out) seen = seen || strict_eq(*o, *e);
    if (!seen) out.push_back(e);
  }
  return make_array(std::move(out));
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"safe", filter_safe},
      {"tojson", filter_tojson},
      {"default", filter_default},
      {"d", filter_default},
      {"join", filter_join},
      {"length", filter_length},
      {"count", filter_length},
      {"string", filter_string},
      {"trim", filter_trim},
      {"upper", filter_upper},
      {"lower", filter_upper},
      {"title", filter_upper},
      {"capitalize", filter_upper},
      {"items", filter_items},
      {"list", filter_list},
      {"first", filter_first},
      {"last", filter_first},
      {"reverse", filter_reverse},
      {"int", filter_int},
      {"float", filter_int},
      {"abs", filter_abs},
      {"indent", filter_indent},
      {"replace", filter_replace},
      {"map", filter_map},
      {"selectattr", filter_map},
      {"rejectattr", filter_map},
      {"unique", filter_unique},
  };
  return table;
}

}  // namespace

ValuePtr apply_filter(const Ast& n, const ValuePtr& v, const std::string& name, std::vector<ValuePtr> args, Env& env,
                      bool called) {
  auto it = filters().find(name);
  if (it == filters().end()) fail_at(n, "unsupported filter '" + name + "'");
  return it->second(FilterCall{n, v, args, env, name, called});
}

}  // namespace sluice::text::jinja
