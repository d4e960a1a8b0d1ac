#include "runtime/prompt_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/state_file.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return int64_t(i);
}
constexpr const char* kSuffix = ".state";
// Recurrent models: a saved state every this many prompt tokens, so that a
// prompt sharing a long prefix with a cached one but departing earlier than
// their recorded departure point still starts near it.
constexpr int64_t kRecurrentSaveEvery = 256;
}  // namespace

PromptCache::PromptCache(const Model& model, PromptCacheOptions opts) : model_(model), opts_(std::move(opts)) {
  if (opts_.slots < 1) fail("--cache-slots must be at least 1, got {}", opts_.slots);
  can_cut_ = Session(model_).image().can_cut();
  if (!opts_.dir.empty()) index_dir();
}

void PromptCache::log(const std::string& line) const {
  if (opts_.log) {
    opts_.log(line);
  } else {
    std::fprintf(stderr, "sluice: prompt cache: %s\n", line.c_str());
    std::fflush(stderr);
  }
}

// The states are conversations: the directory is made 0700 (the files are written 0600).
void PromptCache::make_private() {
  std::error_code ec;
  const bool existed = fs::exists(opts_.dir, ec);
  if (!existed) {
    // Each missing level made 0700 at creation; mkdir applies the umask, which only narrows.
    std::string at;
    for (const auto& part : fs::path(opts_.dir)) {
      at = (fs::path(at) / part).string();
      if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST)
        fail("--prompt-cache {}: cannot create the directory {}: {}", opts_.dir, at, std::strerror(errno));
    }
    return;
  }
  struct stat st {};
  if (::stat(opts_.dir.c_str(), &st) != 0)
    fail("--prompt-cache {}: cannot read the directory: {}", opts_.dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail("--prompt-cache {}: not a directory", opts_.dir);
  const mode_t wide = st.st_mode & 077;
  if (!wide) return;
  if (st.st_uid != ::geteuid()) {
    log(fmt::format("warning: {} is another user's directory with mode {:04o}: others may read the cached "
                    "conversations",
                    opts_.dir, st.st_mode & 07777));
    return;
  }
  if (::chmod(opts_.dir.c_str(), (st.st_mode & 07777 & ~mode_t(077)) | 0700) != 0)
    fail("--prompt-cache {}: cannot make the directory private (0700): {}", opts_.dir, std::strerror(errno));
  int files = 0;
  for (const auto& e : fs::directory_iterator(opts_.dir, ec)) {
    struct stat fst {};
    if (::lstat(e.path().c_str(), &fst) == 0 && S_ISREG(fst.st_mode) && fst.st_uid == st.st_uid && (fst.st_mode & 077)) {
      if (::chmod(e.path().c_str(), fst.st_mode & 07777 & ~mode_t(077)) == 0) ++files;
    }
  }
  log(fmt::format("made {} private: mode 0700 (it was {:04o}){}", opts_.dir, st.st_mode & 07777,
                  files ? fmt::format(", {} file(s) 0600", files) : ""));
}

void PromptCache::index_dir() {
  make_private();
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, File>> found;
  for (const auto& e : fs::directory_iterator(opts_.dir, ec)) {
    const std::string path = e.path().string(), name = e.path().filename().string();
    if (name.size() > 10 && name.ends_with(std::string(kSuffix) + ".tmp")) {  // an interrupted write
      fs::remove(e.path(), ec);
      continue;
    }
    if (!name.ends_with(kSuffix) || !e.is_regular_file()) continue;
    try {
      StateFileHeader h = read_state_header(path);
      if (h.identity != opts_.identity) {
        log(fmt::format("ignoring {}: made by another model, device or kernel set ({})", path, h.identity));
        continue;
      }
      found.push_back({e.last_write_time(ec), File{path, std::move(h.tokens), h.file_bytes, 0}});
    } catch (const Error& err) {
      log(fmt::format("ignoring {}", err.what()));
    }
  }
  if (ec) fail("--prompt-cache {}: cannot list the directory: {}", opts_.dir, ec.message());
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [t, f] : found) {
    f.used = ++tick_;
    files_.push_back(std::move(f));
  }
  evict_files("");
}

int64_t PromptCache::usable_from_slot(const Slot& s, const std::vector<int32_t>& prompt) const {
  const int64_t P = int64_t(prompt.size());
  const auto& st = s.c.session->tokens();
  const int64_t common = common_prefix(st, prompt);
  if (common == int64_t(st.size()) && common < P) return common;  // extends it
  const int64_t use = std::min(common, P - 1);
  if (s.c.mark >= 0 && use >= s.c.mark && s.c.session->open_checkpoints() == 1) return use;  // rolls back into the reply
  return can_cut_ ? use : 0;
}

int64_t PromptCache::usable_from_saved(const std::vector<int32_t>& saved, const std::vector<int32_t>& prompt) const {
  const int64_t use = std::min(common_prefix(saved, prompt), int64_t(prompt.size()) - 1);
  return use < int64_t(saved.size()) && !can_cut_ ? 0 : use;
}

CachedConversation PromptCache::take(const std::vector<int32_t>& prompt, const std::vector<int64_t>& boundaries) {
  save_points_.clear();
  memory_points_.clear();
  const int64_t P = int64_t(prompt.size());
  int64_t slot_use = 0, file_use = 0, point_use = 0;
  size_t slot_at = slots_.size(), file_at = files_.size(), point_at = checkpoints_.size();
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int64_t u = usable_from_slot(slots_[i], prompt);
    if (u > slot_use || (u == slot_use && u > 0 && slots_[i].used > slots_[slot_at].used)) slot_use = u, slot_at = i;
  }
  for (size_t i = 0; i < checkpoints_.size(); ++i) {
    const int64_t u = usable_from_saved(checkpoints_[i].image.tokens, prompt);
    if (u > point_use) point_use = u, point_at = i;
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    const int64_t u = usable_from_saved(files_[i].tokens, prompt);
    if (u > file_use) file_use = u, file_at = i;
  }
  CachedConversation out;
  int64_t reused = 0;
  // A kept conversation first (nothing to copy), then a checkpoint in memory, then a file.
  if (point_use > slot_use && point_use >= file_use) {
    Checkpoint& cp = checkpoints_[point_at];
    auto s = std::make_unique<Session>(model_);
    s->restore(cp.image, point_use);
    cp.used = ++tick_;
    out.session = std::move(s);
    reused = point_use;
  }
  if (!out.session && file_use > slot_use) {
    File& f = files_[file_at];
    try {
      const SessionImage image = read_state_file(f.path, opts_.identity);
      auto s = std::make_unique<Session>(model_);
      s->restore(image, file_use);
      f.used = ++tick_;
      out.session = std::move(s);
      reused = file_use;
    } catch (const Error& e) {
      log(fmt::format("ignoring {}", e.what()));
      files_.erase(files_.begin() + std::ptrdiff_t(file_at));
    }
  }
  if (!out.session && slot_use > 0) {
    CachedConversation c = std::move(slots_[slot_at].c);
    slots_.erase(slots_.begin() + std::ptrdiff_t(slot_at));
    Session& s = *c.session;
    const int64_t n = int64_t(s.tokens().size());
    if (slot_use == n && n < P) {
      if (c.mark >= 0) s.commit();
    } else if (c.mark >= 0 && slot_use >= c.mark && s.open_checkpoints() == 1) {
      s.rollback(slot_use - c.mark);
    } else {
      s.cut(slot_use);
    }
    out.session = std::move(c.session);
    reused = slot_use;
  }
  if (!out.session) out.session = std::make_unique<Session>(model_);
  plan_save_points(prompt, boundaries, reused);
  return out;
}

void PromptCache::plan_save_points(const std::vector<int32_t>& prompt, const std::vector<int64_t>& boundaries,
                                   int64_t reused) {
  const int64_t P = int64_t(prompt.size());
  auto add = [&](std::vector<int64_t>& to, int64_t p) {
    if (p > reused && p < P - 1 && std::find(to.begin(), to.end(), p) == to.end()) to.push_back(p);
  };
  // Checkpoints at the caller's boundaries, and where this prompt departs
  // from what is cached (later prompts may share that much). A cache-only
  // kept conversation serves any prefix already, but it leaves the cache
  // when another prompt takes it.
  if (opts_.checkpoint_bytes > 0) {
    for (int64_t b : boundaries) add(memory_points_, b);
    for (const Slot& s : slots_) add(memory_points_, common_prefix(s.c.session->tokens(), prompt));
    for (const Checkpoint& cp : checkpoints_) add(memory_points_, common_prefix(cp.image.tokens, prompt));
    for (const File& f : files_) add(memory_points_, common_prefix(f.tokens, prompt));
  }
  for (int64_t p : memory_points_) add(save_points_, p);
  // Recurrent state restores only where it was saved: on disk also at the
  // boundaries, where this prompt departs from what is cached, and every 256 tokens.
  if (!can_cut_ && !opts_.dir.empty()) {
    for (int64_t b : boundaries) add(save_points_, b);
    for (const Slot& s : slots_) add(save_points_, common_prefix(s.c.session->tokens(), prompt));
    for (const File& f : files_) add(save_points_, common_prefix(f.tokens, prompt));
    for (int64_t p = kRecurrentSaveEvery; p < P - 1; p += kRecurrentSaveEvery) add(save_points_, p);
  }
  std::sort(save_points_.begin(), save_points_.end());
}

void PromptCache::keep(CachedConversation c) {
  if (!c.session) return;
  slots_.push_back({std::move(c), ++tick_});
  auto lru = [this] {
    return std::min_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) { return a.used < b.used; });
  };
  while (int64_t(slots_.size()) > opts_.slots) slots_.erase(lru());
  while (opts_.memory_bytes > 0 && slots_.size() > 1 && memory_bytes() > opts_.memory_bytes) slots_.erase(lru());
}

uint64_t PromptCache::memory_bytes() const {
  uint64_t b = 0;
  for (const Slot& s : slots_) b += uint64_t(s.c.session->state_bytes());
  return b;
}

uint64_t PromptCache::checkpoint_bytes() const {
  uint64_t b = 0;
  for (const Checkpoint& cp : checkpoints_) b += cp.bytes;
  return b;
}

void PromptCache::keep_checkpoint(const Session& s) {
  const std::vector<int32_t>& t = s.tokens();
  for (Checkpoint& cp : checkpoints_)
    if (cp.image.tokens == t || (can_cut_ && cp.image.tokens.size() > t.size() &&
                                 std::equal(t.begin(), t.end(), cp.image.tokens.begin()))) {
      cp.used = ++tick_;  // holds this state already
      return;
    }
  if (uint64_t(s.state_bytes()) > opts_.checkpoint_bytes) return;  // alone over the bound
  SessionImage image = s.image();
  const uint64_t bytes = uint64_t(image.bytes());
  if (bytes > opts_.checkpoint_bytes) return;
  // A cache-only state of these tokens serves every prefix of them: shorter checkpoints are redundant.
  if (can_cut_)
    checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                      [&](const Checkpoint& cp) {
                                        return cp.image.tokens.size() < t.size() &&
                                               std::equal(cp.image.tokens.begin(), cp.image.tokens.end(), t.begin());
                                      }),
                       checkpoints_.end());
  while (!checkpoints_.empty() && checkpoint_bytes() + bytes > opts_.checkpoint_bytes)
    checkpoints_.erase(std::min_element(checkpoints_.begin(), checkpoints_.end(),
                                        [](const Checkpoint& a, const Checkpoint& b) { return a.used < b.used; }));
  checkpoints_.push_back({std::move(image), bytes, ++tick_});
}

uint64_t PromptCache::disk_bytes() const {
  uint64_t b = 0;
  for (const File& f : files_) b += f.bytes;
  return b;
}

void PromptCache::save(const Session& s) {
  if (s.tokens().empty()) return;
  const int64_t n = int64_t(s.tokens().size());
  if (std::find(memory_points_.begin(), memory_points_.end(), n) != memory_points_.end()) keep_checkpoint(s);
  // A cache-only state at a save point would be superseded by the file of the whole prompt.
  const bool at_point = std::find(save_points_.begin(), save_points_.end(), n) != save_points_.end();
  if (opts_.dir.empty() || (at_point && can_cut_)) return;
  const std::vector<int32_t>& t = s.tokens();
  for (File& f : files_)
    if (f.tokens == t) {
      f.used = ++tick_;
      return;
    }
  const uint64_t h = xxh3::hash64(t.data(), t.size() * sizeof(int32_t));
  const std::string path = (fs::path(opts_.dir) / fmt::format("{:016x}-{}{}", h, t.size(), kSuffix)).string();
  const auto write = [&] {
    if (opts_.write) opts_.write(path, s.image(), opts_.identity);
    else write_state_file(path, s.image(), opts_.identity);
  };
  try {
    try {
      write();
    } catch (const DiskFull& e) {
      // The file system is full: room for this state from the least recently used files, then once more.
      const uint64_t need = encode_state(s.image(), opts_.identity).size();
      const int64_t had = files();
      const uint64_t freed = evict_oldest(need);
      log(fmt::format("{}: deleted {} least recently used file(s) ({} bytes) to make room, trying again", e.what(),
                      had - files(), freed));
      if (freed == 0) throw;
      write();
    }
  } catch (const Error& e) {
    log(fmt::format("not saved: {}", e.what()));
    return;
  }
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  files_.erase(std::remove_if(files_.begin(), files_.end(), [&](const File& f) { return f.path == path; }), files_.end());
  // A cache-only state of these tokens serves every prefix of them: shorter files are redundant.
  if (can_cut_) {
    for (auto it = files_.begin(); it != files_.end();) {
      if (it->tokens.size() < t.size() && std::equal(it->tokens.begin(), it->tokens.end(), t.begin())) {
        fs::remove(it->path, ec);
        it = files_.erase(it);
      } else {
        ++it;
      }
    }
  }
  files_.push_back({path, t, bytes, ++tick_});
  evict_files(path);
}

uint64_t PromptCache::evict_oldest(uint64_t bytes) {
  std::error_code ec;
  uint64_t freed = 0;
  while (freed < bytes && !files_.empty()) {
    auto victim = std::min_element(files_.begin(), files_.end(), [](const File& a, const File& b) { return a.used < b.used; });
    fs::remove(victim->path, ec);
    freed += victim->bytes;
    files_.erase(victim);
  }
  return freed;
}

void PromptCache::evict_files(const std::string& keep_path) {
  std::error_code ec;
  while (disk_bytes() > opts_.disk_bytes && !files_.empty()) {
    auto victim = files_.end();
    for (auto it = files_.begin(); it != files_.end(); ++it)
      if (it->path != keep_path && (victim == files_.end() || it->used < victim->used)) victim = it;
    if (victim == files_.end()) victim = files_.begin();  // only the new one, alone over the bound
    fs::remove(victim->path, ec);
    files_.erase(victim);
  }
}

}  // namespace sluice
