#include "experts/streaming_experts.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/error.h"
#include "util/trace.h"
#include "util/xxh3.h"

namespace sluice {

namespace {
uint64_t align_down(uint64_t v) { return v & ~(kDirectAlign - 1); }
uint64_t align_up(uint64_t v) { return (v + kDirectAlign - 1) & ~(kDirectAlign - 1); }

// (file index, offset) of a pointer into one of the checkpoint's mapped files.
std::pair<int32_t, uint64_t> locate(const Checkpoint& ckpt, const uint8_t* p) {
  const auto& files = ckpt.files();
  for (size_t i = 0; i < files.size(); ++i) {
    const uint8_t* b = files[i]->map_base();
    if (b && p >= b && p < b + files[i]->file_size()) return {int32_t(i), uint64_t(p - b)};
  }
  fail("internal: expert weight pointer is not inside any checkpoint file of {}", ckpt.dir());
}
}  // namespace

std::vector<ExpertExtent> expert_extents(const Checkpoint& ckpt, const ExpertWeights& w) {
  std::vector<ExpertExtent> ex;
  for (auto r : expert_byte_ranges(w)) {
    auto [f, off] = locate(ckpt, r.ptr);
    ex.push_back({f, off, r.len});
  }
  return merge_extents(std::move(ex));
}

StreamingExperts::Plan StreamingExperts::read_plan(const Checkpoint& ckpt, const ExpertWeights& w,
                                                   uint64_t chunk_bytes) {
  Plan p;
  auto extents = expert_extents(ckpt, w);
  struct Span { int32_t file; uint64_t a, b; };
  std::vector<Span> spans;
  for (const auto& x : extents) {
    Span s{x.file, align_down(x.offset), align_up(x.offset + x.length)};
    if (!spans.empty() && spans.back().file == s.file && s.a <= spans.back().b) spans.back().b = std::max(spans.back().b, s.b);
    else spans.push_back(s);
  }
  uint64_t at = 0;
  std::vector<uint64_t> span_slot;
  for (const auto& s : spans) {
    span_slot.push_back(at);
    for (uint64_t o = s.a; o < s.b; o += chunk_bytes)
      p.reads.push_back({s.file, o, std::min<uint64_t>(chunk_bytes, s.b - o), at + (o - s.a)});
    at += s.b - s.a;
  }
  p.read_bytes = at;
  auto slot_offset = [&](int32_t file, uint64_t off) {
    for (size_t k = 0; k < spans.size(); ++k)
      if (spans[k].file == file && off >= spans[k].a && off < spans[k].b) return span_slot[k] + (off - spans[k].a);
    fail("internal: expert byte outside its read plan");
  };
  for (const auto& x : extents) {
    p.payload.push_back({slot_offset(x.file, x.offset), x.length});
    p.bytes += x.length;
    // Hashing while reads land walks the payload in slot order.
    if (p.payload.size() > 1 && p.payload.back().first < p.payload[p.payload.size() - 2].first + p.payload[p.payload.size() - 2].second)
      fail("internal: expert payload out of slot order in the read plan");
  }
  for (auto r : expert_byte_ranges(w)) {
    auto [f, off] = locate(ckpt, r.ptr);
    p.rebase.push_back({r.ptr, slot_offset(f, off)});
  }
  return p;
}

void StreamingExperts::open_drives(const Checkpoint& ckpt) {
  // One read queue per directory: packs spread over drives (prepare --expert-dirs)
  // are read concurrently, each drive's queue kept full by itself.
  for (const auto& f : ckpt.files()) {
    bool d = false;
    fds_.push_back(open_for_reads(f->path(), opts_.direct, &d));
    direct_ = direct_ && d;
    const std::string dir = std::filesystem::path(f->path()).parent_path().string();
    auto it = std::find_if(drives_.begin(), drives_.end(), [&](const Drive& x) { return x.stats.dir == dir; });
    if (it == drives_.end()) {
      drives_.emplace_back();
      drives_.back().stats.dir = dir;
      drives_.back().queue = ReadQueue::create(opts_.queue, opts_.queue_depth);
      it = drives_.end() - 1;
    }
    drive_of_file_.push_back(int32_t(it - drives_.begin()));
  }
}

StreamingExperts::StreamingExperts(const ExpertTable& table, const Checkpoint& ckpt, StreamingOptions opts)
    : table_(table), ckpt_(ckpt), opts_(std::move(opts)), slot_table_(0, parse_eviction_policy(opts_.policy)) {
  // Read plans: aligned reads covering each expert's extents, laid out back to back in a slot.
  plans_.resize(size_t(table.layers()));
  for (int32_t l = 0; l < table.layers(); ++l) {
    plans_[size_t(l)].resize(size_t(table.experts(l)));
    for (int32_t e = 0; e < table.experts(l); ++e) {
      Plan& p = plans_[size_t(l)][size_t(e)];
      p = read_plan(ckpt, table.at(l, e), opts_.chunk_bytes);
      slot_bytes_ = std::max(slot_bytes_, p.read_bytes);
    }
  }
  open_drives(ckpt);
  if (drives_.empty()) {  // no files: nothing is ever read, but queue_name() has a queue to name
    drives_.emplace_back();
    drives_.back().queue = ReadQueue::create(opts_.queue, opts_.queue_depth);
  }
  int64_t n = slot_bytes_ ? int64_t(opts_.cache_bytes / slot_bytes_) : 0;
  if (slot_bytes_ && n < 1)
    fail("expert cache of {} bytes cannot hold one expert ({} bytes)", opts_.cache_bytes, slot_bytes_);
  // Never more slots than experts: a budget larger than the pool would otherwise populate
  // (MAP_POPULATE) memory no expert can use, all of it at start-up.
  int64_t experts = 0;
  for (int32_t l = 0; l < table.layers(); ++l) experts += table.experts(l);
  n = std::min(n, experts);
  slots_.resize(size_t(n));
  slot_table_ = ExpertSlotTable(n, slot_table_.policy());
  if (slot_table_.policy() == EvictionPolicy::Heat) load_heat();
  arena_bytes_ = size_t(n) * slot_bytes_;
  if (arena_bytes_) {
    // Populated now: otherwise the first read into each slot faults its pages
    // in one 4 KiB page at a time inside the O_DIRECT submission, which took
    // ~30% of a cold prefill on the real-size K3 slice. (Transparent huge
    // pages instead made it slower: compaction on fault.) The arena is the
    // plan's share of the budget either way.
    void* m = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) fail("cannot reserve {} bytes for the expert cache: {}", arena_bytes_, std::strerror(errno));
    arena_ = static_cast<uint8_t*>(m);
    touch_ = std::make_unique<std::atomic<uint8_t>[]>(size_t(n));
    for (int64_t i = 0; i < n; ++i) touch_[size_t(i)].store(opts_.prefault ? kUntouched : kSettled);
    if (opts_.prefault) prefaulter_ = std::thread([this] { prefault_arena(); });
  }
}

void StreamingExperts::prefault_arena() {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  // One read per page, last slot first (fills take free slots from the first);
  // a slot a fill has claimed already is skipped. Reads only: no byte changes.
  uint8_t sink = 0;
  for (int64_t s = int64_t(slots_.size()) - 1; s >= 0 && !stop_prefault_.load(std::memory_order_relaxed); --s) {
    uint8_t expected = kUntouched;
    if (!touch_[size_t(s)].compare_exchange_strong(expected, kPrefaulting, std::memory_order_acq_rel)) continue;
    const uint8_t* base = arena_ + uint64_t(s) * slot_bytes_;
    for (uint64_t off = 0; off < slot_bytes_; off += page) sink ^= *static_cast<volatile const uint8_t*>(base + off);
    touch_[size_t(s)].store(kSettled, std::memory_order_release);
    prefault_ns_.store(uint64_t(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count()));
  }
  (void)sink;
  prefault_ns_.store(uint64_t(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count()));
  prefault_done_.store(true);
}

void StreamingExperts::settle_touch(int64_t s) {
  std::atomic<uint8_t>& t = touch_[size_t(s)];
  uint8_t expected = kUntouched;
  if (t.compare_exchange_strong(expected, kSettled, std::memory_order_acq_rel)) return;  // the prefault skips it
  // Being prefaulted now: at most one slot's pages, then the fill may write.
  while (t.load(std::memory_order_acquire) != kSettled) std::this_thread::yield();
}

void StreamingExperts::load_heat() {
  if (opts_.heat_file.empty()) return;
  std::ifstream in(opts_.heat_file);
  uint64_t key;
  double h;
  std::unordered_map<uint64_t, double> heat;
  // Earlier runs count half as much as this one, so the heat follows changing use.
  while (in >> key >> h) heat[key] = 0.5 * h;
  slot_table_.set_heat(std::move(heat));
}

void StreamingExperts::save_heat() const {
  if (slot_table_.policy() != EvictionPolicy::Heat || opts_.heat_file.empty()) return;
  const std::string tmp = opts_.heat_file + ".tmp";
  {
    std::ofstream out(tmp);
    for (const auto& [k, h] : slot_table_.heat())
      if (h >= 0.01) out << k << ' ' << h << '\n';
    if (!out) return;  // best effort: the heat is a hint
  }
  std::rename(tmp.c_str(), opts_.heat_file.c_str());
}

StreamingExperts::~StreamingExperts() {
  stop_prefault_.store(true);
  if (prefaulter_.joinable()) prefaulter_.join();
  save_heat();
  std::vector<ReadCompletion> sink;
  for (auto& d : drives_)
    while (d.queue && d.queue->in_flight() > 0) d.queue->reap(sink, true);
  drives_.clear();
  if (arena_) munmap(arena_, arena_bytes_);
  for (int fd : fds_) ::close(fd);
}

namespace {
// The whole pages inside [p, p + n).
std::pair<uint8_t*, size_t> inner_pages(uint8_t* p, size_t n) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (uintptr_t(p) + page - 1) & ~(page - 1), b = (uintptr_t(p) + n) & ~(page - 1);
  return b > a ? std::pair<uint8_t*, size_t>{reinterpret_cast<uint8_t*>(a), size_t(b - a)}
               : std::pair<uint8_t*, size_t>{p, 0};
}
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14
#endif
}  // namespace

uint64_t StreamingExperts::lend(int64_t n) {
  if (lent_ > 0) fail("internal: the expert cache is lent already");
  n = std::clamp<int64_t>(n, 0, slots());
  if (n == 0 || slot_bytes_ == 0) return 0;
  while (in_flight() > 0) drain(true);  // guesses still reading: every slot settles
  const int64_t first = slots() - n;
  for (int64_t s = first; s < slots(); ++s) {
    Slot& slot = slots_[size_t(s)];
    if (slot_table_.held(s)) {
      if (slot_table_.pins(s) > 0 || slot.state != SlotState::Ready)
        fail("internal: lending expert slot {} while it is in use", s);
      if (slot.prefetched && !slot.used) {
        ++stats_.prefetch_wasted;
        stats_.prefetch_wasted_bytes += plan(expert_key_layer(slot.key), expert_key_expert(slot.key)).read_bytes;
      }
      ++stats_.evictions;
      slot_table_.release_slot(s);
    }
    slot.state = SlotState::Free;
    slot.key = ~0ull;
    slot.weights = {};
    slot_table_.withdraw(s);
    settle_touch(s);  // the background prefault leaves it alone from now on
  }
  // Private anonymous memory: the pages are freed now and read as zeros when touched again.
  const auto [p, len] = inner_pages(arena_ + uint64_t(first) * slot_bytes_, size_t(n) * slot_bytes_);
  if (len > 0 && madvise(p, len, MADV_DONTNEED) != 0)
    fail("cannot return {} bytes of the expert cache to the system: {}", len, std::strerror(errno));
  lent_ = n;
  return uint64_t(n) * slot_bytes_;
}

void StreamingExperts::take_back() {
  if (lent_ == 0) return;
  const int64_t first = slots() - lent_;
  // Populated again as at start-up (a fill would otherwise fault them in inside its reads);
  // kernels before 5.14 have no MADV_POPULATE_WRITE: touched one page at a time.
  const auto [p, len] = inner_pages(arena_ + uint64_t(first) * slot_bytes_, size_t(lent_) * slot_bytes_);
  if (len > 0 && madvise(p, len, MADV_POPULATE_WRITE) != 0) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    for (size_t off = 0; off < len; off += page) static_cast<volatile uint8_t*>(p)[off] = 0;
  }
  for (int64_t s = first; s < slots(); ++s) slot_table_.return_slot(s);
  lent_ = 0;
}

const StreamingExperts::Plan& StreamingExperts::plan(int32_t layer, int32_t e) const {
  if (layer < 0 || layer >= int32_t(plans_.size()) || e < 0 || e >= int32_t(plans_[size_t(layer)].size()))
    fail("no routed expert {} in layer {}", e, layer);
  return plans_[size_t(layer)][size_t(e)];
}

std::string StreamingExperts::describe(int32_t layer, int32_t e) const {
  const Plan& p = plan(layer, e);
  std::string where;  // each file the expert has bytes in (several: packs spread over drives)
  std::vector<int32_t> named;
  for (const auto& r : p.reads) {
    if (std::find(named.begin(), named.end(), r.file) != named.end()) continue;
    named.push_back(r.file);
    where += fmt::format("{}offset {} of {}", where.empty() ? "" : ", ", r.offset, ckpt_.files()[size_t(r.file)]->path());
  }
  return fmt::format("expert {} of layer {} ({} bytes at {})", e, layer, p.bytes, where);
}

int64_t StreamingExperts::find(uint64_t key) const { return slot_table_.find(key); }

int64_t StreamingExperts::victim(bool allow_wanted) const {
  // A free slot, else the policy's first held, unpinned slot whose read finished.
  return slot_table_.victim([&](int64_t i) {
    const Slot& s = slots_[size_t(i)];
    if (s.state != SlotState::Ready) return false;
    // Experts the current layer asked for and has not used yet stay, unless nothing else can go.
    return allow_wanted || !wanted_.count(s.key) || s.acquired_epoch == epoch_;
  });
}

int64_t StreamingExperts::start_load(int32_t layer, int32_t e, bool prefetch, bool allow_wanted) {
  const Plan& p = plan(layer, e);
  const int64_t s = victim(allow_wanted);
  if (s < 0) return -1;
  Slot& slot = slots_[size_t(s)];
  if (slot.state == SlotState::Ready) {
    if (slot.prefetched && !slot.used) {
      ++stats_.prefetch_wasted;
      stats_.prefetch_wasted_bytes += plan(int32_t(slot.key >> 32), int32_t(uint32_t(slot.key))).read_bytes;
    }
    ++stats_.evictions;
  }
  slot.key = key_of(layer, e);
  slot_table_.assign(s, slot.key);
  auto& last = loaded_epoch_[slot.key];
  if (last == epoch_ && epoch_ != 0) ++stats_.duplicate_loads;
  last = epoch_;
  slot.state = SlotState::Loading;
  slot.pending = int32_t(p.reads.size());
  slot.error = 0;
  slot.prefetched = prefetch;
  slot.used = false;
  slot.cancelled = false;
  slot.unsubmitted = 0;
  slot.read_state.assign(p.reads.size(), Slot::kNotSubmitted);
  slot.submitted_at.resize(p.reads.size());
  slot.verify = layer < int32_t(opts_.checksums.size()) && e < int32_t(opts_.checksums[size_t(layer)].size());
  if (slot.verify) slot.want = opts_.checksums[size_t(layer)][size_t(e)];
  else if (opts_.fetcher) slot.verify = opts_.fetcher->checksum(layer, e, &slot.want);
  if (slot.verify) {
    if (!slot.hash) slot.hash = std::make_unique<xxh3::State>();
    slot.hash->reset();
    slot.reads_prefix = 0;
    slot.hashed_piece = 0;
    slot.hashed_in_piece = 0;
  }
  settle_touch(s);
  const uint8_t* base = arena_ + uint64_t(s) * slot_bytes_;
  slot.pending_on.assign(drives_.size(), 0);
  if (trace::enabled()) trace::async_begin(fmt::format("read L{} E{}", layer, e), prefetch ? "prefetch" : "read", slot.key);
  // A guess's reads wait in their drives' backlogs (pump() submits them within
  // the window); a real miss's go out at once.
  const bool held = prefetch && opts_.prefetch_window_reads > 0;
  for (size_t r = 0; r < p.reads.size(); ++r) {
    if (held) {
      drives_[size_t(drive_of_file_[size_t(p.reads[r].file)])].backlog.push_back({s, uint32_t(r)});
      ++slot.unsubmitted;
    } else {
      submit_read(s, r);
    }
  }
  ++stats_.reads_submitted;
  if (prefetch) {
    ++stats_.prefetch_issued;
    stats_.prefetch_bytes += p.read_bytes;
  }
  // The slot's weight views: the resident table's views moved into the slot.
  const ExpertWeights& orig = table_.at(layer, e);
  ExpertWeights w = orig;
  auto moved = [&](const void* ptr, const uint8_t* range_start) -> const uint8_t* {
    for (const auto& [start, off] : p.rebase)
      if (start == range_start) return base + off + (static_cast<const uint8_t*>(ptr) - range_start);
    fail("internal: weight range missing from the read plan of {}", describe(layer, e));
  };
  for (auto [dst, src] : {std::pair<QMatrix*, const QMatrix*>{&w.gate.q, &orig.gate.q}, {&w.up.q, &orig.up.q},
                          {&w.down.q, &orig.down.q}}) {
    auto ranges = weight_byte_ranges(*src);
    if (ranges.empty()) continue;
    dst->data = moved(src->data, ranges[0].ptr);
    if (ranges.size() > 1) dst->scale = moved(src->scale, ranges[1].ptr);
  }
  slot.weights = w;
  return s;
}

void StreamingExperts::submit_read(int64_t s, size_t r) {
  Slot& slot = slots_[size_t(s)];
  const Plan& p = plan(int32_t(slot.key >> 32), int32_t(uint32_t(slot.key)));
  const Read& rd = p.reads[r];
  const int32_t d = drive_of_file_[size_t(rd.file)];
  Drive& drive = drives_[size_t(d)];
  uint8_t* base = arena_ + uint64_t(s) * slot_bytes_;
  drive.queue->submit({fds_[size_t(rd.file)], rd.offset, uint32_t(rd.length), base + rd.slot_offset, (uint64_t(s) << 24) | r});
  slot.read_state[r] = Slot::kInFlight;
  slot.submitted_at[r] = std::chrono::steady_clock::now();
  ++slot.pending_on[size_t(d)];
  drive.stats.bytes_read += rd.length;
  ++drive.stats.reads;
  stats_.bytes_read += rd.length;
  note_busy(drive);
}

void StreamingExperts::pump() {
  const int64_t window = opts_.prefetch_window_reads;
  for (auto& d : drives_) {
    bool any = false;
    // Real misses in flight count against the window too: guesses only use what they leave.
    while (!d.backlog.empty() && d.queue->in_flight() < window) {
      const auto [s, r] = d.backlog.front();
      d.backlog.pop_front();
      --slots_[size_t(s)].unsubmitted;
      submit_read(s, r);
      any = true;
    }
    if (any) d.queue->flush();
  }
}

void StreamingExperts::promote(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  if (slot.unsubmitted == 0) return;
  for (auto& d : drives_) {
    bool any = false;
    for (auto it = d.backlog.begin(); it != d.backlog.end();) {
      if (it->first != s) {
        ++it;
        continue;
      }
      const uint32_t r = it->second;
      it = d.backlog.erase(it);
      --slot.unsubmitted;
      submit_read(s, r);
      any = true;
    }
    if (any) d.queue->flush();
  }
}

void StreamingExperts::cancel(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  for (auto& d : drives_)
    d.backlog.erase(std::remove_if(d.backlog.begin(), d.backlog.end(), [&](const auto& x) { return x.first == s; }),
                    d.backlog.end());
  slot.pending -= slot.unsubmitted;
  slot.unsubmitted = 0;
  slot.cancelled = true;
  const int32_t layer = int32_t(slot.key >> 32);
  if (layer >= 0 && size_t(layer) < guesses_.size()) ++guesses_[size_t(layer)].stats.cancelled;
  if (slot.pending == 0) free_slot(s);
}

void StreamingExperts::uncancel(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  if (!slot.cancelled) return;
  slot.cancelled = false;
  for (size_t r = 0; r < slot.read_state.size(); ++r)
    if (slot.read_state[r] == Slot::kNotSubmitted) {
      ++slot.pending;
      submit_read(s, r);
    }
  flush_all();
}

void StreamingExperts::free_slot(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  const int32_t layer = int32_t(slot.key >> 32), e = int32_t(uint32_t(slot.key));
  if (trace::enabled()) trace::async_end(fmt::format("read L{} E{}", layer, e), "prefetch", slot.key);
  const Plan& p = plan(layer, e);
  ++stats_.prefetch_wasted;
  for (size_t r = 0; r < p.reads.size(); ++r)
    if (slot.read_state[r] == Slot::kDone) stats_.prefetch_wasted_bytes += p.reads[r].length;
  slot_table_.release_slot(s);
  slot.state = SlotState::Free;
  slot.key = ~0ull;
  slot.cancelled = false;
}

void StreamingExperts::hash_landed(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  if (!slot.verify || slot.error) return;
  const int32_t layer = int32_t(slot.key >> 32), e = int32_t(uint32_t(slot.key));
  const Plan& p = plan(layer, e);
  // The reads tile the slot from offset 0 in order: the bytes below the first
  // unfinished read have all landed.
  while (slot.reads_prefix < p.reads.size() && slot.read_state[slot.reads_prefix] == Slot::kDone) ++slot.reads_prefix;
  const uint64_t landed = slot.reads_prefix == p.reads.size() ? p.read_bytes : p.reads[slot.reads_prefix].slot_offset;
  const uint8_t* base = arena_ + uint64_t(s) * slot_bytes_;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t hashed = 0;
  while (slot.hashed_piece < p.payload.size()) {
    const auto [off, len] = p.payload[slot.hashed_piece];
    const uint64_t a = off + slot.hashed_in_piece, b = std::min(off + len, landed);
    if (b <= a) break;
    slot.hash->update(base + a, b - a);
    hashed += b - a;
    slot.hashed_in_piece += b - a;
    if (slot.hashed_in_piece < len) break;
    ++slot.hashed_piece;
    slot.hashed_in_piece = 0;
  }
  if (hashed == 0) return;
  const auto t1 = std::chrono::steady_clock::now();
  if (trace::enabled()) trace::span(fmt::format("verify L{} E{}", layer, e), "verify", t0, t1);
  stats_.verify_seconds += std::chrono::duration<double>(t1 - t0).count();
}

void StreamingExperts::finish_slot(int64_t s) {
  Slot& slot = slots_[size_t(s)];
  if (slot.cancelled) {
    free_slot(s);
    return;
  }
  const int32_t layer = int32_t(slot.key >> 32), e = int32_t(uint32_t(slot.key));
  if (trace::enabled()) trace::async_end(fmt::format("read L{} E{}", layer, e), slot.prefetched ? "prefetch" : "read", slot.key);
  if (slot.error == 0 && slot.verify) {
    hash_landed(s);  // every read is done: the rest of the payload
    if (slot.hashed_piece != plan(layer, e).payload.size()) fail("internal: {} not hashed to its end", describe(layer, e));
    if (slot.hash->digest64() != slot.want) slot.error = -EBADMSG;
    ++stats_.verified;
  }
  slot.state = SlotState::Ready;
}

void StreamingExperts::note_busy(Drive& d) {
  const bool busy = d.queue->in_flight() > 0;
  if (busy == d.busy) return;
  const auto now = std::chrono::steady_clock::now();
  if (busy) d.busy_since = now;
  else d.stats.busy_seconds += std::chrono::duration<double>(now - d.busy_since).count();
  d.busy = busy;
}

std::vector<DriveStats> StreamingExperts::drive_stats() const {
  std::vector<DriveStats> out;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& d : drives_) {
    out.push_back(d.stats);
    if (d.busy) out.back().busy_seconds += std::chrono::duration<double>(now - d.busy_since).count();
  }
  return out;
}

void StreamingExperts::flush_all() {
  for (auto& d : drives_) d.queue->flush();
}

int64_t StreamingExperts::in_flight() const {
  int64_t n = 0;
  for (const auto& d : drives_) n += d.queue->in_flight() + int64_t(d.backlog.size());
  return n;
}

int32_t StreamingExperts::pending_drive(int64_t slot) const {
  const auto& p = slots_[size_t(slot)].pending_on;
  for (size_t d = 0; d < p.size(); ++d)
    if (p[d] > 0) return int32_t(d);
  return -1;
}

void StreamingExperts::drain(bool block, int32_t wait_on) {
  pump();
  std::vector<ReadCompletion> done;
  for (auto& d : drives_) d.queue->reap(done, false);
  if (block && done.empty()) {
    if (wait_on < 0 || drives_[size_t(wait_on)].queue->in_flight() == 0)
      for (size_t d = 0; d < drives_.size() && wait_on < 0; ++d)
        if (drives_[d].queue->in_flight() > 0) wait_on = int32_t(d);
    if (wait_on >= 0) drives_[size_t(wait_on)].queue->reap(done, true);
  }
  for (auto& d : drives_) note_busy(d);
  // Only acquire()'s waits use the time the reads were reaped.
  const auto reaped_at = waiting_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  for (const auto& c : done) {
    const int64_t s = int64_t(c.tag >> 24);
    const size_t r = size_t(c.tag & 0xffffff);
    Slot& slot = slots_[size_t(s)];
    const Plan& p = plan(int32_t(slot.key >> 32), int32_t(uint32_t(slot.key)));
    const Read& rd = p.reads[r];
    --slot.pending_on[size_t(drive_of_file_[size_t(rd.file)])];
    const uint64_t file_size = ckpt_.files()[size_t(rd.file)]->file_size();
    const uint64_t need = std::min<uint64_t>(rd.length, file_size > rd.offset ? file_size - rd.offset : 0);
    if (c.result < 0) slot.error = c.result;
    else if (uint64_t(c.result) < need && slot.error == 0) slot.error = -ENODATA;
    if (waiting_ && c.result > 0) {
      const auto since = std::max(slot.submitted_at[r], wait_since_);
      const double flight = std::chrono::duration<double>(reaped_at - slot.submitted_at[r]).count();
      const double in_wait = std::chrono::duration<double>(reaped_at - since).count();
      landed_in_wait_ += double(c.result) * (flight > 0 ? std::clamp(in_wait / flight, 0.0, 1.0) : 1.0);
    }
    slot.read_state[r] = Slot::kDone;
    if (--slot.pending == 0) finish_slot(s);
    else if (!slot.cancelled) hash_landed(s);
  }
  if (!done.empty()) pump();
}

void StreamingExperts::fetch_missing(int32_t layer, const int32_t* experts, int64_t n) {
  if (!opts_.fetcher) return;
  // Experts not in the RAM cache are read from the local files: make them
  // present there first (the missing ones with one range request per extent,
  // all of the layer's misses in parallel). Present ones count as used, which
  // protects them from the on-disk cache's eviction while they are read.
  std::vector<std::pair<int32_t, int32_t>> need;
  for (int64_t i = 0; i < n; ++i)
    if (find(key_of(layer, experts[i])) < 0) need.push_back({layer, experts[i]});
  if (need.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  opts_.fetcher->ensure(need);
  stats_.stall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // network waits
}

void StreamingExperts::request(int32_t layer, const int32_t* experts, int64_t n) {
  score_guess(layer, experts, n);
  fetch_missing(layer, experts, n);
  ++epoch_;
  wanted_.clear();
  for (int64_t i = 0; i < n; ++i) wanted_[key_of(layer, experts[i])] = epoch_;
  // The router has run: this layer's guesses it did not choose stop reading
  // (one whose reads are all out already finishes and stays cached, as before).
  for (int64_t s = 0; s < int64_t(slots_.size()); ++s) {
    const Slot& slot = slots_[size_t(s)];
    if (slot.state == SlotState::Loading && slot.prefetched && !slot.cancelled && slot.unsubmitted > 0 &&
        int32_t(slot.key >> 32) == layer && !wanted_.count(slot.key))
      cancel(s);
  }
  // Every requested expert counts as a hit or a miss, also those after the
  // cache filled up with pinned or wanted experts (they load at acquire).
  bool full = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = find(key_of(layer, experts[i]));
    if (s >= 0) {
      ++stats_.hits;
      if (slots_[size_t(s)].state == SlotState::Ready) ++stats_.ready_hits;
      uncancel(s);  // guessed for an earlier token, dropped, chosen now
      promote(s);   // a chosen guess: the rest of its reads go out with the misses
      continue;
    }
    ++stats_.misses;
    if (!full) full = start_load(layer, experts[i], false) < 0;
  }
  flush_all();
}

// A guess's precision is that of the layer's last several guesses (counts
// decay by 0.85 per guess: about the last 7 tokens weigh), so a layer whose
// guesses turn good again is read again: it is scored whether or not it was read.
namespace {
constexpr double kGuessDecay = 0.85;
constexpr uint64_t kGuessWarmup = 8;  // guessed experts scored before the precision decides
}  // namespace

bool StreamingExperts::guess_reads(LayerGuess& g) const {
  if (opts_.prefetch_min_precision <= 0 || g.stats.guessed < kGuessWarmup) return true;
  return g.recent_right >= opts_.prefetch_min_precision * g.recent_guessed;
}

void StreamingExperts::score_guess(int32_t layer, const int32_t* experts, int64_t n) {
  if (layer < 0 || size_t(layer) >= guesses_.size() || !guesses_[size_t(layer)].have) return;
  LayerGuess& g = guesses_[size_t(layer)];
  uint64_t right = 0;
  for (const int32_t e : g.pending)
    if (std::find(experts, experts + n, e) != experts + n) ++right;
  g.stats.guessed += g.pending.size();
  g.stats.right += right;
  g.recent_guessed = g.recent_guessed * kGuessDecay + double(g.pending.size());
  g.recent_right = g.recent_right * kGuessDecay + double(right);
  g.pending.clear();
  g.have = false;
}

std::vector<LayerPrefetchStats> StreamingExperts::prefetch_by_layer() const {
  std::vector<LayerPrefetchStats> out(plans_.size());
  for (size_t l = 0; l < guesses_.size() && l < out.size(); ++l) out[l] = guesses_[l].stats;
  return out;
}

void StreamingExperts::prefetch(int32_t layer, const int32_t* experts, int64_t n) {
  if (layer < 0 || layer >= int32_t(plans_.size())) return;
  if (guesses_.size() < plans_.size()) guesses_.resize(plans_.size());
  LayerGuess& g = guesses_[size_t(layer)];
  g.pending.clear();
  for (int64_t i = 0; i < n; ++i)
    if (find(key_of(layer, experts[i])) < 0) g.pending.push_back(experts[i]);
  g.have = true;
  if (!guess_reads(g)) {
    g.stats.skipped += g.pending.size();
    return;
  }
  experts = g.pending.data();
  n = int64_t(g.pending.size());
  std::vector<int32_t> local;  // stream mode: a guess never costs a download
  if (opts_.fetcher) {
    for (int64_t i = 0; i < n; ++i)
      if (opts_.fetcher->present(layer, experts[i])) local.push_back(experts[i]);
    fetch_missing(layer, local.data(), int64_t(local.size()));
    experts = local.data();
    n = int64_t(local.size());
  }
  int64_t issued = 0;
  for (int64_t i = 0; i < n; ++i)
    if (find(key_of(layer, experts[i])) < 0) {
      if (start_load(layer, experts[i], true) < 0) break;
      ++issued;
    }
  g.stats.issued += uint64_t(issued);
  pump();
  flush_all();
}

bool StreamingExperts::ready(int32_t layer, int32_t e) {
  drain(false);
  const int64_t s = find(key_of(layer, e));
  return s >= 0 && slots_[size_t(s)].state == SlotState::Ready;
}

const ExpertWeights& StreamingExperts::acquire(int32_t layer, int32_t e) {
  const uint64_t key = key_of(layer, e);
  int64_t s = find(key);
  const auto t0 = std::chrono::steady_clock::now();
  const double verify0 = stats_.verify_seconds;
  waiting_ = false;
  bool waited = false;
  // Before the first blocking wait: reap what has already landed, so that only what the drive
  // delivers while acquire() waits counts as its delivery during the stall.
  const auto start_waiting = [&] {
    drain(false);
    waiting_ = true;
    wait_since_ = std::chrono::steady_clock::now();
    landed_in_wait_ = 0;
    waited = true;
  };
  if (s < 0) fetch_missing(layer, &e, 1);
  if (s >= 0) {  // a guess (maybe dropped) that nobody requested: it is needed now
    uncancel(s);
    promote(s);
  }
  while (s < 0) {  // not requested, or no slot was free at request time
    s = start_load(layer, e, false, /*allow_wanted=*/true);
    flush_all();
    if (s < 0) {
      if (in_flight() == 0) fail("expert cache: every slot is pinned; cannot load {}", describe(layer, e));
      if (waited) drain(true);
      else start_waiting();
    }
  }
  while (slots_[size_t(s)].state == SlotState::Loading) {
    if (waited) drain(true, pending_drive(s));
    else start_waiting();
  }
  if (waited && trace::enabled())
    trace::span(fmt::format("wait L{} E{}", layer, e), "wait", t0, std::chrono::steady_clock::now());
  // Checksums computed while waiting are verification time, not the drive's.
  if (waited) {
    stats_.stall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
                            (stats_.verify_seconds - verify0);
    stats_.bytes_landed_while_stalled += uint64_t(landed_in_wait_);
    waiting_ = false;
  }
  Slot& slot = slots_[size_t(s)];
  if (slot.error) {
    const int64_t err = slot.error;
    slot_table_.release_slot(s);
    slot.state = SlotState::Free;
    slot.key = ~0ull;
    if (err == -EBADMSG && opts_.fetcher && refetched_.insert(key).second) {
      // A corrupt local copy: drop it, fetch it again and read it once more.
      std::fprintf(stderr, "sluice: checksum mismatch for %s: fetching it again\n", describe(layer, e).c_str());
      opts_.fetcher->invalidate(layer, e);
      return acquire(layer, e);
    }
    if (err == -EBADMSG) fail("checksum mismatch for {}: the file changed since `sluice prepare`", describe(layer, e));
    if (err == -ENODATA) fail("short read of {}: file truncated?", describe(layer, e));
    fail("read error for {}: {}", describe(layer, e), std::strerror(int(-err)));
  }
  if (slot.prefetched && !slot.used) ++stats_.prefetch_used;
  slot.used = true;
  slot.acquired_epoch = epoch_;
  slot_table_.use(s);  // pinned until release; one more use (and heat), just used
  ++stats_.requests;
  stats_.bytes_needed += plan(layer, e).bytes;
  return slot.weights;
}

void StreamingExperts::release(int32_t layer, int32_t e) {
  const int64_t s = find(key_of(layer, e));
  if (s >= 0 && slot_table_.pins(s) > 0) slot_table_.unpin(s, /*touch_when_unpinned=*/false);
}

}  // namespace sluice
