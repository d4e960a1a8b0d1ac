// Variable scopes of the Jinja interpreter: a chain of name -> value maps.
#pragma once
#include <map>
#include <string>

#include "text/jinja/value.h"

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

}  // namespace sluice::text::jinja
