// sluice logits: next-token logits at every position, written as safetensors.
#include <cstring>

#include "cli/commands.h"
#include "cli/memory_options.h"
#include "cluster/cluster.h"
#include "format/safetensors.h"
#include "engine/engine.h"
#include "runtime/session.h"
#include "util/error.h"

namespace sluice::cli {

namespace {
std::vector<uint8_t> float_bytes(const float* p, size_t n) {
  std::vector<uint8_t> b(n * 4);
  std::memcpy(b.data(), p, b.size());
  return b;
}
}  // namespace

namespace {
void add_logits_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("logits", "Write the next-token logits at every position to a safetensors file");
  struct Opts {
    std::string model, tokens, output;
    int64_t decode_from = 0;
    bool hidden = false;
    MemoryRequest mem;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, e.g. 5,17,9")->required();
  cmd->add_option("--output", o->output, "Output safetensors file (tensor 'logits', F32 [T, vocab])")->required();
  cmd->add_option("--decode-from", o->decode_from,
                  "Prefill the first K tokens together, then decode the rest one at a time through the cache");
  cmd->add_flag("--hidden", o->hidden, "Also write 'hidden.<layer>' and 'final_hidden' [T, hidden]");
  add_memory_options(cmd, o->mem);
  cmd->callback([o, &action] {
    action = [o] {
      std::vector<int32_t> toks = parse_token_list(o->tokens);
      const int64_t T = int64_t(toks.size());
      if (o->decode_from < 0 || o->decode_from > T)
        fail("--decode-from {} must be between 1 and the number of tokens ({})", o->decode_from, T);
      apply_memory_options(o->mem);
      o->mem.context_tokens = T;
      auto model = Engine::open(model_or_default(o->model), o->mem);
      const ModelInfo& info = model->info();
      Session s = model->session();
      ForwardTrace trace, part;
      std::vector<float> logits;
      const int64_t K = o->decode_from == 0 ? T : o->decode_from;
      logits = s.feed_all(std::vector<int32_t>(toks.begin(), toks.begin() + K), o->hidden ? &trace : nullptr);
      for (int64_t t = K; t < T; ++t) {
        ForwardTrace step;
        auto l = s.feed_all({toks[size_t(t)]}, o->hidden ? &step : nullptr);
        logits.insert(logits.end(), l.begin(), l.end());
        if (o->hidden) {
          for (size_t i = 0; i < step.hidden.size(); ++i)
            trace.hidden[i].insert(trace.hidden[i].end(), step.hidden[i].begin(), step.hidden[i].end());
          trace.final_hidden.insert(trace.final_hidden.end(), step.final_hidden.begin(), step.final_hidden.end());
        }
      }
      std::vector<TensorData> out;
      out.push_back({"logits", DType::F32, {T, info.vocab}, float_bytes(logits.data(), logits.size())});
      if (o->hidden) {
        for (size_t i = 0; i < trace.hidden.size(); ++i)
          out.push_back({"hidden." + std::to_string(i), DType::F32, {T, info.hidden},
                         float_bytes(trace.hidden[i].data(), trace.hidden[i].size())});
        out.push_back({"final_hidden", DType::F32, {T, info.hidden},
                       float_bytes(trace.final_hidden.data(), trace.final_hidden.size())});
      }
      if (primary_rank()) write_safetensors(o->output, out);  // under mpirun rank 0 writes
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(20, add_logits_command);

}  // namespace sluice::cli
