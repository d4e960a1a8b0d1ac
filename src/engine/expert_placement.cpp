#include "engine/expert_placement.h"

#include <chrono>
#include <limits>

#include <fmt/format.h>

#include "compute/backend.h"
#include "compute/devices.h"
#include "compute/host_expert_timing.h"
#include "compute/host_experts.h"
#include "util/thread_pool.h"

namespace sluice {
namespace {

const char* experts_on_name(ExpertsOn on) {
  switch (on) {
    case ExpertsOn::Cpu: return "cpu";
    case ExpertsOn::Auto: return "auto";
    default: return "gpu";
  }
}

}  // namespace

HostExpertMeasurement measure_host_expert(const ExpertWeights& w, Backend& device, double margin) {
  const auto t0 = std::chrono::steady_clock::now();
  HostExpertMeasurement m;
  m.format = std::string(weight_format_name(w.gate.q.fmt));
  m.bytes = expert_bytes(w);
  m.threads = ThreadPool::global().size();
  // 64 MiB: long enough that the copy runs at the link's rate (bench --kernels --device cuda uses the same).
  m.copy_gbps = pinned_upload_gbps(device, 64ull << 20);
  {
    const ExpertCopies copies(w, copies_beyond_cache(m.bytes));
    for (const int64_t rows : {1, 2, 4, 8, 16}) {
      const int64_t one[] = {rows};
      m.host_seconds.push_back(time_expert_rows(cpu_backend(), copies.experts(), one, 3).front());
      // Decided once the copy wins at a count measured: larger counts cannot change the answer, and a
      // slow host (where the measurement costs most) stops after one row.
      if (host_expert_max_rows(m.host_seconds, m.bytes, m.copy_gbps, margin) <= rows) break;
    }
  }
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

ExpertPlacement place_experts(ExpertsOn asked, int64_t rows, const HostExpertMeasurement* m) {
  ExpertPlacement p;
  p.asked = p.runs = asked;
  if (asked == ExpertsOn::Cpu) p.host_max_rows = std::numeric_limits<int64_t>::max();
  if (asked != ExpertsOn::Auto) return p;
  if (rows > 0) {
    p.rows_given = true;
    p.host_max_rows = rows;
    return p;
  }
  if (m) p.measured = *m;
  // Nothing measured (no GPU to copy to) is no ground for the host: host_expert_max_rows gives 1.
  p.host_max_rows = m ? host_expert_max_rows(m->host_seconds, m->bytes, m->copy_gbps, p.margin) : 1;
  if (p.host_max_rows <= 1) {
    p.host_max_rows = 0;
    p.runs = ExpertsOn::Gpu;
  }
  return p;
}

std::shared_ptr<HostExperts> ExpertPlacement::host_experts(Backend& host) const {
  if (runs == ExpertsOn::Gpu) return nullptr;
  auto h = std::make_shared<HostExperts>();
  h->backend = &host;
  h->max_rows = host_max_rows;
  return h;
}

std::string ExpertPlacement::describe() const {
  if (asked != ExpertsOn::Auto) return {};
  if (rows_given)
    return fmt::format("experts: auto: experts outside the fixed VRAM set with fewer than {} rows in a pass on the "
                       "host (--host-expert-rows {}), the others on the GPU",
                       host_max_rows, host_max_rows);
  if (!measured) return "experts: auto: nothing measured: every expert on the GPU (--host-expert-rows N to fix it)";
  const HostExpertMeasurement& m = *measured;
  const double copy_ms = m.copy_gbps > 0 ? 1e3 * double(m.bytes) / (m.copy_gbps * 1e9) : 0;
  const double one_ms = m.host_seconds.empty() ? 0 : 1e3 * m.host_seconds.front().second;
  const std::string inputs = fmt::format(
      "host {:.2f} ms per 1-row {} expert of {:.1f} MB ({} threads; x{:.1f} for the engine's own slowdown: {:.2f} ms) "
      "vs copy {:.2f} ms at {:.1f} GB/s (measured in {:.0f} ms)",
      one_ms, m.format, double(m.bytes) / 1e6, m.threads, margin, margin * one_ms, copy_ms, m.copy_gbps,
      1e3 * m.seconds);
  if (runs == ExpertsOn::Gpu)
    return fmt::format("experts: auto: {}: every expert on the GPU, as --experts-on gpu (--host-expert-rows N to fix "
                       "it)",
                       inputs);
  const int64_t last = m.host_seconds.back().first;
  return fmt::format("experts: auto: {}: experts outside the fixed VRAM set with fewer than {} rows in a pass on the "
                     "host ({}; --host-expert-rows N to fix it)",
                     inputs, host_max_rows,
                     host_max_rows > last ? fmt::format("the host is faster at every count measured, up to {} rows", last)
                                          : fmt::format("the copy wins from {} rows", host_max_rows));
}

nlohmann::json ExpertPlacement::to_json() const {
  nlohmann::json j = {{"experts_on", experts_on_name(asked)}, {"runs_as", experts_on_name(runs)}};
  if (asked != ExpertsOn::Auto) return j;
  j["host_expert_rows"] = host_max_rows;
  j["host_expert_rows_given"] = rows_given;
  if (measured) {
    const HostExpertMeasurement& m = *measured;
    nlohmann::json host = nlohmann::json::array();
    for (const auto& [rows, s] : m.host_seconds) host.push_back({{"rows", rows}, {"seconds", s}});
    j["measured"] = {{"format", m.format},         {"expert_bytes", m.bytes}, {"threads", m.threads},
                     {"host_seconds", host},       {"pinned_upload_gbps", m.copy_gbps},
                     {"margin", margin},           {"measure_seconds", m.seconds}};
  }
  return j;
}

}  // namespace sluice
