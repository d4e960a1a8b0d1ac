#include "model/moe.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "compute/host_experts.h"
#include "util/error.h"
#include "util/thread_pool.h"
#include "util/trace.h"

namespace sluice {

namespace {
// An expert acquired from its source for one call, released when this goes (the call threw or not).
class HeldExpert {
 public:
  HeldExpert(ExpertSource& src, int32_t layer, int32_t expert)
      : src_(src), layer_(layer), expert_(expert), w_(src.acquire(layer, expert)) {}
  ~HeldExpert() { src_.release(layer_, expert_); }
  HeldExpert(const HeldExpert&) = delete;
  HeldExpert& operator=(const HeldExpert&) = delete;
  const ExpertWeights& weights() const { return w_; }

 private:
  ExpertSource& src_;
  int32_t layer_, expert_;
  const ExpertWeights& w_;
};

// y = w x over x's rows in batches of `rows` (0: all at once). The product gives a row the
// same bits in any batch, and the CPU kernels keep a copy of the largest input they were
// given (per thread, for good): a span's whole rows at once would leave it that large.
void matmul_rows(Backend& be, const Matrix& w, Tensor x, Tensor y, int64_t rows) {
  const int64_t T = x.rows(), step = rows > 0 ? rows : T;
  for (int64_t r0 = 0; r0 < T; r0 += step) {
    const int64_t n = std::min(step, T - r0);
    be.matmul(w, x.row_range(r0, n), y.row_range(r0, n));
  }
}
}  // namespace

void MoeBlock::route_tokens(Tensor x, std::vector<int32_t>& ids, std::vector<float>& weights,
                            int64_t batch_rows) const {
  const int64_t T = x.rows(), E = spec_.n_experts, K = spec_.top_k;
  ids.resize(size_t(T * K));
  weights.resize(size_t(T * K));
  // The router's logits come to the host: the choice of experts is host logic. A span's rows
  // go in batches (its logits would be [T, n_experts] twice): a row's logits are its own and
  // the product gives it the same bits in any batch.
  const int64_t step = batch_rows > 0 ? std::min(batch_rows, T) : T;
  Buffer logits_dev(be_, step, E);
  std::vector<float> logits(static_cast<size_t>(step * E));
  for (int64_t r0 = 0; r0 < T; r0 += step) {
    const int64_t n = std::min(step, T - r0);
    const Tensor dev = Tensor(logits_dev).row_range(0, n);
    be_.matmul(router_, x.row_range(r0, n), dev);
    be_.download(dev, logits.data());
    // Tokens are routed apart, so in parallel: a prefill chunk's 1,286 tokens took ~17 ms on one
    // core (K3: top 16 of 896), with the GPU waiting.
    ThreadPool::global().parallel_for(n, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* lg = logits.data() + t * E;
        if (router_bias_)
          for (int64_t e = 0; e < E; ++e) lg[e] += router_bias_[e];
        route(spec_, lg, ids.data() + (r0 + t) * K, weights.data() + (r0 + t) * K);
      }
    });
  }
  if (experts_->override_routes) override_routes(T, ids, /*hint=*/false);
}

// Benchmark-only routing (compute/expert_source.h): the ids are replaced, the weights are the
// router's own for its own picks, slot by slot. Kept rather than recomputed from the router's
// scores of the replacement ids because the benchmark measures reads and compute, not quality:
// the router's weights keep the weighted sum's scale (renormalized, scaled) what the model
// produces, so activations stay in range, while the scores of experts the router did not pick
// would be near zero and shrink the output. The sum runs in expert-id order (packed by id
// below), so the order of a token's ids does not matter; they must be distinct and in range.
bool MoeBlock::override_routes(int64_t T, std::vector<int32_t>& ids, bool hint) const {
  const int64_t E = spec_.n_experts, K = spec_.top_k;
  if (!experts_->override_routes(layer_, T, K, ids.data(), hint)) return false;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* row = ids.data() + t * K;
    for (int64_t j = 0; j < K; ++j) {
      if (row[j] < 0 || row[j] >= E)
        fail("routing override: layer {} token {}: expert {} is out of range (the layer has {} experts)", layer_, t,
             row[j], E);
      for (int64_t i = 0; i < j; ++i)
        if (row[i] == row[j]) fail("routing override: layer {} token {}: expert {} picked twice", layer_, t, row[j]);
    }
  }
  return true;
}

// Router logits (device and host), the latent input, the shared expert's
// output (with a latent projection: the up-projection's, the shared expert writing into
// the block's output) and scratch, every chosen expert's output (packed, alive until the
// weighted sum in expert-id order), and the sum. A backend that runs a group of
// experts at once also holds the group's packed input and every packed row's
// gate/up scratch; one that goes expert by expert holds one expert's input and
// scratch at a time, at most every token's row (an expert picked by all of them).
int64_t MoeBlock::activation_floats_per_token(int64_t routed_width) const {
  const int64_t D = router_.cols(), W = latent_ ? latent_->down.rows() : D, K = spec_.top_k;
  const int64_t shared = shared_ ? D + shared_->activation_floats_per_token(0) : 0;
  const int64_t inputs = be_.groups_experts() ? K * W + 2 * K * routed_width : W + 2 * routed_width;
  // Beside a GPU: the host's outputs uploaded after the packed rows, and the rows moved into place.
  const int64_t placed = experts_->host ? 2 * K * W : 0;
  return 2 * spec_.n_experts + W + shared + K * W + inputs + W + placed;
}

void MoeBlock::prefetch_hint(Tensor x, int64_t batch_rows) const {
  std::vector<int32_t> ids;
  std::vector<float> w;
  if (experts_->override_routes) {
    // The override's own guess at this layer's picks, not the router's (which it replaces).
    ids.resize(size_t(x.rows() * spec_.top_k));
    if (!override_routes(x.rows(), ids, /*hint=*/true)) return;
  } else {
    route_tokens(x, ids, w, batch_rows);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const ExpertShards& shards = experts_->shards;
  if (shards.sharded())  // another rank computes (and reads) the experts it owns
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t e) { return !shards.owns(layer_, e); }), ids.end());
  experts_->source->prefetch(layer_, ids.data(), int64_t(ids.size()));
}

// The pass's routes grouped by expert: the distinct experts in id order, each one's
// tokens, and the rows packed in that order (expert i owns packed rows
// [offsets[i], offsets[i+1])); under expert parallelism, the run this rank computes.
MoeBlock::Pass MoeBlock::group_by_expert(const std::vector<int32_t>& ids, const std::vector<float>& wts,
                                         int64_t T) const {
  const int64_t E = spec_.n_experts, K = spec_.top_k;
  Pass p;
  p.rows.resize(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = ids[size_t(t * K + j)];
      p.rows[size_t(e)].push_back(t);
      weights[size_t(e)].push_back(wts[size_t(t * K + j)]);
    }
  for (int32_t e = 0; e < int32_t(E); ++e) {
    if (p.rows[size_t(e)].empty()) continue;
    p.chosen.push_back(e);
    p.packed_rows.insert(p.packed_rows.end(), p.rows[size_t(e)].begin(), p.rows[size_t(e)].end());
    p.packed_weights.insert(p.packed_weights.end(), weights[size_t(e)].begin(), weights[size_t(e)].end());
    p.offsets.push_back(int64_t(p.packed_rows.size()));
  }
  // Expert parallelism: this rank computes (and reads) only the chosen experts it owns,
  // chosen[mine_begin, mine_end) (owned experts are a contiguous run of expert ids).
  const ExpertShards& shards = experts_->shards;
  p.mine_end = p.chosen.size();
  if (shards.sharded()) {
    while (p.mine_begin < p.chosen.size() && shards.owner(layer_, p.chosen[p.mine_begin]) < shards.exchange->rank())
      ++p.mine_begin;
    p.mine_end = p.mine_begin;
    while (p.mine_end < p.chosen.size() && shards.owns(layer_, p.chosen[p.mine_end])) ++p.mine_end;
  }
  return p;
}

void MoeBlock::forward(Tensor x, Tensor out) const { forward_rows(x, out, 0); }

void MoeBlock::forward_span(Tensor x, Tensor out, int64_t batch_rows) const { forward_rows(x, out, batch_rows); }

// Per row of a span: its routes (ids and weights, then grouped by expert: each pick's token
// and weight; eight floats per pick while they are grouped), the latent input, the weighted
// sum, and the shared expert's output where the experts read the input itself (with a latent
// projection it goes into the output). The router's logits, the chosen experts' inputs,
// outputs and scratch, and the up-projection's output are a batch's.
int64_t MoeBlock::span_floats_per_token() const {
  const int64_t D = router_.cols(), W = latent_ ? latent_->down.rows() : D, K = spec_.top_k;
  return 8 * K + (latent_ ? W : 0) + W + (shared_ && !latent_ ? D : 0);
}

// The packed rows [n0, n1) of p as a pass of their own: the experts they belong to (the
// first and last possibly cut), each with its rows in that range, in the same order.
MoeBlock::Pass MoeBlock::slice(const Pass& p, int64_t n0, int64_t n1) const {
  Pass q;
  q.rows.resize(p.rows.size());
  for (size_t i = 0; i < p.chosen.size(); ++i) {
    const int64_t a = std::max(n0, p.offsets[i]), b = std::min(n1, p.offsets[i + 1]);
    if (a >= b) continue;
    const int32_t e = p.chosen[i];
    q.chosen.push_back(e);
    const auto& all = p.rows[size_t(e)];
    q.rows[size_t(e)].assign(all.begin() + (a - p.offsets[i]), all.begin() + (b - p.offsets[i]));
    q.offsets.push_back(q.offsets.back() + (b - a));
  }
  q.packed_rows.assign(p.packed_rows.begin() + n0, p.packed_rows.begin() + n1);
  q.packed_weights.assign(p.packed_weights.begin() + n0, p.packed_weights.begin() + n1);
  q.mine_begin = 0;
  q.mine_end = q.chosen.size();
  return q;
}

// `out` may be `x` itself (a span's output written over its input): x is read by the router,
// the latent projection, the shared expert (batch by batch, each batch's rows before they are
// written) and, without a latent projection, the experts, all before out is written but for
// the shared expert's own rows when the experts do not read x.
void MoeBlock::forward_rows(Tensor x, Tensor out, int64_t batch_rows) const {
  trace::Span traced("compute", trace::enabled() ? fmt::format("moe L{}", layer_) : std::string());
  const int64_t T = x.rows(), D = router_.cols(), K = spec_.top_k;
  ExpertSource& src = *experts_->source;
  Pass p;
  {
    std::vector<int32_t> ids;
    std::vector<float> wts;
    route_tokens(x, ids, wts, batch_rows);
    p = group_by_expert(ids, wts, T);
  }  // the routes live on, grouped, in p
  // The distinct experts are requested at once so reads start now.
  if (experts_->on_request) {
    std::vector<int64_t> picked(p.chosen.size());
    for (size_t i = 0; i < p.chosen.size(); ++i) picked[i] = p.rows_of(i);
    experts_->on_request(layer_, p.chosen.data(), picked.data(), int64_t(p.chosen.size()));
  }
  src.request(layer_, p.chosen.data() + p.mine_begin, int64_t(p.mine_end - p.mine_begin));

  // Work that needs no routed expert, overlapping the reads.
  Tensor xin = x;
  int64_t W = D;
  Buffer latent_in;
  if (latent_) {
    W = latent_->down.rows();
    latent_in = Buffer(be_, T, W);
    matmul_rows(be_, latent_->down, x, latent_in, batch_rows);
    xin = latent_in;
  }
  // The shared expert's output: straight into out when the experts read the latent input (the
  // routed sum is added to it below: shared + routed is routed + shared bit for bit, addition
  // commutes), else aside until they are done with x.
  Buffer shared_out;
  if (shared_) {
    Tensor so = out;
    if (!latent_) {
      shared_out = Buffer(be_, T, D);
      so = shared_out;
    }
    if (batch_rows > 0) shared_->forward_span(x, so, batch_rows);
    else shared_->forward(x, so);
  }

  // The chosen experts over their rows, summed into acc in expert-id order. A span's
  // packed rows go in batches of batch_rows x top_k (cut anywhere: a row's experts still
  // add in id order, and a product's rows do not depend on the batch), so each expert is
  // read once for the whole span while the scratch stays a chunk's. Under expert
  // parallelism one batch: one exchange per layer.
  Buffer acc(be_, T, W);
  const int64_t N = p.offsets.back();
  const int64_t step = batch_rows > 0 && !experts_->shards.sharded() ? std::max<int64_t>(1, batch_rows * K) : N;
  if (step >= N) {
    compute_experts(p, xin, acc);
  } else {
    for (int64_t n0 = 0; n0 < N; n0 += step) compute_experts(slice(p, n0, std::min(N, n0 + step)), xin, acc);
  }
  if (latent_) {
    if (!latent_->norm.empty()) be_.rmsnorm(acc, latent_->norm, latent_->eps, acc);
    if (!shared_) {
      matmul_rows(be_, latent_->up, acc, out, batch_rows);
    } else {  // out holds the shared expert's output: the up-projection is added to it, batch by batch
      const int64_t rows = batch_rows > 0 ? std::min(batch_rows, T) : T;
      Buffer up(be_, rows, D);
      for (int64_t r0 = 0; r0 < T; r0 += rows) {
        const int64_t n = std::min(rows, T - r0);
        const Tensor u = Tensor(up).row_range(0, n);
        be_.matmul(latent_->up, Tensor(acc).row_range(r0, n), u);
        be_.add(u, out.row_range(r0, n));
      }
    }
  } else {
    be_.copy(acc, out);
    if (shared_) be_.add(shared_out, out);
  }
}

// The pass's chosen experts (this rank's) over their rows of xin, each output weighted and
// added into acc in packed (expert-id) order.
void MoeBlock::compute_experts(const Pass& p, Tensor xin, Tensor acc) const {
  ExpertSource& src = *experts_->source;
  const int64_t W = xin.cols();
  const auto t0 = std::chrono::steady_clock::now();
  // Beside a GPU, the chosen experts the host computes (compute/host_experts.h), and
  // their rows of the input, brought to the host before the device's work is queued.
  const int64_t N = p.offsets.back();
  HostExperts* host = experts_->host.get();
  std::vector<size_t> on_host;
  std::vector<int64_t> host_rows;
  if (host)
    for (size_t i = p.mine_begin; i < p.mine_end; ++i)
      if (host->on_host(src, layer_, p.chosen[i], p.rows_of(i))) {
        on_host.push_back(i);
        const auto& r = p.rows[size_t(p.chosen[i])];
        host_rows.insert(host_rows.end(), r.begin(), r.end());
      }
  const int64_t NH = int64_t(host_rows.size());
  std::vector<float> host_x(size_t(NH * W)), host_y(size_t(NH * W));
  if (NH > 0) {
    Buffer Xh(be_, NH, W);
    be_.gather_rows(xin, host_rows, Xh);
    be_.download(Xh, host_x.data());
  }

  // Y: every chosen expert's output rows in packed order, then (beside a GPU) the
  // host-computed experts' outputs, uploaded together and moved into place below.
  Buffer Y(be_, N + NH, W);
  std::vector<bool> skip(p.chosen.size(), false);
  for (size_t i = 0; i < p.chosen.size(); ++i) skip[i] = i < p.mine_begin || i >= p.mine_end;
  for (const size_t i : on_host) skip[i] = true;
  run_on_device(p, std::move(skip), xin, Tensor(Y).row_range(0, N));
  if (host) host->device_calls += p.mine_end - p.mine_begin - on_host.size();
  Tensor packed_y = Tensor(Y).row_range(0, N);
  Buffer placed_y;
  if (NH > 0) {
    // The device's work is queued: the host computes its experts meanwhile.
    compute_on_host(p, on_host, host_x, host_y, W);
    be_.upload(host_y.data(), Tensor(Y).row_range(N, NH));
    std::vector<int64_t> from(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r) from[size_t(r)] = r;
    int64_t at = N;
    for (const size_t i : on_host)
      for (int64_t r = p.offsets[i]; r < p.offsets[i + 1]; ++r) from[size_t(r)] = at++;
    placed_y = Buffer(be_, N, W);
    be_.gather_rows(Y, from, placed_y);
    packed_y = placed_y;
  }
  const auto t1 = std::chrono::steady_clock::now();
  experts_->routed_seconds += std::chrono::duration<double>(t1 - t0).count();
  if (experts_->shards.sharded()) {
    share_outputs(p.chosen, p.offsets, packed_y);
    experts_->exchange_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  // Weighted sum in expert-id order: identical whatever the arrival order was.
  be_.scatter_add(packed_y, p.packed_rows, p.packed_weights, acc);
}

// The pass's backend computes each chosen expert not skipped once over its tokens into
// its packed rows of Y, resident ones first. Experts that are ready are acquired together
// and computed in one grouped call; before waiting for one that is not, what is held is
// computed (so the device works meanwhile).
void MoeBlock::run_on_device(const Pass& p, std::vector<bool> done, Tensor xin, Tensor Y) const {
  ExpertSource& src = *experts_->source;
  const int64_t W = xin.cols();
  const bool grouped = be_.groups_experts();
  Buffer X;
  if (grouped) {  // every packed row's input at once
    X = Buffer(be_, p.offsets.back(), W);
    be_.gather_rows(xin, p.packed_rows, X);
  }
  std::vector<size_t> group;
  std::vector<const ExpertWeights*> group_w;
  std::vector<int64_t> group_off;
  // Expert by expert (a backend without grouped calls): its input is gathered just before its call.
  auto run_one = [&](size_t i) {
    const int32_t e = p.chosen[i];
    const HeldExpert held(src, layer_, e);
    Buffer Xe(be_, p.rows_of(i), W);
    be_.gather_rows(xin, p.rows[size_t(e)], Xe);
    be_.expert_ffn(held.weights(), act_, Xe, Y.row_range(p.offsets[i], p.rows_of(i)));
  };
  auto flush = [&] {
    if (group.empty()) return;
    if (!grouped) {
      for (const size_t i : group) run_one(i);
      group.clear();
      return;
    }
    // Consecutive chosen experts are consecutive slices: run each maximal run as one call.
    std::sort(group.begin(), group.end());
    for (size_t a = 0; a < group.size();) {
      size_t b = a + 1;
      while (b < group.size() && group[b] == group[b - 1] + 1) ++b;
      group_w.clear();
      group_off.clear();
      try {
        for (size_t k = a; k < b; ++k) {
          group_w.push_back(&src.acquire(layer_, p.chosen[group[k]]));
          group_off.push_back(p.offsets[group[k]] - p.offsets[group[a]]);
        }
        group_off.push_back(p.offsets[group[b - 1] + 1] - p.offsets[group[a]]);
        const int64_t r0 = p.offsets[group[a]], n = group_off.back();
        be_.expert_ffns(group_w, group_off, act_, Tensor(X).row_range(r0, n), Y.row_range(r0, n));
      } catch (...) {
        for (size_t k = 0; k < group_w.size(); ++k) src.release(layer_, p.chosen[group[a + k]]);
        throw;
      }
      for (size_t k = a; k < b; ++k) src.release(layer_, p.chosen[group[k]]);
      a = b;
    }
    group.clear();
  };
  const size_t n = p.chosen.size();
  for (size_t remaining = size_t(std::count(done.begin(), done.end(), false)); remaining > 0; --remaining) {
    size_t pick = n;
    for (size_t i = 0; i < n && pick == n; ++i)
      if (!done[i] && src.ready(layer_, p.chosen[i])) pick = i;
    if (pick == n) {
      flush();
      for (size_t i = 0; i < n && pick == n; ++i)
        if (!done[i]) pick = i;
    }
    group.push_back(pick);
    done[pick] = true;
  }
  flush();
}

// The host's experts over their rows (host_x, packed in on_host order) into host_y:
// those already in host memory first, then each as its read completes.
void MoeBlock::compute_on_host(const Pass& p, const std::vector<size_t>& on_host, std::vector<float>& host_x,
                               std::vector<float>& host_y, int64_t W) const {
  HostExperts& host = *experts_->host;
  ExpertSource& src = *experts_->source;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> first(on_host.size() + 1, 0);  // each expert's first row in host_x
  for (size_t j = 0; j < on_host.size(); ++j) first[j + 1] = first[j] + p.rows_of(on_host[j]);
  std::vector<bool> done(on_host.size(), false);
  for (size_t left = on_host.size(); left > 0; --left) {
    size_t pick = on_host.size();
    for (size_t j = 0; j < on_host.size() && pick == on_host.size(); ++j)
      if (!done[j] && src.ready(layer_, p.chosen[on_host[j]])) pick = j;
    for (size_t j = 0; j < on_host.size() && pick == on_host.size(); ++j)
      if (!done[j]) pick = j;
    done[pick] = true;
    const int32_t e = p.chosen[on_host[pick]];
    const int64_t r0 = first[pick], n = first[pick + 1] - r0;
    const HeldExpert held(src, layer_, e);
    host.backend->expert_ffn(held.weights(), act_, Tensor(host_x.data() + r0 * W, n, W, W),
                             Tensor(host_y.data() + r0 * W, n, W, W));
  }
  host.host_calls += on_host.size();
  host.host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every rank's rows of Y to every rank, in one collective: rank r computed the
// rows of the chosen experts it owns, a contiguous run of Y's rows.
void MoeBlock::share_outputs(const std::vector<int32_t>& chosen, const std::vector<int64_t>& offsets, Tensor Y) const {
  const ExpertShards& shards = experts_->shards;
  ExpertExchange& x = *shards.exchange;
  const int32_t R = x.ranks();
  std::vector<int64_t> begin(size_t(R) + 1, offsets.back());
  begin[0] = 0;
  size_t i = 0;
  for (int32_t r = 1; r < R; ++r) {
    while (i < chosen.size() && shards.owner(layer_, chosen[i]) < r) ++i;
    begin[size_t(r)] = offsets[i];
  }
  const int64_t W = Y.cols(), me0 = begin[size_t(x.rank())], me_n = begin[size_t(x.rank()) + 1] - me0;
  std::vector<float> host(size_t(offsets.back() * W));
  if (me_n > 0) be_.download(Y.row_range(me0, me_n), host.data() + me0 * W);
  x.share_rows(host.data(), W, begin);
  if (offsets.back() > 0) be_.upload(host.data(), Y);
}

}  // namespace sluice
