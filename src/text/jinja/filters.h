// Jinja filters (`x | name(args)`), one function each, found by name in a table.
#pragma once
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace sluice::text::jinja {

// One application of a filter: the node (for errors), the value filtered,
// the arguments, the scope, and whether it was written with parentheses.
struct FilterCall {
  const Ast& n;
  const ValuePtr& v;
  std::vector<ValuePtr>& args;
  Env& env;
  const std::string& name;
  bool called;
};

// Applies filter `name`; an unknown name is an error naming the template line.
ValuePtr apply_filter(const Ast& n, const ValuePtr& v, const std::string& name, std::vector<ValuePtr> args, Env& env,
                      bool called = false);

}  // namespace sluice::text::jinja
