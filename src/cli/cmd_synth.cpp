// sluice synth: write a random-weight checkpoint in a real release layout.
#include <cstdio>

#include "cli/commands.h"
#include "format/config.h"
#include "format/model_family.h"
#include "store/synthetic.h"
#include "store/synthetic_dspark.h"
#include "store/synthetic_eagle3.h"
#include "util/error.h"
#include "util/progress.h"

namespace sluice::cli {
namespace {

// --arch k3_dspark / k3_eagle3: a drafter sized for the --target model.
void synthesize_drafter(DrafterFamily drafter, const SynthOptions& o, const std::string& target) {
  if (target.empty()) fail("synth --arch {} needs --target DIR (the model it drafts for)", o.arch);
  const Config c = Config::load(target);
  const Config t = c.opt_sub("text_config") ? c.sub("text_config") : c;
  const int64_t H = t.req_int("hidden_size"), V = t.req_int("vocab_size"), L = t.req_int("num_hidden_layers");
  if (drafter == DrafterFamily::DSpark) {
    DSparkSynthOptions d = dspark_synth_for_target(H, V, L);
    d.out_dir = o.out_dir;
    d.seed = o.seed;
    synthesize_dspark(d);
  } else {
    Eagle3SynthOptions e = eagle3_synth_for_target(H, V, L);
    e.out_dir = o.out_dir;
    e.seed = o.seed;
    synthesize_eagle3(e);
  }
  std::printf("wrote a random-weight %s drafter for %s to %s\n", o.arch.c_str(), target.c_str(), o.out_dir.c_str());
}

void add_synth_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "synth", "Write a random-weight checkpoint with a real model's tensor names, dtypes and shard layout");
  auto o = std::make_shared<SynthOptions>();
  auto layers = std::make_shared<int64_t>(0), experts = std::make_shared<int64_t>(0), top_k = std::make_shared<int64_t>(0),
       vocab = std::make_shared<int64_t>(0), hidden = std::make_shared<int64_t>(0), inter = std::make_shared<int64_t>(0);
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("--arch", o->arch,
                  "deepseek_v3, kimi_k2, qwen3_moe, kimi_k3, or a drafter for --target: k3_dspark (DSpark) or "
                  "k3_eagle3 (EAGLE-3.1 MLA)")
      ->required();
  auto target = std::make_shared<std::string>();
  cmd->add_option("--target", *target,
                  "k3_dspark, k3_eagle3: the K3-shaped model directory the drafter is for (its hidden size, vocabulary and "
                  "layer count; the drafter's other widths are small)");
  cmd->add_option("--out", o->out_dir, "Output directory")->required();
  cmd->add_option("--preset", o->preset, "real: the released model's widths; small: golden-test widths")
      ->capture_default_str();
  cmd->add_option("--layers", *layers, "Number of decoder layers (default: 2 real, golden count small)");
  cmd->add_option("--experts", *experts, "Routed experts per MoE layer");
  cmd->add_option("--top-k", *top_k, "Experts selected per token");
  cmd->add_option("--vocab", *vocab, "Vocabulary size");
  cmd->add_option("--hidden", *hidden, "Hidden size");
  cmd->add_option("--moe-intermediate", *inter, "Routed expert width");
  cmd->add_option("--expert-format", o->expert_format, "deepseek_v3/kimi_k2 only: bf16, fp8 or int4")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_option("--routing", o->routing,
                  "random: i.i.d. router rows (tokens spread by chance); realistic: popular experts and lasting topics "
                  "in the router, embedding and lm_head weights, as released models route (deepseek_v3, kimi_k2, "
                  "kimi_k3). Defaults measured with `synth --arch kimi_k2 --preset real --layers 4 --expert-format int4 "
                  "--moe-intermediate 64 --vocab 32768 --routing realistic` and `bench --ram 12 --probe-seconds 0`: "
                  "previous-token overlap 35% / 35%, hottest 30% of experts 88% / 82% of picks, next layer "
                  "predictable 38% / 42% over 64 / 400 tokens (released Kimi K3: 31%, 86%, ~50%); at full expert width "
                  "(no --moe-intermediate, 35 GB) 31.5%, 90.8%, 41.1% over 64 tokens")
      ->check(CLI::IsMember({"random", "realistic"}))
      ->capture_default_str();
  RealisticRouting& rr = o->realistic;
  cmd->add_option("--topic-width", rr.width,
                  "realistic: width of an expert's topic bump (two standard deviations), in top-k-expert spacings")
      ->capture_default_str();
  cmd->add_option("--popularity", rr.popularity,
                  "realistic: spread of the experts' popularity in router logits (~ this x a standard normal per "
                  "expert at 48 experts per pick, x (experts per pick / 48)^-0.3 elsewhere, drawn apart from the "
                  "topics, on a constant coordinate of the embeddings): sets the hottest 30%'s share")
      ->capture_default_str();
  cmd->add_option("--topic-step", rr.step,
                  "realistic: topic move per generated token, in top-k-expert spacings (always forward): against "
                  "--topic-width, sets how many experts a token keeps from the previous one")
      ->capture_default_str();
  cmd->add_option("--router-sharpness", rr.sharpness, "realistic: router logit of a token's own-topic expert over a far one")
      ->capture_default_str();
  cmd->add_option("--router-noise", rr.router_noise, "realistic: std of the router logits' token-specific part")
      ->capture_default_str();
  cmd->add_flag("--quiet", *quiet, "No progress display");
  cmd->callback([=, &action] {
    action = [=] {
      if (const DrafterFamily drafter = drafter_family_named(o->arch); drafter != DrafterFamily::None) {
        synthesize_drafter(drafter, *o, *target);
        return 0;
      }
      if (!target->empty()) fail("--target is about --arch k3_dspark or k3_eagle3");
      auto set = [](std::optional<int64_t>& dst, int64_t v) {
        if (v > 0) dst = v;
      };
      set(o->layers, *layers);
      set(o->experts, *experts);
      set(o->top_k, *top_k);
      set(o->vocab, *vocab);
      set(o->hidden, *hidden);
      set(o->moe_intermediate, *inter);
      o->progress = !*quiet;
      std::fprintf(stderr, "synth: %s (%s preset) is %s of weights, routing %s; writing to %s\n", o->arch.c_str(),
                   o->preset.c_str(), human_bytes(double(synth_bytes(*o))).c_str(), synth_routing_label(*o).c_str(),
                   o->out_dir.c_str());
      uint64_t bytes = synthesize(*o);
      std::printf("wrote %s (%s) to %s\n", o->arch.c_str(), human_bytes(double(bytes)).c_str(), o->out_dir.c_str());
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(60, add_synth_command);

}  // namespace sluice::cli
