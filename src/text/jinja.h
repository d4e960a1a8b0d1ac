// A Jinja interpreter for the subset chat templates use: {{ }}, {% if/elif/else %},
// {% for %} (loop.*, else, tuple unpacking, inline `if` filter), {% set %} (also
// block form and namespace attributes), {% macro %}, {% call %}, {% filter %},
// break/continue, comments, whitespace control (`-`), and transformers'
// settings (trim_blocks, lstrip_blocks, one trailing newline dropped).
// Expressions: literals, lists, dicts, tuples, member/index access, slices
// (`messages[::-1]`), calls with keyword arguments, arithmetic, comparisons,
// `in`, `and/or/not`, `is` tests, filters, conditional expressions.
// Behaviour follows @huggingface/jinja (transformers.js), which the tests use
// as the reference, including its quirks: str.strip/lstrip/rstrip ignore their
// argument and trim whitespace; `x == none` is true for undefined x; booleans
// print as true/false. Anything unsupported fails with sluice::Error naming
// the template line.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::text::jinja {

struct Ast;

class Template {
 public:
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the members of `context` (a JSON object) as variables, plus
  // the globals namespace(), range(), raise_exception(), true/false/none.
  std::string render(const nlohmann::json& context) const;

 private:
  std::vector<std::unique_ptr<Ast>> program_;
};

}  // namespace sluice::text::jinja
