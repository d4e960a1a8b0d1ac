#include "util/splitmix64.h"
#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace sluice {

std::vector<int32_t> NgramDrafter::propose(const std::vector<int32_t>& h, int64_t max) {
  const int64_t N = int64_t(h.size());
  for (int64_t n = std::min(max_n_, N - 1); n >= min_n_; --n) {
    // Most recent earlier occurrence of the last n tokens.
    for (int64_t start = N - n - 1; start >= 0; --start) {
      if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
      std::vector<int32_t> out;
      for (int64_t i = start + n; i < N && int64_t(out.size()) < max; ++i) out.push_back(h[size_t(i)]);
      if (!out.empty()) return out;
    }
  }
  return {};
}

ReplayDrafter ReplayDrafter::with_acceptance(std::vector<int32_t> text, double acceptance, uint64_t seed,
                                             int64_t vocab) {
  ReplayDrafter d(std::move(text), 0, vocab);
  d.acceptance_ = std::clamp(acceptance, 0.0, 1.0);
  d.seed_ = seed;
  return d;
}


std::vector<int32_t> ReplayDrafter::propose(const std::vector<int32_t>& h, int64_t max) {
  std::vector<int32_t> out;
  for (size_t i = h.size(); i < text_.size() && int64_t(out.size()) < max; ++i) {
    int32_t t = text_[i];
    ++count_;
    const bool wrong = acceptance_ >= 0 ? double(splitmix64(seed_ * 0x100000001B3ull + uint64_t(count_)) >> 11) * 0x1p-53 >= acceptance_
                                        : wrong_every_ > 0 && count_ % wrong_every_ == 0;
    if (wrong) t = int32_t((t + 1) % vocab_);
    out.push_back(t);
  }
  return out;
}

std::string describe_speculation(const SpeculationStats& st) {
  std::string o = fmt::format(
      "[speculation: {} tokens after {} forward passes, {} of {} drafts accepted ({:.0f}%); gate {} (acceptance "
      "{:.2f}, a drafted token costs {:.2f} plain steps; {:.4f} s per plain step, {:.4f} s per verification pass; "
      "{} plain steps while off, {} probes, {} drafts watched while off with {} tokens right; the gate's own time "
      "{:.2f}% of decoding)",
      st.generated, st.forward_passes(), st.accepted, st.proposed, 100 * st.acceptance(),
      !st.gate_used ? "not used (--no-draft-gate)" : st.gate_on ? "on" : "off",
      st.gate_acceptance, st.gate_draft_cost, st.plain ? st.plain_seconds / double(st.plain) : 0.0,
      st.passes ? st.pass_seconds / double(st.passes) : 0.0, st.off_steps, st.probes, st.watched,
      st.watched_accepted, 100 * st.gate_share());
  std::string costs;
  for (size_t k = 1; k < st.gate_pass_cost.size(); ++k)
    if (st.gate_pass_cost[k] > 0) costs += fmt::format("{}{}: {:.2f}", costs.empty() ? "" : ", ", k, st.gate_pass_cost[k]);
  if (!costs.empty()) o += fmt::format("; a pass of k drafts in plain steps: {}", costs);
  if (st.index.max_tokens > 0)
    o += fmt::format("; suffix index: {} tokens in {} documents, {:.1f} MiB (cap {} tokens)", st.index.tokens,
                     st.index.documents, double(st.index.bytes) / (1 << 20), st.index.max_tokens);
  return o + "]";
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int64_t decode(Session& s, std::vector<float> logits, std::vector<int32_t> history, int64_t max_new,
               const TokenPicker& pick, const TokenSink& take, Drafter* drafter, const SpeculationOptions& opts,
               SpeculationStats* stats) {
  SpeculationStats local;
  SpeculationStats& st = stats ? *stats : local;
  if (max_new <= 0) return 0;
  const size_t V = size_t(s.model().info().vocab);
  int64_t n = 0;
  // Picks and hands over the token at one position; false: decoding ends here.
  auto emit = [&](float* row, int32_t& token) {
    token = pick(row);
    history.push_back(token);
    ++n;
    ++st.generated;
    return take(token) && n < max_new;
  };
  int32_t next;  // chosen and taken, not yet fed
  if (!emit(logits.data(), next)) {
    if (drafter) st.index = drafter->index_size();
    return n;
  }
  // A lookup drafter costs nothing to ask: while paused, the gate watches it.
  DraftGate gate(opts, drafter && !drafter->costs_when_empty());
  auto finish = [&] {
    st.gate_on = gate.on();
    st.gate_used = opts.adaptive;
    st.gate_acceptance = gate.acceptance();
    st.gate_draft_cost = gate.draft_cost();
    st.gate_pass_cost.assign(size_t(std::max<int64_t>(0, opts.max_draft)) + 1, 0.0);
    for (int64_t k = 1; k <= opts.max_draft; ++k)
      if (gate.measured(k)) st.gate_pass_cost[size_t(k)] = gate.pass_cost(k);
    st.gate_pause = gate.pause_length();
    st.off_steps = gate.off_steps();
    st.probes = gate.probes();
    st.watched = gate.watched_drafts();
    if (drafter) st.index = drafter->index_size();
    return n;
  };
  std::vector<int32_t> watched;  // a lookup's draft while paused, checked against the plain tokens
  size_t watched_hits = 0;
  bool told_paused = false;
  for (;;) {
    // Never draft past the token budget.
    auto t0 = Clock::now();
    const int64_t want = drafter ? gate.next(max_new - n) : 0;
    if (drafter && want == 0) {
      if (watched.empty()) {
        if (const int64_t w = gate.watch(max_new - n); w > 0) {
          watched = drafter->propose_for(s, history, w);
          watched_hits = 0;
        }
      }
      if (gate.paused() && !told_paused) {
        drafter->pause();
        told_paused = true;
      }
      st.gate_seconds += since(t0);
      t0 = Clock::now();  // the plain step's time without the watching
    }
    std::vector<int32_t> draft = want > 0 ? drafter->propose_for(s, history, want) : std::vector<int32_t>{};
    if (want > 0) watched.clear(), told_paused = false;
    if (draft.empty()) {
      logits = s.feed({next});
      const double dt = opts.pass_cost ? opts.pass_cost(1) : since(t0);
      ++st.plain;
      st.plain_seconds += dt;
      auto t1 = Clock::now();
      if (want > 0 && drafter->costs_when_empty())
        gate.pass(want, 0, dt);  // drafting cost time and gave nothing
      else
        gate.plain(dt);
      if (drafter) st.gate_seconds += since(t1);
      const bool more = emit(logits.data(), next);
      if (!watched.empty()) {
        t1 = Clock::now();
        const bool hit = next == watched[watched_hits];
        watched_hits += hit ? 1 : 0;
        if (!hit || watched_hits == watched.size()) {
          gate.watched(int64_t(watched.size()), int64_t(watched_hits));
          st.watched_accepted += int64_t(watched_hits);
          watched.clear();
        }
        st.gate_seconds += since(t1);
      }
      if (!more) return finish();
      continue;
    }
    // `next` and the draft in one pass; position i's logits choose the token after draft[i-1].
    std::vector<int32_t> batch{next};
    batch.insert(batch.end(), draft.begin(), draft.end());
    s.checkpoint();
    logits = s.feed_all(batch);
    double dt = since(t0);
    size_t i = 0;
    bool more = true;
    int32_t chosen = -1;
    for (;; ++i) {
      more = emit(logits.data() + i * V, chosen);
      if (!more || i == draft.size() || chosen != draft[i]) break;
    }
    const bool matched = i < draft.size() && chosen == draft[i];  // only when stopping on a draft token
    // Keep `next` and the drafts taken before position i (the token chosen there is not fed yet).
    // The rollback is part of the pass's cost (recurrent state replays the kept rows), emitting is not.
    const auto t2 = Clock::now();
    s.rollback(int64_t(1 + i));
    dt = opts.pass_cost ? opts.pass_cost(int64_t(batch.size())) : dt + since(t2);
    ++st.passes;
    st.pass_seconds += dt;
    st.proposed += int64_t(draft.size());
    st.accepted += int64_t(i + (matched ? 1 : 0));
    gate.pass(int64_t(draft.size()), int64_t(i), dt);
    if (!more) return finish();
    next = chosen;
  }
}

void capture_for_drafter(Session& s, const Drafter* drafter) {
  if (!drafter || s.hidden_capture()) return;
  std::vector<int64_t> layers = drafter->target_layers();
  if (!layers.empty()) s.capture_hidden(std::move(layers));
}

std::vector<int32_t> generate(Session& s, const std::vector<int32_t>& prompt, int64_t max_new, bool ignore_eos,
                              const TokenPicker& pick, Drafter* drafter, const SpeculationOptions& opts,
                              SpeculationStats* stats, const std::function<void(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (max_new <= 0) return out;
  const auto& eos = s.model().info().eos_ids;
  capture_for_drafter(s, drafter);
  std::vector<float> logits = s.feed(prompt);
  auto take = [&](int32_t t) {
    out.push_back(t);
    if (on_token) on_token(t);
    return ignore_eos || std::find(eos.begin(), eos.end(), t) == eos.end();
  };
  decode(s, std::move(logits), s.tokens(), max_new, pick, take, drafter, opts, stats);
  return out;
}

std::vector<int32_t> generate_speculative(Session& s, const std::vector<int32_t>& prompt, int64_t max_new,
                                          bool ignore_eos, Drafter& drafter, const SpeculationOptions& opts,
                                          SpeculationStats* stats, const std::function<void(int32_t)>& on_token) {
  const int64_t V = s.model().info().vocab;
  auto greedy = [V](float* logits) { return argmax(logits, V); };
  return generate(s, prompt, max_new, ignore_eos, greedy, &drafter, opts, stats, on_token);
}

}  // namespace sluice
