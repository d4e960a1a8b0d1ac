// sluice eval: perplexity of a model on given text, and its fidelity to a
// reference model on the same tokens (mean KL divergence, top-1 agreement).
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runtime/evaluation.h"
#include "text/documents.h"
#include "util/error.h"

namespace sluice::cli {

namespace {

// Documents from --text (one), --jsonl (one per line) or --tokens (one).
std::vector<std::vector<int32_t>> read_documents(const std::string& model_dir, const std::string& text_file,
                                                 const std::string& jsonl, const std::string& tokens) {
  if (!tokens.empty()) return {parse_token_list(tokens)};
  auto tok = text::Tokenizer::load(model_dir);
  if (!text_file.empty()) return {text::read_text_document(*tok, text_file)};
  return text::read_jsonl_documents(*tok, jsonl);
}

void add_eval_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "eval",
      "Perplexity on text; with a reference model, mean KL divergence and top-1 agreement per position against it");
  struct Opts {
    std::string model, text, jsonl, tokens, reference, json;
    bool as_released = false, quiet = false;
    int64_t chunk = 64;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Model directory (default: $SLUICE_MODEL or the shipped sluice-k3-mini)");
  auto* t = cmd->add_option("--text", o->text, "A text file, scored as one document");
  auto* j = cmd->add_option("--jsonl", o->jsonl,
                            "One document per line (a JSON string, or an object with \"text\"); each scored from its start");
  auto* k = cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, scored as one document");
  t->excludes(j)->excludes(k);
  j->excludes(k);
  auto* r = cmd->add_option("--reference", o->reference, "Compare with this model directory (same vocabulary)");
  auto* a = cmd->add_flag("--reference-as-released", o->as_released,
                          "Compare with the same directory's weights as released, ignoring a `sluice prepare` spine "
                          "(e.g. --spine int8) there");
  r->excludes(a);
  cmd->add_option("--chunk", o->chunk, "Tokens per forward pass")->capture_default_str();
  cmd->add_option("--json", o->json, "Also write the numbers to this JSON file");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  cmd->callback([o, t, j, k, &action] {
    action = [o, t, j, k] {
      if (!*t && !*j && !*k) fail("eval: give one of --text, --jsonl or --tokens");
      if (o->chunk < 1) fail("--chunk must be >= 1, got {}", o->chunk);
      o->model = model_or_default(o->model);
      const auto docs = read_documents(o->model, o->text, o->jsonl, o->tokens);
      auto model = load_model(o->model);
      std::unique_ptr<Model> ref;
      if (o->as_released) {
        LoadOptions lo;
        lo.use_prepared_spine = false;
        ref = load_model(o->model, lo);
      } else if (!o->reference.empty()) {
        ref = load_model(o->reference);
      }
      const bool tty = isatty(2) && !o->quiet;
      auto last = std::chrono::steady_clock::now();
      auto progress = [&](int64_t done, int64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (!tty || now - last < std::chrono::milliseconds(500)) return;
        last = now;
        std::fprintf(stderr, "\reval: %lld / %lld tokens", (long long)done, (long long)total);
      };
      const EvalReport rep = evaluate(*model, ref.get(), docs, o->chunk, progress);
      if (tty) std::fprintf(stderr, "\r\033[K");
      std::printf("documents %lld, predicted tokens %lld\n", (long long)rep.documents, (long long)rep.predictions);
      std::printf("perplexity %.4f (mean NLL %.5f nats)\n", rep.perplexity(),
                  rep.predictions ? rep.nll_sum / double(rep.predictions) : 0.0);
      nlohmann::json out = {{"model", o->model},
                            {"documents", rep.documents},
                            {"predictions", rep.predictions},
                            {"perplexity", rep.perplexity()},
                            {"mean_nll", rep.predictions ? rep.nll_sum / double(rep.predictions) : 0.0}};
      if (rep.compared) {
        std::printf("reference perplexity %.4f\n", rep.ref_perplexity());
        std::printf("mean KL(reference || model) %.3e nats, max %.3e; top-1 agreement %.4f%%\n", rep.mean_kl(),
                    rep.kl_max, 100 * rep.top1_agreement());
        out["reference"] = o->as_released ? o->model + " (as released)" : o->reference;
        out["reference_perplexity"] = rep.ref_perplexity();
        out["mean_kl"] = rep.mean_kl();
        out["max_kl"] = rep.kl_max;
        out["top1_agreement"] = rep.top1_agreement();
      }
      write_json_file(o->json, out);
      return 0;
    };
  });
}

}  // namespace
SLUICE_COMMAND(75, add_eval_command);

}  // namespace sluice::cli
