#include "experts/remote_experts.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "util/error.h"
#include "util/checked_number.h"
#include "util/xxh3.h"

namespace sluice {

namespace fs = std::filesystem;

RemoteExperts::RemoteExperts(const std::string& dir, const Checkpoint& ckpt, const ExpertIndex& index,
                             std::vector<std::vector<uint64_t>> manifest_checksums, RemoteOptions opts)
    : dir_(dir), ckpt_(ckpt), manifest_(std::move(manifest_checksums)), opts_(std::move(opts)),
      repo_(RemoteRepo::load(dir)), cache_(dir) {
  if (opts_.parallel < 1) opts_.parallel = 1;
  extents_.resize(size_t(index.layers()));
  for (int32_t l = 0; l < index.layers(); ++l)
    for (int32_t e = 0; e < index.experts(l); ++e) extents_[size_t(l)].push_back(index.extents(l, e));
  fds_.assign(ckpt.files().size(), -1);
  // Entries that do not describe this checkpoint's experts (a table from another model) are dropped.
  std::vector<std::pair<int32_t, int32_t>> stale;
  for (const auto& [k, c] : cache_.entries()) {
    const bool known = k.first >= 0 && k.first < int32_t(extents_.size()) && k.second >= 0 &&
                       k.second < int32_t(extents_[size_t(k.first)].size());
    uint64_t bytes = 0;
    if (known)
      for (const auto& x : extents_[size_t(k.first)][size_t(k.second)]) bytes += x.length;
    if (!known || bytes != c.bytes) stale.push_back(k);
  }
  for (auto k : stale) cache_.unmark(k.first, k.second);
  if (!stale.empty()) cache_.save();
}

RemoteExperts::~RemoteExperts() {
  try {
    cache_.save_if_dirty(/*include_use_times=*/true);
  } catch (const Error&) {
  }
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

std::string RemoteExperts::url_of(int32_t file) const {
  return repo_.file_url(fs::path(ckpt_.files()[size_t(file)]->path()).filename().string());
}

bool RemoteExperts::manifest_checksum(int32_t l, int32_t e, uint64_t* out) const {
  if (l < 0 || l >= int32_t(manifest_.size()) || e < 0 || e >= int32_t(manifest_[size_t(l)].size())) return false;
  *out = manifest_[size_t(l)][size_t(e)];
  return true;
}

bool RemoteExperts::present(int32_t layer, int32_t expert) const {
  std::lock_guard<std::mutex> g(mu_);
  return cache_.find(layer, expert) != nullptr;
}

bool RemoteExperts::checksum(int32_t layer, int32_t expert, uint64_t* out) const {
  std::lock_guard<std::mutex> g(mu_);
  if (manifest_checksum(layer, expert, out)) return true;
  if (const CachedExpert* c = cache_.find(layer, expert)) {
    *out = c->checksum;
    return true;
  }
  return false;
}

void RemoteExperts::invalidate(int32_t layer, int32_t expert) {
  std::lock_guard<std::mutex> g(mu_);
  cache_.unmark(layer, expert);
  cache_.save();
  ++stats_.refetched;
}

void RemoteExperts::ensure(const std::vector<std::pair<int32_t, int32_t>>& experts) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t batch_start = cache_.tick() + 1;
  std::vector<std::pair<int32_t, int32_t>> missing;
  std::set<std::pair<int32_t, int32_t>> seen;
  for (const auto& [l, e] : experts) {
    if (l < 0 || l >= int32_t(extents_.size()) || e < 0 || e >= int32_t(extents_[size_t(l)].size()))
      fail("no routed expert {} in layer {} of {}", e, l, dir_);
    if (cache_.find(l, e)) cache_.touch(l, e);
    else if (seen.insert({l, e}).second) missing.push_back({l, e});
  }
  if (missing.empty()) {
    prev_batch_tick_ = batch_start;
    return;
  }
  if (opts_.offline)
    fail("expert {} of layer {} is not in the local cache of {}, and SLUICE_OFFLINE forbids fetching it from {}",
         missing[0].second, missing[0].first, dir_, url_of(extents_[size_t(missing[0].first)][size_t(missing[0].second)][0].file));
  const auto t0 = std::chrono::steady_clock::now();

  struct Miss {
    int32_t layer, expert;
    std::vector<uint8_t> bytes;
    std::vector<uint64_t> at;  // offset of each extent in `bytes`
  };
  std::vector<Miss> miss;
  struct Job {
    size_t m, x;
  };
  std::vector<Job> jobs;
  for (const auto& [l, e] : missing) {
    Miss m{l, e, {}, {}};
    uint64_t n = 0;
    const auto& ex = extents_[size_t(l)][size_t(e)];
    for (size_t x = 0; x < ex.size(); ++x) {
      m.at.push_back(n);
      n += ex[x].length;
      jobs.push_back({miss.size(), x});
    }
    m.bytes.resize(size_t(n));
    miss.push_back(std::move(m));
  }
  const size_t workers = std::min<size_t>(size_t(opts_.parallel), jobs.size());
  while (clients_.size() < workers) clients_.push_back(std::make_unique<HttpClient>(opts_.http));
  std::vector<HttpStats> before;
  for (const auto& c : clients_) before.push_back(c->stats());

  // Fetch every extent (one range request each), verify each expert's checksum
  // where the repository published one; mismatching experts are fetched again.
  std::vector<size_t> todo(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) todo[i] = i;
  for (int round = 0; !todo.empty(); ++round) {
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    std::string first_error;
    std::mutex err_mu;
    auto work = [&](size_t w) {
      for (size_t i; !stop && (i = next++) < todo.size();) {
        const Job& j = jobs[todo[i]];
        Miss& m = miss[j.m];
        const ExpertExtent& x = extents_[size_t(m.layer)][size_t(m.expert)][j.x];
        uint64_t total = ckpt_.files()[size_t(x.file)]->file_size();
        try {
          clients_[w]->get_range(url_of(x.file), x.offset, x.length, m.bytes.data() + m.at[j.x], &total,
                                 fmt::format("expert {} of layer {}", m.expert, m.layer));
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> g2(err_mu);
          if (first_error.empty()) first_error = e.what();
          stop = true;
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < std::min(workers, todo.size()); ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();
    if (!first_error.empty()) fail("stream mode: {}", first_error);
    std::set<size_t> again;
    for (size_t i : todo) {
      Miss& m = miss[jobs[i].m];
      uint64_t want = 0;
      if (!manifest_checksum(m.layer, m.expert, &want)) continue;
      if (xxh3::hash64(m.bytes.data(), m.bytes.size()) != want) again.insert(jobs[i].m);
    }
    if (again.empty()) break;
    const Miss& bad = miss[*again.begin()];
    if (round >= 2)
      fail("stream mode: expert {} of layer {} fetched from {} does not match the checksum in the repository's {} "
           "({} attempts)", bad.expert, bad.layer, url_of(extents_[size_t(bad.layer)][size_t(bad.expert)][0].file),
           "sluice-manifest.json", round + 1);
    std::vector<size_t> redo;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (again.count(jobs[i].m)) redo.push_back(i);
    todo = std::move(redo);
  }

  // Write each expert at its own offsets, make it durable, then mark it present.
  std::set<int32_t> touched;
  for (const Miss& m : miss) {
    const auto& ex = extents_[size_t(m.layer)][size_t(m.expert)];
    for (size_t x = 0; x < ex.size(); ++x) {
      int& fd = fds_[size_t(ex[x].file)];
      const std::string& path = ckpt_.files()[size_t(ex[x].file)]->path();
      if (fd < 0) {
        fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
      }
      for (uint64_t o = 0; o < ex[x].length;) {
        const ssize_t w = ::pwrite(fd, m.bytes.data() + m.at[x] + o, size_t(ex[x].length - o), off_t(ex[x].offset + o));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
          fail("{}: cannot write expert {} of layer {} at bytes {}-{}: {}", path, m.expert, m.layer, ex[x].offset,
               ex[x].offset + ex[x].length - 1, std::strerror(errno));
        o += uint64_t(w);
      }
      touched.insert(ex[x].file);
    }
  }
  for (int32_t f : touched)
    if (::fdatasync(fds_[size_t(f)]) != 0)
      fail("{}: fsync failed: {}", ckpt_.files()[size_t(f)]->path(), std::strerror(errno));
  for (const Miss& m : miss) {
    cache_.mark(m.layer, m.expert, xxh3::hash64(m.bytes.data(), m.bytes.size()), m.bytes.size());
    ++stats_.experts_fetched;
    stats_.bytes_fetched += m.bytes.size();
  }
  for (size_t i = 0; i < clients_.size(); ++i) {
    const HttpStats& s = clients_[i]->stats();
    const HttpStats b = i < before.size() ? before[i] : HttpStats{};
    stats_.requests += s.requests - b.requests;
    stats_.retries += s.retries - b.retries;
  }
  evict_over_limit(prev_batch_tick_);
  cache_.save();
  prev_batch_tick_ = batch_start;
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void RemoteExperts::evict_over_limit(uint64_t protect_from_tick) {
  const uint64_t limit = opts_.cache_max_bytes ? opts_.cache_max_bytes : cache_.max_bytes();
  if (limit == 0 || cache_.bytes() <= limit) return;
  // Least recently used first; experts used by this or the previous batch may
  // still be being read, so they stay even if that leaves the cache over its bound.
  std::vector<std::pair<int32_t, int32_t>> victims;
  uint64_t bytes = cache_.bytes();
  for (const auto& k : cache_.lru_order()) {
    if (bytes <= limit) break;
    const CachedExpert* c = cache_.find(k.first, k.second);
    if (c->last_use >= protect_from_tick) continue;
    bytes -= c->bytes;
    victims.push_back(k);
  }
  if (victims.empty()) return;
  for (auto k : victims) cache_.unmark(k.first, k.second);
  cache_.save();  // unmarked before the bytes go: never marked present over a hole
  for (auto k : victims) punch_expert(ckpt_, extents_[size_t(k.first)][size_t(k.second)]);
  stats_.evicted += victims.size();
}

std::shared_ptr<RemoteExperts> make_remote_fetcher(const std::string& dir, const Checkpoint& ckpt,
                                                   const ExpertIndex& index,
                                                   std::vector<std::vector<uint64_t>> manifest_checksums) {
  if (!is_stream_dir(dir)) return nullptr;
  RemoteOptions o;
  if (const char* v = std::getenv("SLUICE_OFFLINE"); v && *v && std::string(v) != "0") o.offline = true;
  if (const char* v = std::getenv("SLUICE_CACHE_MAX_GB"); v && *v) {
    char* end = nullptr;
    const double gb = std::strtod(v, &end);
    if (end == v || *end || !(gb >= 0)) fail("SLUICE_CACHE_MAX_GB='{}' is not a number of GB", v);
    o.cache_max_bytes = checked_bytes(gb, 1e9, "SLUICE_CACHE_MAX_GB");
  }
  if (const char* v = std::getenv("SLUICE_FETCH_PARALLEL"); v && *v) {
    char* end = nullptr;
    const double n = std::strtod(v, &end);
    if (end == v || *end) fail("SLUICE_FETCH_PARALLEL='{}' is not a number", v);
    o.parallel = std::max(1, checked_integer<int>(n, "SLUICE_FETCH_PARALLEL"));
  }
  return std::make_shared<RemoteExperts>(dir, ckpt, index, std::move(manifest_checksums), o);
}

}  // namespace sluice
