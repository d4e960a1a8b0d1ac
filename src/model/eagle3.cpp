#include "model/eagle3.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "format/model_family.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/error.h"

namespace sluice {

bool Eagle3Config::is_eagle3(const Config& c) { return drafter_family_of(c) == DrafterFamily::Eagle3; }

Eagle3Config Eagle3Config::parse(const Config& c, int64_t target_layers) {
  if (!is_eagle3(c)) fail("{}: architectures name no Eagle3 model", c.source());
  if (!c.has("kv_lora_rank") || !c.has("q_lora_rank"))
    fail("{}: only EAGLE-3 drafters with MLA attention (q_lora_rank, kv_lora_rank) are supported", c.source());
  Eagle3Config e;
  e.hidden = c.req_int("hidden_size");
  e.intermediate = c.req_int("intermediate_size");
  e.heads = c.req_int("num_attention_heads");
  e.q_lora = c.req_int("q_lora_rank");
  e.kv_lora = c.req_int("kv_lora_rank");
  e.nope = c.req_int("qk_nope_head_dim");
  e.rope_dim = c.req_int("qk_rope_head_dim");
  e.v_dim = c.req_int("v_head_dim");
  e.vocab = c.req_int("vocab_size");
  e.draft_vocab = c.get_int("draft_vocab_size", e.vocab);
  e.target_hidden = c.get_int("target_hidden_size", e.hidden);
  e.eps = float(c.get_double("rms_norm_eps", 1e-5));
  if (c.get_int("num_hidden_layers", 1) != 1)
    fail("{}: num_hidden_layers is {}; an EAGLE-3 drafter has one layer", c.source(), c.req_int("num_hidden_layers"));
  if (e.draft_vocab <= 0 || e.draft_vocab > e.vocab)
    fail("{}: draft_vocab_size {} must be in [1, vocab_size {}]", c.source(), e.draft_vocab, e.vocab);
  if (auto ec = c.opt_sub("eagle_config"); ec && ec->has("eagle_aux_hidden_state_layer_ids"))
    e.aux_ids = ec->get_ints("eagle_aux_hidden_state_layer_ids");
  else if (c.has("eagle_aux_hidden_state_layer_ids"))
    e.aux_ids = c.get_ints("eagle_aux_hidden_state_layer_ids");
  else
    e.aux_ids = {2, target_layers / 2, target_layers - 3};  // vLLM's default taps
  for (int64_t id : e.aux_ids) {
    if (id < 1) fail("{}: aux hidden-state layer id {} names no layer's output (it is the input of layer {})",
                     c.source(), id, id);
    e.target_layers.push_back(id - 1);
  }
  e.rope = rope_from_config(c, e.rope_dim, /*interleaved=*/true);
  const double m = mla_yarn_mscale(c, e.rope);
  e.attn_scale = float(1.0 / std::sqrt(double(e.nope + e.rope_dim)) * (m * m));
  return e;
}

void Eagle3Config::check_target(const ModelInfo& t) const {
  if (t.hidden != target_hidden)
    fail("the EAGLE-3 drafter reads target rows of width {} but the target's hidden size is {}", target_hidden,
         t.hidden);
  if (t.hidden != hidden)
    fail("the EAGLE-3 drafter's hidden size {} is not the target's {}: it borrows the target's embedding", hidden,
         t.hidden);
  if (t.vocab != vocab) fail("the EAGLE-3 drafter's vocabulary ({} ids) is not the target's ({})", vocab, t.vocab);
  for (int64_t l : target_layers)
    if (l < 0 || l >= t.n_layers)
      fail("the EAGLE-3 drafter reads the output of target layer {} but the target has {} layers", l, t.n_layers);
}

Eagle3Model::Eagle3Model(const std::string& dir, const ModelInfo& target, Backend& be, Matrix embed)
    : cfg_(Eagle3Config::parse(Config::load(dir), target.n_layers)), be_(be), embed_(embed) {
  require_op(be, Op::MlaAttend, "the EAGLE-3 drafter's MLA attention");
  cfg_.check_target(target);
  ckpt_ = std::make_unique<Checkpoint>(dir, /*use_prepared_spine=*/false);
  weights_ = std::make_unique<WeightLoader>(*ckpt_, be);  // owns the converted vectors the weights point at
  const WeightLoader& W = *weights_;
  const Eagle3Config& c = cfg_;
  const int64_t H = c.hidden, taps = int64_t(c.target_layers.size()), qh = c.nope + c.rope_dim;
  fc_ = W.linear("fc", H, taps * c.target_hidden);
  // The per-tap norms come all together (3.1) or not at all (3.0).
  if (W.has("fc_norm.0.weight"))
    for (int64_t j = 0; j < taps; ++j) {
      const std::string n = fmt::format("fc_norm.{}.weight", j);
      if (!W.has(n)) fail("{}: checkpoint has fc_norm.0.weight but no '{}' ({} taps)", dir, n, taps);
      fc_norms_.push_back(W.vec(n, c.target_hidden));
    }
  const std::string L = "layers.0.", A = L + "self_attn.";
  hidden_norm_ = W.vec(L + "hidden_norm.weight", H);
  input_norm_ = W.vec(L + "input_layernorm.weight", H);
  post_norm_ = W.vec(L + "post_attention_layernorm.weight", H);
  q_a_ = W.linear(A + "q_a_proj", c.q_lora, 2 * H);
  q_a_norm_ = W.vec(A + "q_a_layernorm.weight", c.q_lora);
  q_b_ = W.linear(A + "q_b_proj", c.heads * qh, c.q_lora);
  kv_a_ = W.linear(A + "kv_a_proj_with_mqa", c.kv_lora + c.rope_dim, 2 * H);
  kv_a_norm_ = W.vec(A + "kv_a_layernorm.weight", c.kv_lora);
  kv_b_ = W.linear(A + "kv_b_proj", c.heads * (c.nope + c.v_dim), c.kv_lora);
  o_ = W.linear(A + "o_proj", H, c.heads * c.v_dim);
  gate_ = W.linear(L + "mlp.gate_proj", c.intermediate, H);
  up_ = W.linear(L + "mlp.up_proj", c.intermediate, H);
  down_ = W.linear(L + "mlp.down_proj", H, c.intermediate);
  norm_ = W.vec("norm.weight", H);
  head_ = W.linear("lm_head", c.draft_vocab, H);
  if (c.draft_vocab < c.vocab) {
    if (!W.has("d2t")) fail("{}: draft_vocab_size {} < vocab_size {} but there is no 'd2t' map", dir, c.draft_vocab, c.vocab);
    const TensorView t = W.tensor("d2t");
    if (t.dtype() != DType::I64 || t.numel() != c.draft_vocab)
      fail("{}: tensor 'd2t' must be I64 [{}]", *t.file, c.draft_vocab);
    d2t_.resize(size_t(c.draft_vocab));
    std::memcpy(d2t_.data(), t.data, d2t_.size() * sizeof(int64_t));
    for (int64_t d = 0; d < c.draft_vocab; ++d)
      if (d + d2t_[size_t(d)] < 0 || d + d2t_[size_t(d)] >= c.vocab)
        fail("{}: d2t maps draft id {} outside the vocabulary", *t.file, d);
  }
  if (embed_.rows() != c.vocab) fail("{}: the borrowed embedding has {} rows, not {}", dir, embed_.rows(), c.vocab);
}

void Eagle3Model::attention_input(const int32_t* tokens, Tensor g, Tensor x) const {
  const int64_t H = cfg_.hidden, T = g.rows();
  Buffer e(be_, T, H);
  be_.embed(embed_, tokens, T, e);
  be_.rmsnorm(e, input_norm_, cfg_.eps, x.col_range(0, H));
  be_.rmsnorm(g, hidden_norm_, cfg_.eps, x.col_range(H, H));
}

void Eagle3Model::latent_rows(Tensor x, int64_t pos0, Tensor rows) const {
  const int64_t C = cfg_.kv_lora, R = cfg_.rope_dim;
  Buffer kva(be_, x.rows(), C + R);
  be_.matmul(kv_a_, x, kva);
  be_.rmsnorm(kva.view().col_range(0, C), kv_a_norm_, cfg_.eps, rows.col_range(0, C));
  be_.copy(kva.view().col_range(C, R), rows.col_range(C, R));
  be_.rope(cfg_.rope, rows.col_range(C, R), 1, R, 0, pos0);
}

Eagle3Model::~Eagle3Model() = default;

namespace {
struct Eagle3State : HiddenDraftModel::State {
  Buffer cache;  // [positions - 1, kv_lora + rope]: rows paired with their successor token
  Buffer fused;  // [positions, H]: every taken row's fused hidden state
  int64_t pos = 0;
  int64_t positions() const override { return pos; }
  int64_t bytes() const override { return cache.bytes() + fused.bytes(); }
};
}  // namespace

std::unique_ptr<HiddenDraftModel::State> Eagle3Model::new_state() const {
  auto s = std::make_unique<Eagle3State>();
  s->cache = Buffer(be_, 0, cfg_.kv_lora + cfg_.rope_dim);
  s->fused = Buffer(be_, 0, cfg_.hidden);
  return s;
}

void Eagle3Model::cut(State& state, int64_t n) const {
  auto& st = static_cast<Eagle3State&>(state);
  if (n >= st.pos) return;
  n = std::max<int64_t>(n, 0);
  st.fused.resize_rows(n);
  st.cache.resize_rows(std::max<int64_t>(n - 1, 0));  // a row's cache entry needs its successor token
  st.pos = n;
}

void Eagle3Model::extend(State& state, const float* rows, int64_t n, const std::vector<int32_t>& history) const {
  if (n <= 0) return;
  auto& st = static_cast<Eagle3State&>(state);
  const int64_t H = cfg_.hidden, Ht = cfg_.target_hidden, taps = int64_t(cfg_.target_layers.size());
  Buffer in(be_, n, taps * Ht);
  be_.upload(rows, in);
  for (size_t j = 0; j < fc_norms_.size(); ++j) {
    const Tensor tap = in.view().col_range(int64_t(j) * Ht, Ht);
    be_.rmsnorm(tap, fc_norms_[j], cfg_.eps, tap);
  }
  st.fused.resize_rows(st.pos + n);
  be_.matmul(fc_, in, st.fused.row_range(st.pos, n));
  st.pos += n;
  // Every row but the newest now has its successor token fed: into the cache.
  const int64_t from = st.cache.rows(), to = st.pos - 1;
  if (to <= from) return;
  const int64_t m = to - from;
  Buffer x(be_, m, 2 * H);
  attention_input(history.data() + from + 1, st.fused.row_range(from, m), x);
  st.cache.resize_rows(to);
  latent_rows(x, from, st.cache.row_range(from, m));
}

std::vector<int32_t> Eagle3Model::draft(State& state, const std::vector<int32_t>& history, int64_t k) const {
  auto& st = static_cast<Eagle3State&>(state);
  Buffer& cache = st.cache;
  std::vector<int32_t> out;
  if (k <= 0 || st.pos == 0 || int64_t(history.size()) != st.pos + 1) return out;
  const Eagle3Config& s = cfg_;
  const int64_t H = s.hidden, qh = s.nope + s.rope_dim, committed = cache.rows();
  const MlaShape shape{.n_heads = s.heads, .kv_lora = s.kv_lora, .nope = s.nope, .rope_dim = s.rope_dim,
                       .v_dim = s.v_dim, .scale = s.attn_scale};
  Buffer g(be_, 1, H), x(be_, 1, 2 * H), qa(be_, 1, s.q_lora), q(be_, 1, s.heads * qh), att(be_, 1, s.heads * s.v_dim);
  Buffer h(be_, 1, H), xn(be_, 1, H), f(be_, 1, H), gt(be_, 1, s.intermediate), ut(be_, 1, s.intermediate),
      act(be_, 1, s.intermediate), logits(be_, 1, s.draft_vocab);
  std::vector<float> lg(size_t(s.draft_vocab));
  be_.copy(st.fused.row_range(st.pos - 1, 1), g);  // the newest row, paired with the chosen token
  int32_t token = history.back();
  for (int64_t i = 0; i < k; ++i) {
    const int64_t p = committed + i;  // this step's position (its cache row)
    attention_input(&token, g, x);
    be_.matmul(q_a_, x, qa);
    be_.rmsnorm(qa, q_a_norm_, s.eps, qa);
    be_.matmul(q_b_, qa, q);
    be_.rope(s.rope, q, s.heads, qh, s.nope, p);
    cache.resize_rows(p + 1);
    latent_rows(x, p, cache.row_range(p, 1));
    be_.mla_attend(shape, kv_b_, q, cache.row_range(0, p + 1), p, att);
    be_.matmul(o_, att, h);
    be_.add(g, h);  // the residual is the fused hidden state
    be_.rmsnorm(h, post_norm_, s.eps, xn);
    be_.matmul(gate_, xn, gt);
    be_.matmul(up_, xn, ut);
    be_.gated(GatedActivation{}, gt, ut, act);
    be_.matmul(down_, act, f);
    be_.add(f, h);
    be_.rmsnorm(h, norm_, s.eps, xn);
    be_.matmul(head_, xn, logits);
    be_.download(logits, lg.data());
    int64_t best = 0;
    for (int64_t v = 1; v < s.draft_vocab; ++v)
      if (lg[size_t(v)] > lg[size_t(best)]) best = v;
    token = int32_t(d2t_.empty() ? best : best + d2t_[size_t(best)]);
    out.push_back(token);
    be_.copy(xn, g);  // the next step continues from this one's post-norm hidden state
  }
  cache.resize_rows(committed);
  return out;
}

}  // namespace sluice
