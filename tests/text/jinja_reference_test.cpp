// Jinja features one by one against @huggingface/jinja: each case is a small
// template and context; output (or the fact of an error) must match.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "text/jinja.h"
#include "text/text_support.h"

namespace sluice::jinja_reference_test {
namespace {

using nlohmann::json;

const char* kCases[] = {
    "{{ 'a' + 'b' }}|{{ 1 + 2 }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ 7 % 3 }}|{{ 2 ** 10 }}|{{ -3 }}|{{ 1.5 * 2 }}",
    "{{ 'x' ~ 1 ~ 2.5 ~ true }}|{{ 1 == 1.0 }}|{{ 'a' != 'b' }}|{{ 3 > 2 and 2 > 3 }}|{{ not false or x }}",
    "{{ 'abc' in 'xabcx' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'abc' }}",
    "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::2] }}{{ xs[::-1] }}{{ 'hello'[1:3] }}{{ 'hello'[::-1] }}",
    "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}",
    "{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in xs if x is odd %}{{ x }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% set a = 1 %}{% set b, c = [2, 3] %}{{ a }}{{ b }}{{ c }}{% set blk %}B{{ a }}{% endset %}{{ blk }}",
    "{% set ns = namespace(n=0, s='') %}{% for x in xs %}{% set ns.n = ns.n + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "{% set v = 1 %}{% for x in xs %}{% set v = x %}{% endfor %}{{ v }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}",
    "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
    "{{ d | tojson }}|{{ xs | tojson }}|{{ 'q\"\\\\\\n\\t' | tojson }}|{{ none | tojson }}|{{ 1.0 | tojson }}",
    "{{ d | tojson(indent=2) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}",
    "{{ u | tojson }}|{{ u | tojson(ensure_ascii=true) }}",
    "{{ '  pad  ' | trim }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}",
    "{{ xs | length }}{{ 'héllo' | length }}{{ d | length }}|{{ xs | first }}{{ xs | last }}|{{ xs | reverse | list }}|{{ xs | join(',') }}",
    "{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|{{ 0 | default(5) }}",
    "{{ '5' | int + 1 }}|{{ '2.5' | float }}|{{ 3.7 | int }}|{{ 5 | string }}{{ true | string }}|{{ -4 | abs }}",
    "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}",
    "{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}|{{ '  x\\n'.strip() }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'x\\n\\n'.rstrip() }}",
    "{{ 'Mixed'.upper() }}{{ 'Mixed'.lower() }}|{{ d.get('a') }}{{ d.get('zz', 'no') }}|{{ d.keys() }}|{{ d.values() }}",
    "{{ x is defined }}{{ missing is defined }}{{ missing is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.5 is integer }}",
    "{{ xs is iterable }}{{ d is mapping }}{{ true is boolean }}{{ 2 is even }}{{ 3 is odd }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
    "{{ 'yes' if xs else 'no' }}|{{ 'a' if false else 'b' if false else 'c' }}|{{ missing == none }}|{{ none == none }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' ') }}|{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}",
    "{{ msgs | map(attribute='role') | unique | list }}|{{ range(3) }}|{{ range(1, 7, 2) }}|{{ xs + [9] }}",
    "a\n  {% if true %}\n  b\n  {% endif %}\n  c\n",
    "{%- for x in xs -%}\n  {{ x }}\n{%- endfor -%}\n",
    "  {{- 'trim-left' }}  |  {{ 'trim-right' -}}   |{# comment #}x{#- c -#}  y",
    "{{ \"dq\" }}{{ 'sq' 'concat' }}{{ [1, 'two', none, true] }}{{ {'k': [1, {'n': none}]} }}",
    "{{ raise_exception('boom') }}",
    "{{ 1 + none }}",
    "{% for x in 5 %}{% endfor %}",
    "{{ xs | nosuchfilter }}",
    "{% if %}{% endif %}",
    "{{ d.a.b.c }}|{{ xs[10] }}|{{ msgs[0]['content'] }}|{{ msgs[0].content[0] }}",
    "{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ (1, 2) }}|{{ [] | length }}{{ {} | length }}",
    "{% set t = {'a': 1} %}{{ t.a }}{{ t['a'] }}{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{% endfor %}{% endfor %}",
    "{{ xs[1] * 2.5 }}|{{ 10 / 4 }}|{{ 0.1 + 0.2 }}|{{ 1e3 if false else 100000000000000000000 }}|{{ -0.0 }}",
};

TEST(JinjaReference, FeatureCases) {
  json ctx = {{"xs", {1, 2, 3, 4, 5}},
              {"d", {{"b", 2}, {"a", json::array({1, "x"})}}},
              {"u", "ünï \xF0\x9F\x98\x80"},
              {"msgs", json::array({{{"role", "user"}, {"content", "hi"}},
                                    {{"role", "assistant"}, {"content", "yo"}},
                                    {{"role", "user"}, {"content", "bye"}}})},
              {"x", 1}};
  test::TempDir tmp;
  const size_t n = sizeof kCases / sizeof kCases[0];
  std::string in;
  for (size_t i = 0; i < n; ++i) in += json({{"template", kCases[i]}, {"context", ctx}}).dump() + "\n";
  test::write_file(tmp.file("cases.jsonl"), in);
  ASSERT_EQ(test::run_node("render_ref.mjs", {"--cases", tmp.file("cases.jsonl")}, tmp.file("out.jsonl")), 0);
  auto lines = test::read_lines(tmp.file("out.jsonl"));
  ASSERT_EQ(lines.size(), n);
  size_t errors_seen = 0;
  for (size_t i = 0; i < n; ++i) {
    json ref = json::parse(lines[i]);
    std::string got, err;
    try {
      got = text::jinja::Template(kCases[i]).render(ctx);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (ref.contains("error")) {
      ++errors_seen;
      EXPECT_FALSE(err.empty()) << "case " << i << " " << kCases[i] << ": reference error " << ref["error"]
                                << ", sluice rendered " << json(got).dump();
      if (!err.empty()) {
        EXPECT_NE(err.find("template line"), std::string::npos) << err;
      }
    } else {
      EXPECT_EQ(got, ref["ok"].get<std::string>()) << "case " << i << " " << kCases[i] << (err.empty() ? "" : " error: " + err);
    }
  }
  EXPECT_GE(errors_seen, 4u);
}

}  // namespace
}  // namespace sluice::jinja_reference_test
