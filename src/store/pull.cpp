#include "store/pull.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/expert_index.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "io/http_client.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/xxh3.h"

namespace sluice {

namespace fs = std::filesystem;

RemoteRepo parse_pull_source(const std::string& source, const std::string& base, const std::string& revision) {
  RemoteRepo r;
  r.revision = revision.empty() ? "main" : revision;
  if (source.rfind("http://", 0) == 0 || source.rfind("https://", 0) == 0) {
    const size_t host_end = source.find('/', source.find("//") + 2);
    if (host_end == std::string::npos || host_end + 1 >= source.size())
      fail("'{}' names no repository (expected https://host/org/name)", source);
    r.base = source.substr(0, host_end);
    r.repo = source.substr(host_end + 1);
  } else {
    r.repo = source;
    if (!base.empty()) r.base = base;
    else if (const char* b = std::getenv("SLUICE_HF_BASE"); b && *b) r.base = b;
    else r.base = "https://huggingface.co";
  }
  while (!r.repo.empty() && r.repo.back() == '/') r.repo.pop_back();
  while (!r.base.empty() && r.base.back() == '/') r.base.pop_back();
  if (r.repo.empty() || r.repo.find("..") != std::string::npos) fail("'{}' is not a repository name", source);
  return r;
}

namespace {

constexpr const char* kStaging = ".sluice-pull";

// Sorted, merged half-open byte intervals.
struct Intervals {
  std::vector<std::pair<uint64_t, uint64_t>> v;
  void add(uint64_t a, uint64_t b) {
    if (a >= b) return;
    v.push_back({a, b});
    std::sort(v.begin(), v.end());
    std::vector<std::pair<uint64_t, uint64_t>> m;
    for (auto iv : v) {
      if (!m.empty() && iv.first <= m.back().second) m.back().second = std::max(m.back().second, iv.second);
      else m.push_back(iv);
    }
    v = std::move(m);
  }
  // Parts of [a, b) not covered.
  std::vector<std::pair<uint64_t, uint64_t>> missing(uint64_t a, uint64_t b) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    uint64_t at = a;
    for (auto [x, y] : v) {
      if (y <= at) continue;
      if (x >= b) break;
      if (x > at) out.push_back({at, std::min(x, b)});
      at = std::max(at, y);
      if (at >= b) break;
    }
    if (at < b) out.push_back({at, b});
    return out;
  }
  uint64_t total() const {
    uint64_t n = 0;
    for (auto [a, b] : v) n += b - a;
    return n;
  }
};

struct Shard {
  std::string name, part, state;  // part/state: paths in the staging directory
  uint64_t size = 0;
  int fd = -1, state_fd = -1;
  Intervals done;
  std::map<std::string, TensorInfo> tensors;
  uint64_t data_start = 0;
};

uint64_t load_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

class Puller {
 public:
  explicit Puller(const PullOptions& o) : o_(o), repo_(parse_pull_source(o.source, o.base, o.revision)) {
    dir_ = o.dir;
    staging_ = (fs::path(dir_) / kStaging).string();
    http_ = http_options_from_env();
  }
  ~Puller() {
    for (auto& s : shards_) {
      if (s.fd >= 0) ::close(s.fd);
      if (s.state_fd >= 0) ::close(s.state_fd);
    }
  }
  PullResult run();

 private:
  HttpClient& client(size_t i) {
    while (clients_.size() <= i) clients_.push_back(std::make_unique<HttpClient>(http_));
    return *clients_[i];
  }
  std::optional<std::string> small_file(const std::string& name, bool required);
  void open_shard(Shard& s);
  void record(Shard& s, uint64_t a, uint64_t b);
  // Fetches every byte of the given (shard, begin, end) ranges not fetched yet.
  void fetch(const std::vector<std::tuple<size_t, uint64_t, uint64_t>>& ranges, const std::string& label);
  void finalize();
  void verify_full();

  PullOptions o_;
  RemoteRepo repo_;
  std::string dir_, staging_;
  HttpOptions http_;
  std::vector<std::unique_ptr<HttpClient>> clients_;
  std::vector<Shard> shards_;
  std::mutex mu_;
  PullResult res_;
  std::string index_json_;  // empty: single model.safetensors
  std::string manifest_json_;
};

std::optional<std::string> Puller::small_file(const std::string& name, bool required) {
  auto body = client(0).get_file(repo_.file_url(name), name);
  if (!body && required) fail("{}: not found (HTTP 404) at {}", name, repo_.file_url(name));
  if (body) {
    res_.downloaded += body->size();
    ++res_.files;
  }
  return body;
}

void Puller::record(Shard& s, uint64_t a, uint64_t b) {
  // Caller holds mu_. The data is already fsynced; now the state line.
  const std::string line = fmt::format("{} {}\n", a, b - a);
  if (::write(s.state_fd, line.data(), line.size()) != ssize_t(line.size()) || ::fdatasync(s.state_fd) != 0)
    fail("{}: cannot record progress: {}", s.state, std::strerror(errno));
  s.done.add(a, b);
}

void Puller::open_shard(Shard& s) {
  s.part = (fs::path(staging_) / s.name).string();
  s.state = s.part + ".state";
  const std::string final_path = (fs::path(dir_) / s.name).string();
  const std::string mode = o_.stream ? "stream" : "full";
  // A shard finalized by an interrupted run whose other shards were not: take it back.
  if (fs::exists(final_path) && fs::exists(s.state) && !fs::exists(s.part)) fs::rename(final_path, s.part);
  // Resume from the state file when it matches.
  bool resumed = false;
  if (fs::exists(s.part) && fs::exists(s.state)) {
    std::ifstream in(s.state);
    std::string head;
    std::getline(in, head);
    unsigned long long size = 0;
    char m[16] = {0};
    if (std::sscanf(head.c_str(), "sluice-pull 1 %llu %15s", &size, m) == 2 && m == mode &&
        fs::file_size(s.part) == size) {
      s.size = size;
      std::string line;
      while (std::getline(in, line)) {
        unsigned long long a = 0, n = 0;
        if (std::sscanf(line.c_str(), "%llu %llu", &a, &n) == 2 && a + n <= size) s.done.add(a, a + n);
      }
      resumed = true;
    }
  }
  if (!resumed) {
    uint8_t first[8];
    uint64_t total = 0;
    client(0).get_range(repo_.file_url(s.name), 0, 8, first, &total, s.name + " header length");
    res_.downloaded += 8;
    s.size = total;
    const int fd = ::open(s.part.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("{}: cannot create: {}", s.part, std::strerror(errno));
    if (::ftruncate(fd, off_t(total)) != 0 || ::pwrite(fd, first, 8, 0) != 8 || ::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot create a {}-byte file: {}", s.part, total, std::strerror(e));
    }
    ::close(fd);
    write_file_atomic(s.state, fmt::format("sluice-pull 1 {} {}\n", total, mode));
    s.done = Intervals{};
  } else {
    res_.resumed += s.done.total();
  }
  s.fd = ::open(s.part.c_str(), O_RDWR | O_CLOEXEC);
  if (s.fd < 0) fail("{}: cannot open: {}", s.part, std::strerror(errno));
  s.state_fd = ::open(s.state.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (s.state_fd < 0) fail("{}: cannot open: {}", s.state, std::strerror(errno));
  if (!resumed) {
    std::lock_guard<std::mutex> g(mu_);
    record(s, 0, 8);
  }
}

void Puller::fetch(const std::vector<std::tuple<size_t, uint64_t, uint64_t>>& ranges, const std::string& label) {
  struct Job {
    size_t shard;
    uint64_t a, b;
  };
  std::vector<Job> jobs;
  uint64_t total = 0;
  // Adjacent ranges are merged, then cut into chunks of at most chunk_bytes.
  std::vector<Intervals> want(shards_.size());
  for (auto [s, a, b] : ranges) want[s].add(a, b);
  for (size_t s = 0; s < shards_.size(); ++s)
    for (auto [a, b] : want[s].v)
      for (auto [x, y] : shards_[s].done.missing(a, b))
        for (uint64_t c = x; c < y; c += o_.chunk_bytes) {
          jobs.push_back({s, c, std::min(y, c + o_.chunk_bytes)});
          total += jobs.back().b - c;
        }
  if (jobs.empty()) return;
  Progress progress(label, total, o_.progress);
  const size_t workers = std::min<size_t>(size_t(std::max(1, o_.parallel)), jobs.size());
  for (size_t w = 0; w < workers; ++w) client(w);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  uint64_t fetched = 0;
  auto work = [&](size_t w) {
    std::vector<uint8_t> buf;
    for (size_t i; !stop && (i = next++) < jobs.size();) {
      const Job& j = jobs[i];
      Shard& s = shards_[j.shard];
      try {
        buf.resize(size_t(j.b - j.a));
        uint64_t size = s.size;
        clients_[w]->get_range(repo_.file_url(s.name), j.a, j.b - j.a, buf.data(), &size, s.name);
        for (uint64_t o = 0; o < buf.size();) {
          const ssize_t n = ::pwrite(s.fd, buf.data() + o, buf.size() - o, off_t(j.a + o));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) fail("{}: cannot write bytes {}-{}: {}", s.part, j.a, j.b - 1, std::strerror(errno));
          o += uint64_t(n);
        }
        if (::fdatasync(s.fd) != 0) fail("{}: fsync failed: {}", s.part, std::strerror(errno));
        std::lock_guard<std::mutex> g(mu_);
        record(s, j.a, j.b);
        fetched += j.b - j.a;
        res_.downloaded += j.b - j.a;
        progress.update(fetched);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(mu_);
        if (first_error.empty()) first_error = e.what();
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (auto& t : threads) t.join();
  if (!first_error.empty()) fail("{}", first_error);
  progress.finish();
}

void Puller::finalize() {
  for (auto& s : shards_) {
    struct stat st;
    if (::fstat(s.fd, &st) != 0 || uint64_t(st.st_size) != s.size)
      fail("{}: size is {} bytes, the repository's is {}", s.part, uint64_t(st.st_size), s.size);
    if (::fsync(s.fd) != 0) fail("{}: fsync failed: {}", s.part, std::strerror(errno));
    res_.local_bytes += s.done.total();
    res_.shard_bytes += s.size;
  }
  if (!o_.stream && res_.local_bytes != res_.shard_bytes)
    fail("internal: full pull ends with {} of {} shard bytes", res_.local_bytes, res_.shard_bytes);
  for (auto& s : shards_) fs::rename(s.part, fs::path(dir_) / s.name);
  fsync_dir(dir_);
  if (!index_json_.empty()) write_file_atomic((fs::path(dir_) / "model.safetensors.index.json").string(), index_json_);
  std::error_code ec;
  if (o_.stream) {
    ExpertDiskCache cache(dir_);
    for (const auto& [k, _] : std::map(cache.entries())) cache.unmark(k.first, k.second);  // fresh shards: nothing cached
    cache.set_max_bytes(o_.cache_max_bytes);
    cache.save();
    repo_.save(dir_);  // last: the directory is now a stream-mode model
  } else {
    fs::remove(fs::path(dir_) / kRemoteFile, ec);
    fs::remove(fs::path(dir_) / kExpertCacheFile, ec);
  }
  for (auto& s : shards_) {
    ::close(s.fd);
    ::close(s.state_fd);
    s.fd = s.state_fd = -1;
    fs::remove(s.state, ec);
  }
  fs::remove_all(staging_, ec);
  fsync_dir(dir_);
}

void Puller::verify_full() {
  if (manifest_json_.empty()) return;
  Manifest m = Manifest::load((fs::path(dir_) / kManifestFile).string());
  const Checkpoint ck(dir_, false);
  const ExpertIndex index(Config::load(dir_), ck);
  auto sums = m.checksum_table();
  Progress progress("pull: verify experts", 0, false);
  for (int32_t l = 0; l < index.layers(); ++l)
    for (int32_t e = 0; e < index.experts(l); ++e) {
      if (l >= int32_t(sums.size()) || e >= int32_t(sums[size_t(l)].size())) continue;
      xxh3::State st;
      for (const auto& x : index.extents(l, e)) st.update(ck.files()[size_t(x.file)]->map_base() + x.offset, x.length);
      const uint64_t h = st.digest64();
      if (h != sums[size_t(l)][size_t(e)])
        fail("{}: expert {} of layer {} does not match the checksum in the repository's {}", dir_, e, l, kManifestFile);
      ++res_.experts_verified;
    }
}

PullResult Puller::run() {
  std::error_code ec;
  if (fs::exists(dir_, ec) && !fs::is_directory(dir_, ec))
    fail("--dir {}: is a file; give the directory to download the model into (created when missing)", dir_);
  fs::create_directories(dir_, ec);
  if (ec) fail("--dir {}: cannot create the directory: {}", dir_, ec.message());
  if (!o_.stream && is_stream_dir(dir_))
    fail("{} holds a stream-mode pull (sparse shards); pull --full into another directory", dir_);
  if (o_.stream && is_stream_dir(dir_)) {
    const RemoteRepo old = RemoteRepo::load(dir_);
    if (old.repo != repo_.repo || old.revision != repo_.revision)
      fail("{} holds a stream-mode pull of {} at revision {}; pull {} at {} into another directory", dir_, old.repo,
           old.revision, repo_.repo, repo_.revision);
    if (old.base != repo_.base) repo_.save(dir_);  // the same repository from another host: fetch from there now
  }
  fs::create_directories(staging_);

  // Small files: config (required), tokenizer and generation files (optional), index, manifest.
  const std::string cfg = (fs::path(dir_) / "config.json").string();
  std::string cfg_text;
  if (fs::exists(cfg)) {
    std::ifstream in(cfg);
    std::stringstream ss;
    ss << in.rdbuf();
    cfg_text = ss.str();
  } else {
    // The first request: where a wrong name, a gated repository or no network shows.
    try {
      cfg_text = *small_file("config.json", true);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.find("HTTP 404") != std::string::npos)
        fail("{}: is '{}' a repository at revision {}? (a private or gated one also needs $HF_TOKEN)", what,
             repo_.repo, repo_.revision);
      if (what.find("HTTP 40") == std::string::npos)  // not an answer from the host: the network
        fail("{}: check the network connection, or point --base (or $SLUICE_HF_BASE) at a reachable mirror", what);
      throw;
    }
    write_file_atomic(cfg, cfg_text);
  }
  write_file_atomic((fs::path(staging_) / "config.json").string(), cfg_text);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "tiktoken.model", "chat_template.jinja",
                        "generation_config.json", "special_tokens_map.json"}) {
    if (fs::exists(fs::path(dir_) / f)) continue;
    if (auto body = small_file(f, false)) write_file_atomic((fs::path(dir_) / f).string(), *body);
  }
  if (auto body = small_file(kManifestFile, false)) {
    manifest_json_ = *body;
    write_file_atomic((fs::path(dir_) / kManifestFile).string(), manifest_json_);
  }
  std::vector<std::string> names;
  if (auto idx = small_file("model.safetensors.index.json", false)) {
    index_json_ = *idx;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(index_json_);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: model.safetensors.index.json is not valid JSON: {}", repo_.file_url("model.safetensors.index.json"), e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing object field 'weight_map'", repo_.file_url("model.safetensors.index.json"));
    std::set<std::string> uniq;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("index: weight_map entry '{}' must be a file name", it.key());
      const std::string n = it.value().get<std::string>();
      if (n.empty() || n.find('/') != std::string::npos || n.find("..") != std::string::npos || n[0] == '.')
        fail("index: weight_map entry '{}' names '{}', which is not a plain file name", it.key(), n);
      uniq.insert(n);
    }
    names.assign(uniq.begin(), uniq.end());
    write_file_atomic((fs::path(staging_) / "model.safetensors.index.json").string(), index_json_);
  } else {
    names = {"model.safetensors"};
  }

  // Already complete (an earlier pull of the same kind finished): nothing to fetch.
  {
    bool complete = o_.stream == is_stream_dir(dir_);
    for (const auto& n : names)
      complete = complete && fs::exists(fs::path(dir_) / n) && !fs::exists(fs::path(staging_) / (n + ".state"));
    if (complete) {
      for (const auto& n : names) {
        res_.shard_bytes += fs::file_size(fs::path(dir_) / n);
        res_.resumed += fs::file_size(fs::path(dir_) / n);
        struct stat st;
        if (::stat((fs::path(dir_) / n).c_str(), &st) == 0)
          res_.local_bytes += o_.stream ? std::min<uint64_t>(uint64_t(st.st_blocks) * 512, uint64_t(st.st_size))
                                        : uint64_t(st.st_size);
      }
      res_.shards = int(names.size());
      if (o_.stream) {
        ExpertDiskCache cache(dir_);
        if (o_.cache_max_bytes && cache.max_bytes() != o_.cache_max_bytes) {
          cache.set_max_bytes(o_.cache_max_bytes);
          cache.save();
        }
      }
      std::error_code ec;
      fs::remove_all(staging_, ec);
      return res_;
    }
  }

  // Shards: created (sparse, full size) or resumed; then headers.
  shards_.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    shards_[i].name = names[i];
    open_shard(shards_[i]);
  }
  res_.shards = int(shards_.size());
  {
    std::vector<std::tuple<size_t, uint64_t, uint64_t>> hdr;
    for (size_t i = 0; i < shards_.size(); ++i) {
      uint8_t b[8];
      if (::pread(shards_[i].fd, b, 8, 0) != 8) fail("{}: cannot read the header length", shards_[i].part);
      const uint64_t n = load_u64le(b);
      if (n > (100ull << 20) || 8 + n > shards_[i].size)
        fail("{}: header length {} is not plausible for a {}-byte file", repo_.file_url(shards_[i].name), n, shards_[i].size);
      hdr.push_back({i, 8, 8 + n});
    }
    fetch(hdr, "pull: headers");
    for (size_t i = 0; i < shards_.size(); ++i) {
      Shard& s = shards_[i];
      const uint64_t n = std::get<2>(hdr[i]);
      std::vector<uint8_t> bytes(static_cast<size_t>(n));
      if (::pread(s.fd, bytes.data(), bytes.size(), 0) != ssize_t(bytes.size())) fail("{}: cannot read the header", s.part);
      s.tensors = SafetensorsFile::parse_header(bytes.data(), s.size, repo_.file_url(s.name), &s.data_start, nullptr);
    }
  }

  if (!o_.stream) {
    std::vector<std::tuple<size_t, uint64_t, uint64_t>> all;
    for (size_t i = 0; i < shards_.size(); ++i) all.push_back({i, 0, shards_[i].size});
    fetch(all, "pull: shards");
    finalize();
    verify_full();
    return res_;
  }

  // Stream mode. Step 2: tensors that are certainly not routed-expert weights, and small ones.
  std::vector<std::tuple<size_t, uint64_t, uint64_t>> first;
  for (size_t i = 0; i < shards_.size(); ++i)
    for (const auto& [name, t] : shards_[i].tensors)
      if (name.find(".experts.") == std::string::npos || t.end - t.begin <= 256)
        first.push_back({i, shards_[i].data_start + t.begin, shards_[i].data_start + t.end});
  fetch(first, "pull: spine (1/2)");
  // Step 3: the expert index (the builders' naming rules over the headers) tells
  // which bytes are routed experts and which tensors are the spine.
  std::vector<std::tuple<size_t, uint64_t, uint64_t>> second;
  {
    const Checkpoint ck(staging_, /*use_prepared_spine=*/false);
    const ExpertIndex index(Config::load(staging_), ck);
    std::vector<size_t> shard_of(ck.files().size());
    for (size_t f = 0; f < ck.files().size(); ++f) {
      const std::string n = fs::path(ck.files()[f]->path()).filename().string();
      shard_of[f] = size_t(std::find_if(shards_.begin(), shards_.end(), [&](auto& s) { return s.name == n; }) - shards_.begin());
    }
    std::vector<Intervals> experts(shards_.size());
    for (int32_t l = 0; l < index.layers(); ++l)
      for (int32_t e = 0; e < index.experts(l); ++e)
        for (const auto& x : index.extents(l, e)) experts[shard_of[size_t(x.file)]].add(x.offset, x.offset + x.length);
    // Step 4: every spine tensor outside the experts' extents.
    for (const auto& name : index.spine()) {
      TensorView t = ck.get(name);
      const size_t s = shard_of[size_t(ck.file_index(name))];
      for (auto [a, b] : experts[s].missing(t.file_offset, t.file_offset + t.nbytes())) second.push_back({s, a, b});
    }
  }
  fetch(second, "pull: spine (2/2)");
  finalize();
  return res_;
}

}  // namespace

PullResult pull(const PullOptions& opts) {
  if (opts.dir.empty()) fail("pull: --dir is required");
  // Offline means no network at all: fail before resolving any host.
  if (const char* v = std::getenv("SLUICE_OFFLINE"); v && *v && std::string(v) != "0")
    fail("pull {}: SLUICE_OFFLINE={} forbids the network (unset it to download)", opts.source, v);
  if (opts.chunk_bytes == 0) fail("pull: chunk size must be positive");
  Puller p(opts);
  return p.run();
}

}  // namespace sluice
