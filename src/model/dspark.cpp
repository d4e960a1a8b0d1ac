#include "model/dspark.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "format/model_family.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/error.h"

namespace sluice {

bool DSparkConfig::is_dspark(const Config& c) { return drafter_family_of(c) == DrafterFamily::DSpark; }

DSparkConfig DSparkConfig::parse(const Config& c) {
  if (!is_dspark(c)) fail("{}: model_type is '{}', not k3_dspark", c.source(), c.get_string("model_type", ""));
  DSparkConfig d;
  d.hidden = c.req_int("hidden_size");
  d.intermediate = c.req_int("intermediate_size");
  d.layers = c.req_int("num_hidden_layers");
  d.heads = c.req_int("num_attention_heads");
  d.q_lora = c.req_int("q_lora_rank");
  d.kv_lora = c.req_int("kv_lora_rank");
  d.nope = c.req_int("qk_nope_head_dim");
  d.rope_dim = c.req_int("qk_rope_head_dim");
  d.v_dim = c.req_int("v_head_dim");
  d.vocab = c.req_int("vocab_size");
  d.target_hidden = c.req_int("target_hidden_size");
  d.markov_rank = c.req_int("markov_rank");
  d.eps = float(c.get_double("rms_norm_eps", 1e-5));
  d.confidence_head = c.get_bool("enable_confidence_head", true);
  d.target_layers = c.get_ints("target_layer_ids");
  const int64_t mask = c.req_int("mask_token_id");
  if (d.hidden <= 0 || d.intermediate <= 0 || d.layers <= 0 || d.heads <= 0 || d.q_lora <= 0 || d.kv_lora <= 0 ||
      d.nope <= 0 || d.rope_dim <= 0 || d.v_dim <= 0 || d.vocab <= 0 || d.target_hidden <= 0 || d.markov_rank <= 0)
    fail("{}: every width of a DSpark drafter must be positive", c.source());
  if (d.rope_dim % 2) fail("{}: qk_rope_head_dim must be even, got {}", c.source(), d.rope_dim);
  if (mask < 0 || mask >= d.vocab) fail("{}: mask_token_id {} is outside the vocabulary [0, {})", c.source(), mask, d.vocab);
  d.mask_token = int32_t(mask);
  if (d.target_layers.empty()) fail("{}: target_layer_ids is missing or empty", c.source());
  if (c.has("num_target_layers") && c.req_int("num_target_layers") != int64_t(d.target_layers.size()))
    fail("{}: num_target_layers {} but {} target_layer_ids", c.source(), c.req_int("num_target_layers"),
         d.target_layers.size());
  if (c.get_bool("mla_use_nope", false)) fail("{}: mla_use_nope=true is not DSpark's layout (its MLA uses RoPE)", c.source());
  if (c.get_bool("mla_use_output_gate", false)) fail("{}: mla_use_output_gate=true is not DSpark's layout", c.source());
  if (c.get_int("draft_vocab_size", d.vocab) != d.vocab)
    fail("{}: draft_vocab_size {} differs from vocab_size {}: a reduced draft vocabulary is not supported",
         c.source(), c.get_int("draft_vocab_size", d.vocab), d.vocab);
  const std::string mh = c.get_string("markov_head_type", "vanilla");
  if (mh != "vanilla") fail("{}: markov_head_type '{}' is not supported (only vanilla)", c.source(), mh);
  // Rotary dims rotate consecutive pairs (DeepSeek MLA layout), YaRN from rope_parameters.
  d.rope = rope_from_config(c, d.rope_dim, /*interleaved=*/true);
  const double m = mla_yarn_mscale(c, d.rope);
  d.attn_scale = float(1.0 / std::sqrt(double(d.nope + d.rope_dim)) * (m * m));
  return d;
}

void DSparkConfig::check_target(const ModelInfo& t) const {
  if (t.hidden != target_hidden)
    fail("the DSpark drafter reads target rows of width {} but the target's hidden size is {}", target_hidden,
         t.hidden);
  if (t.vocab != vocab)
    fail("the DSpark drafter's vocabulary ({} ids) is not the target's ({}): it borrows the target's embedding and "
         "head",
         vocab, t.vocab);
  if (hidden != t.hidden)
    fail("the DSpark drafter's hidden size {} is not the target's {}: it borrows the target's embedding and head",
         hidden, t.hidden);
  for (int64_t l : target_layers)
    if (l < 0 || l >= t.n_layers)
      fail("the DSpark drafter reads target layer {} but the target has {} layers", l, t.n_layers);
}

DSparkModel::DSparkModel(const std::string& dir, Backend& be, Matrix embed, Matrix head, DSparkOptions opts)
    : cfg_(DSparkConfig::parse(Config::load(dir))), opts_(opts), be_(be), embed_(embed), head_(head) {
  require_op(be, Op::MlaAttend, "the DSpark drafter's MLA attention");
  ckpt_ = std::make_unique<Checkpoint>(dir, /*use_prepared_spine=*/false);
  weights_ = std::make_unique<WeightLoader>(*ckpt_, be);  // owns the converted vectors the weights point at
  const WeightLoader& W = *weights_;
  const DSparkConfig& c = cfg_;
  const int64_t D = c.hidden, qh = c.nope + c.rope_dim;
  const int64_t ctx_width = c.target_hidden * int64_t(c.target_layers.size());
  context_proj_ = W.linear("context_proj", D, ctx_width);
  context_norm_ = W.vec("context_norm.weight", D);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l), a = p + "self_attn.";
    Layer L;
    L.input_norm = W.vec(p + "input_layernorm.weight", D);
    L.post_norm = W.vec(p + "post_attention_layernorm.weight", D);
    L.q_a = W.linear(a + "q_a_proj", c.q_lora, D);
    L.q_a_norm = W.vec(a + "q_a_layernorm.weight", c.q_lora);
    L.q_b = W.linear(a + "q_b_proj", c.heads * qh, c.q_lora);
    L.kv_a = W.linear(a + "kv_a_proj_with_mqa", c.kv_lora + c.rope_dim, D);
    L.kv_a_norm = W.vec(a + "kv_a_layernorm.weight", c.kv_lora);
    L.kv_b = W.linear(a + "kv_b_proj", c.heads * (c.nope + c.v_dim), c.kv_lora);
    L.o = W.linear(a + "o_proj", D, c.heads * c.v_dim);
    L.gate = W.linear(p + "mlp.gate_proj", c.intermediate, D);
    L.up = W.linear(p + "mlp.up_proj", c.intermediate, D);
    L.down = W.linear(p + "mlp.down_proj", D, c.intermediate);
    layers_.push_back(L);
  }
  final_norm_ = W.vec("final_norm.weight", D);
  markov_w1_ = W.matrix("markov_head.markov_w1.weight", c.vocab, c.markov_rank);
  markov_w2_ = W.matrix("markov_head.markov_w2.weight", c.vocab, c.markov_rank);
  if (c.confidence_head) {
    const float* w = W.host_vec("confidence_head.proj.weight", D + c.markov_rank);
    confidence_w_.assign(w, w + D + c.markov_rank);
    confidence_b_ = *W.host_vec("confidence_head.proj.bias", 1);
  }
  if (embed_.rows() != c.vocab || head_.rows() != c.vocab)
    fail("{}: the borrowed embedding ({} rows) and head ({} rows) must have the drafter's {} ids", dir, embed_.rows(),
         head_.rows(), c.vocab);
}

DSparkModel::~DSparkModel() = default;

namespace {
// Every layer's attention cache over the context positions: [positions, kv_lora + rope].
struct DSparkState : HiddenDraftModel::State {
  std::vector<Buffer> cache;
  int64_t pos = 0;
  int64_t positions() const override { return pos; }
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& c : cache) b += c.bytes();
    return b;
  }
};
}  // namespace

std::unique_ptr<HiddenDraftModel::State> DSparkModel::new_state() const {
  auto s = std::make_unique<DSparkState>();
  for (int64_t l = 0; l < cfg_.layers; ++l) s->cache.emplace_back(be_, 0, cfg_.kv_lora + cfg_.rope_dim);
  return s;
}

void DSparkModel::latent_rows(const Layer& L, Tensor x, int64_t pos0, Tensor rows) const {
  const int64_t C = cfg_.kv_lora, R = cfg_.rope_dim;
  Buffer kva(be_, x.rows(), C + R);
  be_.matmul(L.kv_a, x, kva);
  be_.rmsnorm(kva.view().col_range(0, C), L.kv_a_norm, cfg_.eps, rows.col_range(0, C));
  be_.copy(kva.view().col_range(C, R), rows.col_range(C, R));
  be_.rope(cfg_.rope, rows.col_range(C, R), 1, R, 0, pos0);
}

void DSparkModel::extend(State& state, const float* rows, int64_t n, const std::vector<int32_t>&) const {
  if (n <= 0) return;
  auto& st = static_cast<DSparkState&>(state);
  const int64_t W = cfg_.target_hidden * int64_t(cfg_.target_layers.size());
  Buffer in(be_, n, W), ctx(be_, n, cfg_.hidden);
  be_.upload(rows, in);
  be_.matmul(context_proj_, in, ctx);
  be_.rmsnorm(ctx, context_norm_, cfg_.eps, ctx);
  // Each layer's cache rows come from the context states alone (no input norm).
  for (size_t l = 0; l < layers_.size(); ++l) {
    st.cache[l].resize_rows(st.pos + n);
    latent_rows(layers_[l], ctx, st.pos, st.cache[l].row_range(st.pos, n));
  }
  st.pos += n;
}

void DSparkModel::cut(State& state, int64_t n) const {
  auto& st = static_cast<DSparkState&>(state);
  if (n >= st.pos) return;
  for (auto& b : st.cache) b.resize_rows(n);
  st.pos = n;
}

std::vector<int32_t> DSparkModel::draft(State& s, const std::vector<int32_t>& history, int64_t k) const {
  return history.empty() ? std::vector<int32_t>{} : draft_block(s, history.back(), k).tokens;
}

DSparkModel::Draft DSparkModel::draft_block(State& state, int32_t anchor, int64_t k) const {
  auto& st = static_cast<DSparkState&>(state);
  Draft out;
  k = std::min(k, opts_.max_block);
  if (k <= 0) return out;
  const DSparkConfig& s = cfg_;
  const int64_t B = k + 1, P = st.pos, D = s.hidden, H = s.heads, qh = s.nope + s.rope_dim, V = s.vocab;
  std::vector<int32_t> block(size_t(B), s.mask_token);
  block[0] = anchor;
  Buffer h(be_, B, D), xn(be_, B, D), a(be_, B, D), q(be_, B, H * qh), qa(be_, B, s.q_lora), att(be_, B, H * s.v_dim);
  Buffer g(be_, B, s.intermediate), u(be_, B, s.intermediate), act(be_, B, s.intermediate);
  be_.embed(embed_, block.data(), B, h);
  const MlaShape shape{.n_heads = H, .kv_lora = s.kv_lora, .nope = s.nope, .rope_dim = s.rope_dim, .v_dim = s.v_dim,
                       .scale = s.attn_scale};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    be_.rmsnorm(h, L.input_norm, s.eps, xn);
    be_.matmul(L.q_a, xn, qa);
    be_.rmsnorm(qa, L.q_a_norm, s.eps, qa);
    be_.matmul(L.q_b, qa, q);
    be_.rope(s.rope, q, H, qh, s.nope, P);
    // The block's own cache rows go after the context's for this draft only.
    Buffer& cache = st.cache[l];
    cache.resize_rows(P + B);
    latent_rows(L, xn, P, cache.row_range(P, B));
    // Non-causal: every block row sees the whole context and the whole block
    // (attending as the last position does).
    for (int64_t t = 0; t < B; ++t)
      be_.mla_attend(shape, L.kv_b, q.row_range(t, 1), cache.row_range(0, P + B), P + B - 1, att.row_range(t, 1));
    cache.resize_rows(P);
    be_.matmul(L.o, att, a);
    be_.add(a, h);
    be_.rmsnorm(h, L.post_norm, s.eps, xn);
    be_.matmul(L.gate, xn, g);
    be_.matmul(L.up, xn, u);
    be_.gated(GatedActivation{}, g, u, act);
    be_.matmul(L.down, act, a);
    be_.add(a, h);
  }
  be_.rmsnorm(h, final_norm_, s.eps, xn);
  // Rows 1..k (the mask positions) predict the tokens after the anchor.
  Buffer logits(be_, k, V), me(be_, 1, s.markov_rank), bias(be_, 1, V);
  be_.matmul(head_, xn.row_range(1, k), logits);
  std::vector<float> lg(size_t(k * V)), fin(size_t(k * D)), e(size_t(s.markov_rank)), bs(static_cast<size_t>(V));
  be_.download(logits, lg.data());
  be_.download(xn.row_range(1, k), fin.data());
  int32_t prev = anchor;
  for (int64_t i = 0; i < k; ++i) {
    be_.embed(markov_w1_, &prev, 1, me);
    be_.matmul(markov_w2_, me, bias);
    be_.download(bias, bs.data());
    be_.download(me, e.data());
    float* row = lg.data() + i * V;
    for (int64_t v = 0; v < V; ++v) row[v] += bs[size_t(v)];
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > row[best]) best = v;
    float conf = 1.0f;
    if (s.confidence_head) {
      double z = confidence_b_;
      for (int64_t d = 0; d < D; ++d) z += double(confidence_w_[size_t(d)]) * fin[size_t(i * D + d)];
      for (int64_t r = 0; r < s.markov_rank; ++r) z += double(confidence_w_[size_t(D + r)]) * e[size_t(r)];
      conf = float(1.0 / (1.0 + std::exp(-z)));
    }
    if (conf < opts_.min_confidence) break;
    out.tokens.push_back(int32_t(best));
    out.confidence.push_back(conf);
    prev = int32_t(best);
  }
  return out;
}

}  // namespace sluice
