// One-token decode time for each golden checkpoint (after a 12-token prefill).
#include <benchmark/benchmark.h>

#include <memory>

#include "engine/engine.h"
#include "runtime/session.h"

namespace sluice {
namespace {

void BM_DecodeOneToken(benchmark::State& state, const std::string& name) {
  auto model = load_model(std::string(SLUICE_FIXTURES) + "/golden/" + name);
  std::vector<int32_t> prompt = {5, 17, 9, 100, 200, 300, 400, 500, 600, 700, 800, 900};
  std::unique_ptr<Session> s;
  int32_t tok = 3;
  for (auto _ : state) {
    if (!s || s->position() >= 100) {
      state.PauseTiming();
      s = std::make_unique<Session>(*model);
      s->feed(prompt);
      state.ResumeTiming();
    }
    const auto& lg = s->feed({tok});
    tok = argmax(lg.data(), int64_t(lg.size()));
    benchmark::DoNotOptimize(tok);
  }
}

const int registered = [] {
  for (const char* m : {"deepseek_v3_tiny", "deepseek_v3_tiny_fp8", "deepseek_v3_tiny_int4", "qwen3_moe_tiny",
                        "gpt_oss_tiny", "kimi_linear_tiny"})
    benchmark::RegisterBenchmark((std::string("decode_one_token/") + m).c_str(), BM_DecodeOneToken, std::string(m))
        ->Unit(benchmark::kMicrosecond);
  return 0;
}();

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
