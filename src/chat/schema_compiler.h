// Compiles a JSON Schema into rules of a Grammar (chat/grammar.h): what
// chat/output_grammar.h enforces for response formats and tool arguments, and
// what a chat syntax that writes arguments its own way (Kimi K3's typed
// arguments, chat/syntax_kimi_k3.cpp) builds its grammar from. The keywords it
// knows are listed in chat/output_grammar.h; any other is a 400 naming it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/grammar.h"

namespace sluice::chat {

class SchemaCompiler {
 public:
  using json = nlohmann::json;
  // `root`: the whole schema ($ref targets); `param`: the request field it came
  // from, for errors. `lenient`: keywords that only narrow the valid values
  // (minimum, pattern, format...) are not enforced (a tool that is not strict).
  SchemaCompiler(Grammar& g, const json& root, std::string param, bool lenient = false)
      : g_(g), root_(root), param_(std::move(param)), lenient_(lenient) {}

  // The rule of the schema `s`, found at `path` (for errors).
  Grammar::Id value(const json& s, const std::string& path);
  Grammar::Id any();         // any JSON value
  Grammar::Id any_object();  // any JSON object

  // Properties of an object schema in order, with whether each is required.
  std::vector<std::tuple<std::string, const json*, bool>> properties(const json& s, const std::string& path);
  // The schema a $ref names (#/$defs/NAME, #/definitions/NAME or #).
  const json* resolve(const json& ref, const std::string& path);
  // A string schema's minLength and maxLength (-1: none).
  std::pair<int64_t, int64_t> lengths(const json& s, const std::string& path);

  // A $ref reached again before any byte is written (left recursion) has no
  // grammar a cursor can expand: a 400 naming the $ref that closes the cycle.
  // A grammar that still passes the expansion's budget is refused the same way.
  void check_expandable(const std::shared_ptr<Grammar>& g, Grammar::Id root);

 private:
  Grammar::Id ws() { return g_.alt({g_.lit(""), g_.lit(" ")}); }
  Grammar::Id comma() { return g_.seq({g_.lit(","), ws()}); }

  // Each $ref is a node of its own (its path kept for errors) leading to the one
  // rule of its target, compiled once: a recursive schema is a cycle in the grammar.
  Grammar::Id ref(const json& ref, const std::string& path);
  Grammar::Id typed(const json& s, const std::string& type, const std::string& path);
  int64_t count(const json& v, const std::string& path, int64_t limit = 4096);

  Grammar& g_;
  const json& root_;
  std::string param_;
  bool lenient_ = false;
  Grammar::Id any_ = -1;
  std::map<std::string, Grammar::Id> refs_;
  std::map<Grammar::Id, std::string> sites_;  // each $ref's node -> its path
};

}  // namespace sluice::chat
