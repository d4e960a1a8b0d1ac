#include "io/spine_streamer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "util/error.h"

namespace sluice {

namespace {
uint64_t page_down(uint64_t v) { return v & ~(kDirectAlign - 1); }
uint64_t page_up(uint64_t v) { return (v + kDirectAlign - 1) & ~(kDirectAlign - 1); }
}  // namespace

// A layer streams only the pages its spine bytes fill completely. A page it
// shares with anything else (another layer's tensors, the embedding table, a
// routed expert) is read once with the resident part and never dropped: a read
// or a drop of it would land under another layer's compute (harmless while
// every read writes the file's bytes, but a read's buffer is the reader's to
// scribble on until it completes).
std::vector<std::vector<SpineStreamer::Range>> SpineStreamer::ranges_of(const SpineLayout& layout, int64_t n,
                                                                        const std::vector<ExpertExtent>& on_demand) {
  // Page ranges per layer, index n: the resident part (everything outside layers, and shared pages).
  std::vector<std::vector<Range>> ranges(size_t(n) + 1);
  const auto add = [&](int64_t l, int32_t file, uint64_t a, uint64_t b) {
    if (a < b) ranges[size_t(l)].push_back({file, a, b - a});
  };
  for (int64_t l = 0; l <= n; ++l) {
    for (const auto& whole : layout.layer_extents(l == n ? -1 : l)) {
      // Subtract the on-demand ranges.
      std::vector<ExpertExtent> parts{whole};
      for (const auto& d : on_demand) {
        std::vector<ExpertExtent> next;
        for (const auto& p : parts) {
          if (p.file != d.file || p.offset + p.length <= d.offset || d.offset + d.length <= p.offset) {
            next.push_back(p);
            continue;
          }
          if (p.offset < d.offset) next.push_back({p.file, p.offset, d.offset - p.offset});
          if (d.offset + d.length < p.offset + p.length)
            next.push_back({p.file, d.offset + d.length, p.offset + p.length - d.offset - d.length});
        }
        parts = std::move(next);
      }
      for (const auto& e : parts) {
        const uint64_t a = page_down(e.offset), b = page_up(e.offset + e.length);
        const uint64_t ia = page_up(e.offset), ib = page_down(e.offset + e.length);  // pages e fills
        if (l == n || ia >= ib) {
          add(n, e.file, a, b);
          continue;
        }
        add(n, e.file, a, ia);
        add(l, e.file, ia, ib);
        add(n, e.file, ib, b);
      }
    }
  }
  for (auto& v : ranges) v = merge_extents(std::move(v));
  return ranges;
}

uint64_t SpineStreamer::min_budget(const SpineLayout& layout, int64_t n, const std::vector<ExpertExtent>& on_demand) {
  const auto ranges = ranges_of(layout, n, on_demand);
  uint64_t outside = 0, biggest = 0;
  for (const auto& r : ranges[size_t(n)]) outside += r.length;
  for (int64_t l = 0; l < n; ++l) {
    uint64_t b = 0;
    for (const auto& r : ranges[size_t(l)]) b += r.length;
    biggest = std::max(biggest, b);
  }
  return outside + biggest;
}

SpineStreamer::SpineStreamer(const Checkpoint& ckpt, const SpineLayout& layout, int64_t n_layers, uint64_t budget,
                             const std::vector<ExpertExtent>& on_demand, int64_t window, uint32_t chunk, int depth)
    : ckpt_(ckpt), n_(n_layers), window_(std::max<int64_t>(0, window)), chunk_(chunk) {
  ranges_ = ranges_of(layout, n_, on_demand);
  streamed_.assign(size_t(n_), false);
  anonymous_.assign(size_t(n_) + 1, false);
  pending_.assign(size_t(n_), -1);
  // Bytes each layer takes in memory: its pages.
  std::vector<uint64_t> bytes(size_t(n_) + 1, 0);
  for (int64_t l = 0; l <= n_; ++l)
    for (const auto& r : ranges_[size_t(l)]) bytes[size_t(l)] += r.length;
  uint64_t biggest = 0;
  for (int64_t l = 0; l < n_; ++l) biggest = std::max(biggest, bytes[size_t(l)]);
  for (uint64_t b : bytes) stats_.held_bytes += b;
  // Everything outside layers (head, final norms) stays resident.
  uint64_t used = bytes[size_t(n_)];
  if (used + biggest > budget)
    fail("spine streaming: {} bytes outside the layers plus the largest layer ({} bytes) exceed the spine budget of {} bytes",
         used, biggest, budget);
  // Read ahead as many layers as fit next to the current one.
  while (window_ > 0 && used + uint64_t(window_ + 1) * biggest > budget) --window_;
  stats_.window = window_;
  // Which layers stay resident: the largest first (each one kept saves its
  // bytes on every token, and the room for streamed layers is sized by the
  // largest streamed one), as many as fit next to that room. Everything
  // resident when it all fits: no room is needed then.
  std::vector<int64_t> by_size(static_cast<size_t>(n_));
  for (int64_t l = 0; l < n_; ++l) by_size[size_t(l)] = l;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int64_t a, int64_t b) { return bytes[size_t(a)] > bytes[size_t(b)]; });
  int64_t keep = 0;  // layers by_size[0, keep) resident
  uint64_t kept = 0;
  uint64_t prefix = 0;
  for (int64_t k = 0; k <= n_; ++k) {
    const uint64_t streamed_max = k < n_ ? bytes[size_t(by_size[size_t(k)])] : 0;
    const uint64_t room = uint64_t(std::min<int64_t>(window_ + 1, n_ - k)) * streamed_max;
    if (used + prefix + room <= budget) {
      keep = k;
      kept = prefix;
    }
    if (k < n_) prefix += bytes[size_t(by_size[size_t(k)])];
  }
  for (int64_t k = 0; k < n_; ++k) streamed_[size_t(by_size[size_t(k)])] = k >= keep;
  stats_.resident_layers = keep;
  stats_.streamed_layers = n_ - keep;
  used += kept;
  stats_.resident_bytes = used;
  for (const auto& f : ckpt.files()) {
    bool d = false;
    fds_.push_back(open_for_reads(f->path(), true, &d));
  }
  queue_ = ReadQueue::create(ReadQueue::Kind::Auto, depth);
  // The resident part is read once into private pages: anonymous memory (see
  // make_anonymous) that a cgroup's reclaim cannot drop and re-read, unlike page cache.
  pending_.push_back(-1);
  issue(n_);
  for (int64_t l = 0; l < n_; ++l)
    if (!streamed_[size_t(l)]) issue(l);
  for (int64_t l = 0; l <= n_; ++l)
    while (pending_[size_t(l)] > 0) drain(true);
}

SpineStreamer::~SpineStreamer() {
  std::vector<ReadCompletion> sink;
  while (queue_ && queue_->in_flight() > 0) queue_->reap(sink, true);
  for (int fd : fds_) ::close(fd);
}

int64_t SpineStreamer::next_streamed(int64_t after) const {
  for (int64_t k = 1; k <= n_; ++k) {
    const int64_t l = (after + k) % n_;
    if (streamed_[size_t(l)]) return l;
  }
  return -1;
}

// The checkpoint is mapped private and file-backed (format/safetensors.cpp). A direct read's first
// write into an untouched page of such a mapping is a copy-on-write fault: the kernel reads the page
// through the page cache and copies it, and the read then writes the same bytes again (the spine
// read twice, once buffered; a streamed layer again on every pass, since MADV_DONTNEED gives the
// file's page back). The pages of a layer's ranges become anonymous before its first reads
// (MAP_FIXED over them, at the same addresses): a first write is then a zero fill. Only whole
// system pages are replaced; a range's ends off the system page size keep the copy-on-write.
void SpineStreamer::make_anonymous(int64_t l) {
  if (anonymous_[size_t(l)]) return;
  anonymous_[size_t(l)] = true;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  for (const auto& r : ranges_[size_t(l)]) {
    uint8_t* base = const_cast<uint8_t*>(ckpt_.files()[size_t(r.file)]->map_base());
    const uint64_t a = (r.offset + page - 1) / page * page, b = (r.offset + r.length) / page * page;
    if (a >= b) continue;
    if (mmap(base + a, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
             0) == MAP_FAILED)
      fail("spine: cannot map {} bytes of anonymous memory at offset {} of {}: {}", b - a, a,
           ckpt_.files()[size_t(r.file)]->path(), std::strerror(errno));
  }
}

void SpineStreamer::issue(int64_t l) {
  if (l < 0 || pending_[size_t(l)] >= 0) return;
  make_anonymous(l);
  int32_t n = 0;
  for (const auto& r : ranges_[size_t(l)]) {
    uint8_t* base = const_cast<uint8_t*>(ckpt_.files()[size_t(r.file)]->map_base());
    for (uint64_t o = r.offset; o < r.offset + r.length; o += chunk_) {
      const uint32_t len = uint32_t(std::min<uint64_t>(chunk_, r.offset + r.length - o));
      queue_->submit({fds_[size_t(r.file)], o, len, base + o, uint64_t(l)});
      ++n;
      stats_.bytes_read += len;
    }
  }
  pending_[size_t(l)] = n;
  queue_->flush();
}

void SpineStreamer::drain(bool block) {
  std::vector<ReadCompletion> done;
  queue_->reap(done, block);
  for (const auto& c : done) {
    if (c.result < 0) {
      if (int64_t(c.tag) == n_)
        fail("spine read of the resident part (outside the layers, and pages layers share) failed: {}",
             std::strerror(int(-c.result)));
      fail("spine read of layer {} failed: {}", c.tag, std::strerror(int(-c.result)));
    }
    --pending_[size_t(c.tag)];
  }
}

void SpineStreamer::before_layer(int64_t l) {
  if (stats_.streamed_layers == 0) return;
  if (streamed_[size_t(l)]) {
    issue(l);
    const auto t0 = std::chrono::steady_clock::now();
    bool waited = false;
    while (pending_[size_t(l)] > 0) {
      drain(true);
      waited = true;
    }
    if (waited) stats_.stall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Read ahead the next streamed layers (wrapping to the next token).
  int64_t at = l;
  for (int64_t k = 0; k < window_; ++k) {
    at = next_streamed(at);
    if (at < 0 || at == l) break;
    issue(at);
  }
}

void SpineStreamer::after_layer(int64_t l) {
  if (!streamed_[size_t(l)]) return;
  drain(false);
  if (pending_[size_t(l)] > 0) return;  // cannot happen after before_layer; keep the pages
  for (const auto& r : ranges_[size_t(l)]) {
    uint8_t* base = const_cast<uint8_t*>(ckpt_.files()[size_t(r.file)]->map_base());
    madvise(base + r.offset, r.length, MADV_DONTNEED);
  }
  pending_[size_t(l)] = -1;
}

}  // namespace sluice
