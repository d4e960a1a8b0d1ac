// sluice info [--json]: what this binary will use on this machine: version, the
// instruction set the kernels run with, threads, and whether io_uring and
// O_DIRECT reads work on the model's filesystem. Keys are stable; later
// sections (memory plan, GPUs) add keys without renaming these.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "io/read_queue.h"
#include "kernels/isa.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace sluice::cli {
namespace {

struct InfoOpts {
  std::string model;
  bool json = false;
};

struct Probe {
  bool ok = false;
  std::string detail;
};

// A file of the model to read from: its first safetensors file, else config.json.
std::string probe_file(const std::string& dir) {
  std::string best;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string p = e.path().string();
    if (p.size() > 12 && p.compare(p.size() - 12, 12, ".safetensors") == 0 && (best.empty() || p < best)) best = p;
  }
  return best.empty() ? dir + "/config.json" : best;
}

// One aligned 4 KiB read with O_DIRECT.
Probe probe_o_direct(const std::string& file) {
  Probe r;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    r.detail = fmt::format("open with O_DIRECT: {}", std::strerror(errno));
    return r;
  }
  void* buf = nullptr;
  if (posix_memalign(&buf, kDirectAlign, kDirectAlign) != 0) {
    ::close(fd);
    r.detail = "out of memory";
    return r;
  }
  const ssize_t n = ::pread(fd, buf, kDirectAlign, 0);
  if (n < 0) r.detail = fmt::format("aligned read: {}", std::strerror(errno));
  r.ok = n >= 0;
  std::free(buf);
  ::close(fd);
  return r;
}

// A read through an io_uring queue (the expert reader's default).
Probe probe_io_uring(const std::string& file) {
  Probe r;
  try {
    auto q = ReadQueue::create(ReadQueue::Kind::IoUring, 4);
    bool direct = false;
    const int fd = open_for_reads(file, false, &direct);
    std::vector<uint8_t> buf(4096);
    q->submit({fd, 0, uint32_t(buf.size()), buf.data(), 1});
    std::vector<ReadCompletion> done;
    while (done.empty()) q->reap(done, true);
    ::close(fd);
    if (done[0].result < 0) {
      r.detail = fmt::format("read: {}", std::strerror(int(-done[0].result)));
      return r;
    }
    r.ok = true;
  } catch (const std::exception& e) {
    r.detail = e.what();
  }
  return r;
}

int run_info(const InfoOpts& o) {
  const std::string dir = model_or_default(o.model);
  const std::string file = probe_file(dir);
  const auto& isa = kernels::active_isa();
  const Probe uring = probe_io_uring(file), direct = probe_o_direct(file);
  nlohmann::json compiled = nlohmann::json::array();
  for (const auto& k : kernels::compiled_isas())
    compiled.push_back({{"name", k.name}, {"supported", kernels::cpu_supports(k)}});
  nlohmann::json j = {
      {"version", SLUICE_VERSION},
      {"isa", isa.name},
      {"isa_compiled", compiled},
      {"threads", ThreadPool::global().size()},
      {"model", dir},
      {"io_uring", uring.ok},
      {"o_direct", direct.ok},
  };
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("sluice %s\n", SLUICE_VERSION);
  std::printf("isa:      %s (compiled: %s; force one with SLUICE_ISA)\n", std::string(isa.name).c_str(),
              kernels::describe_isas().c_str());
  std::printf("threads:  %d\n", ThreadPool::global().size());
  std::printf("model:    %s\n", dir.c_str());
  std::printf("io_uring: %s%s\n", uring.ok ? "yes" : "no", uring.ok ? "" : (" (" + uring.detail + ")").c_str());
  std::printf("o_direct: %s%s (on %s)\n", direct.ok ? "yes" : "no", direct.ok ? "" : (" (" + direct.detail + ")").c_str(),
              file.c_str());
  return 0;
}

void add_info_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("info", "Show the version, the SIMD instruction set in use, threads, and whether "
                                         "io_uring and O_DIRECT work on the model's filesystem");
  auto o = std::make_shared<InfoOpts>();
  cmd->add_option("--model", o->model, "Model directory whose filesystem is probed (default: the shipped model)");
  cmd->add_flag("--json", o->json, "Print JSON (keys version, isa, threads, io_uring, o_direct, ...)");
  cmd->callback([o, &action] { action = [o] { return run_info(*o); }; });
}

}  // namespace
SLUICE_COMMAND(95, add_info_command);

}  // namespace sluice::cli
