// Guaranteed structure: JSON Schemas compiled to grammars, bounded json_object,
// and forced tool calls in each family's syntax. Besides fixed inputs, random
// walks through each grammar (a random byte among those it allows, until it is
// complete) must always give text that parses into what was promised.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"
#include "chat/output_grammar.h"
#include "chat/reply_parser.h"
#include "util/error.h"

namespace sluice::chat::chat_grammar_test {
namespace {

using nlohmann::json;

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& s, bool* complete = nullptr) {
  GrammarCursor c(g);
  const bool ok = c.feed(s);
  if (complete) *complete = ok && c.complete();
  return ok;
}
bool complete(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  bool done = false;
  return accepts(g, s, &done) && done;
}

// A random sentence of the grammar: at each step one of the allowed bytes (a
// structural one with probability 1/4, so strings end), ending when the
// grammar allows with probability 1/2.
std::string random_walk(const std::shared_ptr<const Grammar>& g, std::mt19937_64& rng) {
  GrammarCursor c(g);
  std::string out;
  const std::string structural = "\"}]<,:\n0123456789";
  for (int step = 0; step < 20000; ++step) {
    if (c.complete() && (!c.can_continue() || rng() % 2 == 0)) return out;
    std::vector<unsigned char> next, closing;
    for (int b = 0; b < 256; ++b)
      if (c.allows(std::string(1, char(b)))) {
        next.push_back((unsigned char)b);
        if (structural.find(char(b)) != std::string::npos) closing.push_back((unsigned char)b);
      }
    if (next.empty()) break;
    const auto& from = !closing.empty() && rng() % 4 == 0 ? closing : next;
    const unsigned char b = from[rng() % from.size()];
    out += char(b);
    EXPECT_TRUE(c.feed(std::string(1, char(b))));
  }
  ADD_FAILURE() << "walk did not end: " << out.substr(0, 200) << " ... (" << out.size() << " bytes) " << out.substr(out.size() > 200 ? out.size() - 200 : 0);
  return out;
}

const json kWeather = json::parse(R"({"type": "object", "properties": {
    "city": {"type": "string", "description": "where", "maxLength": 12}, "days": {"type": "integer"},
    "unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
  "required": ["city", "days"], "additionalProperties": false})");

TEST(OutputGrammar, SchemaAcceptsMatchingObjectsOnly) {
  auto g = json_schema_grammar(kWeather, "response_format.json_schema.schema");
  EXPECT_TRUE(complete(g, R"({"city": "Oslo", "days": 3})"));
  EXPECT_TRUE(complete(g, R"({"city":"\u00e9\n","days":-2,"tags":["a","b"],"unit":"f"})"));
  EXPECT_FALSE(accepts(g, R"({"days": 3)"));               // city is required (and comes first)
  EXPECT_FALSE(accepts(g, R"({"city": "x", "days": 1.5)"));  // an integer
  EXPECT_FALSE(accepts(g, R"({"city": "x", "days": 1, "unit": "k")"));
  EXPECT_FALSE(accepts(g, R"({"city": "x", "days": 1, "tags": ["a", "b", )"));  // maxItems 2
  EXPECT_FALSE(accepts(g, R"({"city": "x", "days": 1, "other": 1)"));          // additionalProperties false
  EXPECT_FALSE(accepts(g, "{\"city\":  \"x\""));  // at most one space
  EXPECT_FALSE(accepts(g, "{\"city\": \"\xC0\x80\""));  // an overlong UTF-8 form
  EXPECT_TRUE(complete(g, "{\"city\": \"Z\xC3\xBCrich \xE2\x82\xAC \xF0\x9F\x98\x80\", \"days\": 1}"));  // 2, 3, 4 bytes
  EXPECT_FALSE(accepts(g, "{\"city\": \"\xE0\x80"));      // an overlong 3-byte form
  EXPECT_FALSE(accepts(g, "{\"city\": \"\xED\xA0"));      // a surrogate
  EXPECT_FALSE(accepts(g, "{\"city\": \"\xF4\x90"));      // past U+10FFFF
  EXPECT_FALSE(accepts(g, "{\"city\": \"\xE2\x82\""));  // a character cut short
  EXPECT_FALSE(complete(g, R"({"city": "Oslo")"));
  EXPECT_TRUE(accepts(g, R"({"city": "\ud83d\ude00\u00e9abcdefghij")"));  // a pair is one character: 12 in all
  EXPECT_FALSE(accepts(g, R"({"city": "\ud83d\ude00\u00e9abcdefghijk)"));  // maxLength 12
  EXPECT_FALSE(accepts(g, R"({"city": "\ud83d\u0041)"));                    // a high surrogate needs a low one
  // A \u escape is refused at the first digit no completion can make valid: no dead end.
  EXPECT_TRUE(accepts(g, R"({"city": "\uD7)"));
  EXPECT_FALSE(accepts(g, R"({"city": "\uDC)"));       // only lone low surrogates start so
  EXPECT_FALSE(accepts(g, R"({"city": "\ud83d\u0)"));  // after a high one, only DC00-DFFF
  EXPECT_TRUE(accepts(g, R"({"city": "\ud83d\uD)"));
  EXPECT_FALSE(accepts(g, R"({"city": "x", "days": 1234567890123456789)"));  // an integer that fits int64
}

// A number is always a finite double: at most 18 digits before the fraction,
// an exponent of at most 2 digits (a 400-digit number is valid JSON text but
// not a number a client can read; found by output_grammar_fuzz).
TEST(OutputGrammar, NumbersStayFiniteDoubles) {
  auto g = json_schema_grammar(json::parse(R"({"type": "number"})"), "schema");
  EXPECT_TRUE(complete(g, "123456789012345678.25e99"));
  EXPECT_FALSE(accepts(g, "1234567890123456789"));
  EXPECT_FALSE(accepts(g, "1e100"));
  auto any = json_schema_grammar(json::object(), "schema");
  EXPECT_FALSE(accepts(any, std::string(400, '3')));
}

TEST(OutputGrammar, RecursiveRefsAnyOfAndBoundedArrays) {
  auto g = json_schema_grammar(json::parse(R"({"$defs": {"node": {"type": "object",
      "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "v": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}},
      "required": ["kids"], "additionalProperties": false}}, "$ref": "#/$defs/node"})"),
                               "response_format.json_schema.schema");
  EXPECT_TRUE(complete(g, R"({"kids": [{"kids": []}, {"kids": [], "v": true}], "v": null})"));
  EXPECT_FALSE(accepts(g, R"({"kids": [{"v")"));
  auto a = json_schema_grammar(json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})"), "s");
  EXPECT_FALSE(complete(a, "[]"));
  EXPECT_TRUE(complete(a, "[1, 2]"));
  EXPECT_FALSE(accepts(a, "[1, 2, "));
}

TEST(OutputGrammar, KeywordsItCannotEnforceAre400sNamingThem) {
  for (const char* s : {R"({"type": "string", "pattern": "^a"})", R"({"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}})",
                        R"({"allOf": [{"type": "string"}]})", R"({"$ref": "#/$defs/missing"})", R"({"type": "bytes"})"}) {
    try {
      json_schema_grammar(json::parse(s), "response_format.json_schema.schema");
      ADD_FAILURE() << "compiled " << s;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param().rfind("response_format.json_schema.schema", 0), 0u) << e.param();
      EXPECT_NE(e.param(), "response_format.json_schema.schema") << "names the keyword: " << e.what();
    }
  }
}

// Issue 38, findings 2 and 3: a $ref that reaches itself before any byte is written
// (left recursion, "$ref": "#" at the root) made the grammar's expansion exponential
// (admission never returned) or answered 500 with a substr exception. Each is a 400
// naming the $ref, found at once; recursion under a property or an item still works.
TEST(OutputGrammar, LeftRecursiveRefsAre400sNamingTheRef) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"$defs": {"e": {"anyOf": [{"$ref": "#/$defs/e"}, {"type": "string"}]}}, "$ref": "#/$defs/e"})",
       "response_format.json_schema.schema.$defs/e.anyOf[0].$ref"},
      {R"({"$defs": {"e": {"anyOf": [{"$ref": "#/$defs/e"}, {"$ref": "#/$defs/e"}, {"type": "null"}]}}, "$ref": "#/$defs/e"})",
       "response_format.json_schema.schema.$defs/e.anyOf[0].$ref"},
      {R"({"$ref": "#"})", "response_format.json_schema.schema.$ref"},
      {R"({"anyOf": [{"type": "integer"}, {"$ref": "#"}]})", "response_format.json_schema.schema.anyOf[1].$ref"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})",
       "response_format.json_schema.schema.$defs/b.anyOf[1].$ref"},
      {R"({"$defs": {"l": {"type": "array", "items": {"$ref": "#/$defs/e"}}, "e": {"anyOf": [{"$ref": "#/$defs/e"}, {"$ref": "#/$defs/l"}]}}, "$ref": "#/$defs/l"})",
       "response_format.json_schema.schema.$defs/e.anyOf[0].$ref"},
  };
  for (const auto& [schema, param] : cases) {
    try {
      json_schema_grammar(json::parse(schema), "response_format.json_schema.schema");
      ADD_FAILURE() << "compiled " << schema;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << schema;
      EXPECT_NE(std::string(e.what()).find("left recursion"), std::string::npos) << e.what();
    }
  }
  // A tool's parameters, in a forced call.
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"x": {"$ref": "#/$defs/e"}},
       "$defs": {"e": {"anyOf": [{"$ref": "#/$defs/e"}, {"type": "string"}]}}}}}])");
  for (ReplySyntax syn : {qwen3_syntax(), kimi_k3_syntax()}) {
    try {
      tool_call_grammar(syn, tools, {"f"}, false);
      ADD_FAILURE() << "compiled a left-recursive tool schema for " << syn.name;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "tools[0].function.parameters.$defs/e.anyOf[0].$ref") << e.what();
    }
  }
}

TEST(OutputGrammar, RefToTheRootRecursesUnderAProperty) {
  auto g = json_schema_grammar(
      json::parse(R"({"type": "object", "properties": {"c": {"$ref": "#"}}, "additionalProperties": false})"), "s");
  EXPECT_TRUE(complete(g, R"({"c": {"c": {}}})"));
  EXPECT_FALSE(accepts(g, R"({"d")"));
  auto l = json_schema_grammar(json::parse(R"({"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}}]})"), "s");
  EXPECT_TRUE(complete(l, "[[null], []]"));
}

// Whatever grammar reaches the cursor, expanding its parses has a budget: one
// whose alternatives refer to themselves (2^256 expansions) fails with the
// budget's error (without the budget this test would never end: ctest's timeout).
TEST(Grammar, ExpansionHasABudget) {
  auto g = std::make_shared<Grammar>();
  const Grammar::Id p = g->placeholder();
  g->define(p, g->alt({p, p}));
  g->set_root(p);
  try {
    GrammarCursor c(g);
    ADD_FAILURE() << "expanded a self-referring grammar";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos) << e.what();
  }
}

TEST(OutputGrammar, JsonObjectHasBoundedWhitespace) {
  auto g = json_object_grammar();
  EXPECT_TRUE(complete(g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(g, "{ \"a\""));
  EXPECT_FALSE(accepts(g, "{\"a\":\n"));
  EXPECT_FALSE(accepts(g, "[1]"));
}

TEST(OutputGrammar, RandomSentencesOfASchemaAreValidJson) {
  auto g = json_schema_grammar(kWeather, "s");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    const std::string s = random_walk(g, rng);
    const json j = json::parse(s, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << s;
    EXPECT_TRUE(j["city"].is_string() && j["days"].is_number_integer()) << s;
    EXPECT_LE(j["city"].get<std::string>().size(), 12u * 4) << s;  // at most 12 characters
    for (const auto& [k, v] : j.items()) EXPECT_TRUE(kWeather["properties"].contains(k)) << s;
    if (j.contains("unit")) {
      EXPECT_TRUE(j["unit"] == "c" || j["unit"] == "f") << s;
    }
    if (j.contains("tags")) {
      EXPECT_LE(j["tags"].size(), 2u) << s;
    }
  }
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
     "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
     "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"], "additionalProperties": false}}}])");

// Every random forced reply, parsed by the family's own reply parser, is calls of
// allowed tools whose arguments parse and have the required properties.
void check_forced_calls(ReplySyntax syn, const std::vector<std::string>& allowed, bool parallel) {
  auto g = tool_call_grammar(syn, kTools, allowed, parallel, {}, 64);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 30; ++i) {
    const std::string text = random_walk(g, rng);
    ReplyParser p(syn, true);
    ReplyDelta d = p.push(text);
    d.append(p.finish());
    ASSERT_GE(d.tool_calls.size(), 1u) << syn.name << ": " << text;
    if (!parallel) {
      EXPECT_EQ(d.tool_calls.size(), 1u);
    }
    EXPECT_TRUE(d.content.empty()) << syn.name << ": " << d.content;
    for (const auto& c : d.tool_calls) {
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), c.name), allowed.end()) << c.name;
      const json a = json::parse(c.arguments, nullptr, false);
      ASSERT_TRUE(a.is_object()) << syn.name << ": " << c.arguments;
      if (c.name == "get_weather") {
        EXPECT_TRUE(a["city"].is_string()) << c.arguments;
        if (a.contains("days")) {
          EXPECT_TRUE(a["days"].is_number_integer()) << c.arguments;
        }
      } else {
        EXPECT_TRUE(a["a"].is_number() && a["b"].is_number()) << c.arguments;
      }
    }
  }
}

TEST(OutputGrammar, ForcedCallsInEveryFamilysSyntax) {
  for (ReplySyntax syn : {qwen3_syntax(), deepseek_v3_syntax(), kimi_k2_syntax(), kimi_k3_syntax(), gpt_oss_syntax()}) {
    check_forced_calls(syn, {"get_weather", "add"}, true);
    check_forced_calls(syn, {"add"}, false);
  }
  ReplySyntax k3 = kimi_k3_syntax();
  k3.starts_in_reasoning = true;  // thinking on: a bounded reasoning first, then the call
  check_forced_calls(k3, {"get_weather"}, false);
  auto g = tool_call_grammar(k3, kTools, {"get_weather"}, false);
  EXPECT_TRUE(complete(g, "ok<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
                          "<|open|>call tool=\"get_weather\" index=\"0\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>"
                          "Oslo<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"));
  EXPECT_FALSE(accepts(g, "ok<|close|>think<|sep|><|open|>response<|sep|>Hello"));  // no free content
  // Harmony: reasoning in the analysis channel may come first; one call per turn.
  auto h = tool_call_grammar(gpt_oss_syntax(), kTools, {"add"}, true);
  const std::string call = "<|channel|>commentary to=functions.add <|constrain|>json<|message|>{\"a\": 1, \"b\": 2}";
  EXPECT_TRUE(complete(h, call));
  EXPECT_TRUE(complete(h, "<|channel|>analysis<|message|>Adding.<|end|><|start|>assistant" + call));
  EXPECT_FALSE(accepts(h, "<|channel|>final<|message|>"));  // no free answer
  EXPECT_FALSE(accepts(h, call + "<|start|>assistant"));      // no second call
  ReplySyntax hr = gpt_oss_syntax();
  hr.starts_in_reasoning = true;
  check_forced_calls(hr, {"get_weather"}, false);
  auto q = tool_call_grammar(qwen3_syntax(), kTools, {"add"}, false);
  EXPECT_TRUE(complete(q, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2.5}}\n</tool_call>"));
  EXPECT_FALSE(accepts(q, "<tool_call>\n{\"name\": \"get_weather\""));  // only the named function
}

}  // namespace
}  // namespace sluice::chat::chat_grammar_test
