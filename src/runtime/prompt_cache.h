// Conversations kept for prefix reuse across requests: a few sessions in
// memory (bounded by count and by their state's bytes, least recently used
// evicted first) and, optionally, their states on disk in a directory that
// survives restarts (runtime/state_file.h files, bounded by bytes, least
// recently used deleted first). A new prompt continues from whichever holds
// the longest prefix of it; reuse never changes a logit (states restore bit
// for bit, rollbacks are exact).
//
// Besides, checkpoints: states copied to memory at chosen prompt positions
// (the caller's message boundaries, such as the end of an agent's system
// prompt and tools, and where a prompt departs from a cached one), bounded by
// bytes, least recently used dropped first. A new session that shares an
// agent's system prompt and tools starts from its checkpoint, also when the
// conversation that made it has left the slots.
//
// Caches (KV, latent) cut to any prefix. Recurrent state (KDA) only restores
// at the positions it was saved at, so for such models the checkpoints (and
// files) are what a prompt departing from a kept conversation reuses: at the
// boundaries, where a new prompt departs from a cached one (the next prompt
// that shares that much starts there) and, on disk, every 256 prompt tokens
// (a prompt departing earlier still starts near it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"

namespace sluice {

struct PromptCacheOptions {
  int64_t slots = 1;          // conversations kept in memory (at least 1: the one running)
  uint64_t memory_bytes = 0;  // bound on their state's bytes (0: none)
  std::string dir;            // state files (empty: none)
  uint64_t disk_bytes = uint64_t(8) << 30;  // bound on the files' bytes
  uint64_t checkpoint_bytes = uint64_t(2) << 30;  // bound on the checkpoints' bytes (0: none kept)
  std::string identity;       // the model's (engine/model_identity.h)
  std::function<void(const std::string&)> log;  // one line per ignored file (default: stderr)
  // Writes one state file (default: write_state_file). A write that runs out of
  // space throws DiskFull (util/atomic_file.h): the cache then deletes its least
  // recently used files to make room and tries once more. Tests pass a writer
  // that runs out of space as a small file system would.
  std::function<void(const std::string& path, const SessionImage& image, const std::string& identity)> write;
};

// A conversation in use: the session and the tokens before its open rollback
// mark (-1: no mark open).
struct CachedConversation {
  std::unique_ptr<Session> session;
  int64_t mark = -1;
};

class PromptCache {
 public:
  // Creates DIR if needed (mode 0700: the states hold conversations) and
  // indexes its files (headers only); files it cannot use are logged once and
  // left alone. A directory of ours that others may read is tightened to 0700
  // (its files to 0600) with one line; another user's is used with a warning.
  PromptCache(const Model& model, PromptCacheOptions opts);

  // A conversation holding the longest prefix of `prompt` that any slot,
  // checkpoint or file has, at most prompt.size() - 1 tokens (the last one is
  // fed to get logits), with no mark open; a fresh session when none has
  // any. The slot it came from leaves the cache (give it back with keep()).
  // `boundaries`: positions of the prompt worth a checkpoint (message
  // boundaries other prompts may share, ascending or not).
  CachedConversation take(const std::vector<int32_t>& prompt, const std::vector<int64_t>& boundaries = {});
  // Keeps a conversation for later requests, evicting beyond the bounds.
  void keep(CachedConversation c);
  // Positions of `prompt` after which take()'s caller should save() the
  // state as it feeds (the boundaries; where the prompt departs from a cached
  // one; with a directory on recurrent models, every 256 tokens), ascending,
  // after the reused part and before its last token.
  const std::vector<int64_t>& save_points() const { return save_points_; }
  // At a save point: keeps a checkpoint of the session's state in memory
  // (boundaries and departure points; unless one holds those tokens, or it
  // alone exceeds the bound), dropping the least recently used beyond the
  // bound. Then, with a directory, writes the state there (atomically, mode
  // 0600) unless a file holds those tokens already, deleting the least
  // recently used files beyond the bound; a failed write is logged; a write
  // that finds the disk full deletes least recently used files until the
  // state's bytes are freed (or none is left) and is tried once more.
  // Elsewhere (the prompt but its last token) only the file.
  void save(const Session& s);

  int64_t slots_in_memory() const { return int64_t(slots_.size()); }
  uint64_t memory_bytes() const;
  int64_t files() const { return int64_t(files_.size()); }
  int64_t checkpoints() const { return int64_t(checkpoints_.size()); }
  uint64_t checkpoint_bytes() const;
  uint64_t disk_bytes() const;

 private:
  struct File {
    std::string path;
    std::vector<int32_t> tokens;
    uint64_t bytes = 0;
    uint64_t used = 0;  // tick of the last use
  };
  struct Slot {
    CachedConversation c;
    uint64_t used = 0;
  };
  struct Checkpoint {
    SessionImage image;
    uint64_t bytes = 0;
    uint64_t used = 0;
  };
  int64_t usable_from_slot(const Slot& s, const std::vector<int32_t>& prompt) const;
  int64_t usable_from_saved(const std::vector<int32_t>& saved, const std::vector<int32_t>& prompt) const;
  // Where take()'s prompt is to be saved as it is prefilled (past the `reused` tokens): in
  // memory at the caller's boundaries and where it departs from what is cached, on disk
  // also every kRecurrentSaveEvery tokens for recurrent state.
  void plan_save_points(const std::vector<int32_t>& prompt, const std::vector<int64_t>& boundaries, int64_t reused);
  void keep_checkpoint(const Session& s);
  void index_dir();
  void evict_files(const std::string& keep_path);
  uint64_t evict_oldest(uint64_t bytes);  // deletes LRU files until `bytes` are freed; returns the bytes freed
  void make_private();
  void log(const std::string& line) const;

  const Model& model_;
  PromptCacheOptions opts_;
  bool can_cut_ = true;  // the model's state is caches only
  std::vector<Slot> slots_;
  std::vector<File> files_;
  std::vector<Checkpoint> checkpoints_;
  std::vector<int64_t> save_points_;
  std::vector<int64_t> memory_points_;  // the save points that get a checkpoint
  uint64_t tick_ = 0;
};

}  // namespace sluice
