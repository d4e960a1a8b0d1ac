#include "util/trace.h"

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "util/error.h"

namespace sluice::trace {
namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<std::string> g_events;
std::string g_path;
Clock::time_point g_t0;

double us(Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - g_t0).count(); }
uint64_t tid() { return std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000; }

// Names are ours (layer and expert numbers); escaped anyway.
std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

void add(std::string e) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_on.load(std::memory_order_relaxed)) g_events.push_back(std::move(e));
}

}  // namespace

bool enabled() { return g_on.load(std::memory_order_relaxed); }

void start(const std::string& path) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_events.clear();
  g_path = path;
  g_t0 = Clock::now();
  g_on.store(true);
}

void stop() {
  std::vector<std::string> events;
  std::string path;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_on.load()) return;
    g_on.store(false);
    events.swap(g_events);
    path = g_path;
  }
  std::ofstream out(path);
  if (!out) fail("{}: cannot write the trace", path);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) out << events[i] << (i + 1 < events.size() ? ",\n" : "\n");
  out << "]}\n";
  if (!out) fail("{}: cannot write the trace", path);
}

void span(const std::string& name, const char* cat, Clock::time_point t0, Clock::time_point t1) {
  if (!enabled()) return;
  add(fmt::format("{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":1,\"tid\":{}}}",
                  quoted(name), cat, us(t0), us(t1) - us(t0), tid()));
}

void async_begin(const std::string& name, const char* cat, uint64_t id) {
  if (!enabled()) return;
  add(fmt::format("{{\"name\":{},\"cat\":\"{}\",\"ph\":\"b\",\"id\":{},\"ts\":{:.3f},\"pid\":1,\"tid\":{}}}",
                  quoted(name), cat, id, us(Clock::now()), tid()));
}

void async_end(const std::string& name, const char* cat, uint64_t id) {
  if (!enabled()) return;
  add(fmt::format("{{\"name\":{},\"cat\":\"{}\",\"ph\":\"e\",\"id\":{},\"ts\":{:.3f},\"pid\":1,\"tid\":{}}}",
                  quoted(name), cat, id, us(Clock::now()), tid()));
}

}  // namespace sluice::trace
