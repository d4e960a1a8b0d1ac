#include "engine/prefill_progress.h"

#include <algorithm>

#include "engine/engine.h"

namespace sluice {

PrefillMeter::PrefillMeter(const Engine& engine, int64_t tokens, int64_t chunk,
                           std::function<void(const PrefillProgress&)> report)
    : engine_(engine), chunk_(chunk > 0 ? chunk : std::max<int64_t>(1, tokens)), layers_(engine.info().n_layers),
      report_(std::move(report)), start_stats_(engine.expert_stats()), start_(std::chrono::steady_clock::now()) {
  p_.tokens_total = tokens;
  engine_.set_layer_observer([this](int64_t layer) { layer_done(layer); });
}

PrefillMeter::~PrefillMeter() { engine_.set_layer_observer({}); }

void PrefillMeter::layer_done(int64_t layer) {
  const int64_t begin = std::min(pass_ * chunk_, p_.tokens_total);
  const int64_t n = std::min(chunk_, p_.tokens_total - begin);
  p_.tokens_done = double(begin) + double(n) * double(layer + 1) / double(std::max<int64_t>(1, layers_));
  if (layer + 1 == layers_) ++pass_;
  const ExpertStats st = engine_.expert_stats();
  p_.experts_read = st.reads_submitted - start_stats_.reads_submitted;
  p_.expert_bytes_read = st.bytes_read - start_stats_.bytes_read;
  p_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  p_.eta_seconds = p_.tokens_done > 0 ? p_.seconds * (double(p_.tokens_total) - p_.tokens_done) / p_.tokens_done : 0;
  if (report_) report_(p_);
}

}  // namespace sluice
