#include "experts/expert_disk_cache.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/http_client.h"
#include "util/error.h"
#include "util/json_integer.h"
#include "util/xxh3.h"

namespace sluice {

namespace fs = std::filesystem;

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t w = ::write(fd, contents.data() + done, contents.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed: {}", tmp, std::strerror(e));
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("{}: fsync failed: {}", tmp, std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename into place: {}", path, std::strerror(errno));
  fsync_dir(fs::path(path).parent_path().string());
}

std::string RemoteRepo::file_url(const std::string& file) const {
  return url_join(base, repo + "/resolve/" + revision + "/" + file);
}

void RemoteRepo::save(const std::string& dir) const {
  nlohmann::json j = {{"version", 1}, {"base", base}, {"repo", repo}, {"revision", revision}};
  write_file_atomic((fs::path(dir) / kRemoteFile).string(), j.dump(2) + "\n");
}

RemoteRepo RemoteRepo::load(const std::string& dir) {
  const std::string path = (fs::path(dir) / kRemoteFile).string();
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  RemoteRepo r;
  try {
    auto j = nlohmann::json::parse(in);
    r.base = j.at("base").get<std::string>();
    r.repo = j.at("repo").get<std::string>();
    r.revision = j.at("revision").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed: {}", path, e.what());
  }
  return r;
}

bool is_stream_dir(const std::string& dir) { return fs::exists(fs::path(dir) / kRemoteFile); }

ExpertDiskCache::ExpertDiskCache(std::string dir) : dir_(std::move(dir)) {
  const std::string path = (fs::path(dir_) / kExpertCacheFile).string();
  std::ifstream in(path);
  if (!in) return;
  try {
    auto j = nlohmann::json::parse(in);
    // Each integer checked: a float out of range (1e30 bytes) would convert with undefined behaviour.
    auto integer = [](const nlohmann::json& v, const char* field) {
      const auto i = json_integer<uint64_t>(v);
      if (!i) fail("field '{}' is {}, not a non-negative integer", field, v.dump());
      return *i;
    };
    auto id = [](const nlohmann::json& v, const char* field) {
      const auto i = json_integer<int32_t>(v);
      if (!i || *i < 0) fail("field '{}' is {}, not an index", field, v.dump());
      return *i;
    };
    if (j.at("version") != 1) fail("version {}", j.at("version").dump());
    max_bytes_ = j.contains("max_bytes") ? integer(j["max_bytes"], "max_bytes") : 0;
    tick_ = j.contains("tick") ? integer(j["tick"], "tick") : 0;
    for (const auto& e : j.at("experts")) {
      CachedExpert c;
      c.checksum = std::stoull(e.at(2).get<std::string>(), nullptr, 16);
      c.bytes = integer(e.at(3), "experts[][3] (bytes)");
      c.last_use = integer(e.at(4), "experts[][4] (last use)");
      const int32_t layer = id(e.at(0), "experts[][0] (layer)"), expert = id(e.at(1), "experts[][1] (expert)");
      // A table sluice wrote names each expert once; a repeat means it was damaged
      // (and would count the expert's bytes twice against the cache budget).
      if (!entries_.emplace(std::pair{layer, expert}, c).second) fail("expert ({}, {}) listed twice", layer, expert);
      bytes_ += c.bytes;
      tick_ = std::max(tick_, c.last_use);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: %s is unreadable (%s); treating every expert as not cached\n", path.c_str(), e.what());
    entries_.clear();
    bytes_ = 0;
  }
}

const CachedExpert* ExpertDiskCache::find(int32_t layer, int32_t expert) const {
  auto it = entries_.find({layer, expert});
  return it == entries_.end() ? nullptr : &it->second;
}

void ExpertDiskCache::mark(int32_t layer, int32_t expert, uint64_t checksum, uint64_t bytes) {
  auto& c = entries_[{layer, expert}];
  bytes_ = bytes_ - c.bytes + bytes;
  c.checksum = checksum;
  c.bytes = bytes;
  c.last_use = ++tick_;
  dirty_ = true;
}

void ExpertDiskCache::unmark(int32_t layer, int32_t expert) {
  auto it = entries_.find({layer, expert});
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  entries_.erase(it);
  dirty_ = true;
}

void ExpertDiskCache::touch(int32_t layer, int32_t expert) {
  auto it = entries_.find({layer, expert});
  if (it == entries_.end()) return;
  it->second.last_use = ++tick_;
  used_ = true;
}

std::vector<std::pair<int32_t, int32_t>> ExpertDiskCache::lru_order() const {
  std::vector<std::pair<int32_t, int32_t>> v;
  for (const auto& [k, _] : entries_) v.push_back(k);
  std::sort(v.begin(), v.end(), [&](auto& a, auto& b) { return entries_.at(a).last_use < entries_.at(b).last_use; });
  return v;
}

void ExpertDiskCache::save() {
  nlohmann::json j;
  j["version"] = 1;
  j["max_bytes"] = max_bytes_;
  j["tick"] = tick_;
  j["experts"] = nlohmann::json::array();
  for (const auto& [k, c] : entries_)
    j["experts"].push_back({k.first, k.second, fmt::format("{:016x}", c.checksum), c.bytes, c.last_use});
  write_file_atomic((fs::path(dir_) / kExpertCacheFile).string(), j.dump() + "\n");
  dirty_ = used_ = false;
}

void ExpertDiskCache::save_if_dirty(bool include_use_times) {
  if (dirty_ || (include_use_times && used_)) save();
}

namespace {
int open_rw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  return fd;
}
}  // namespace

void punch_expert(const Checkpoint& ckpt, const std::vector<ExpertExtent>& extents) {
  for (const auto& x : extents) {
    const std::string& path = ckpt.files()[size_t(x.file)]->path();
    const int fd = open_rw(path);
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(x.offset), off_t(x.length)) != 0) {
      // No hole punching here: overwrite with zeros, which frees nothing but keeps the file consistent.
      std::vector<uint8_t> zeros(std::min<uint64_t>(x.length, 1 << 20), 0);
      for (uint64_t o = 0; o < x.length; o += zeros.size()) {
        const size_t n = size_t(std::min<uint64_t>(zeros.size(), x.length - o));
        if (::pwrite(fd, zeros.data(), n, off_t(x.offset + o)) != ssize_t(n)) {
          const int e = errno;
          ::close(fd);
          fail("{}: cannot clear bytes {}-{}: {}", path, x.offset, x.offset + x.length - 1, std::strerror(e));
        }
      }
    }
    ::fdatasync(fd);
    ::close(fd);
  }
}

uint64_t hash_local_expert(const Checkpoint& ckpt, const std::vector<ExpertExtent>& extents) {
  xxh3::State st;
  std::vector<uint8_t> buf;
  for (const auto& x : extents) {
    const std::string& path = ckpt.files()[size_t(x.file)]->path();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    buf.resize(size_t(std::min<uint64_t>(x.length, 8u << 20)));
    for (uint64_t o = 0; o < x.length;) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), x.length - o));
      const ssize_t r = ::pread(fd, buf.data(), n, off_t(x.offset + o));
      if (r <= 0) {
        const int e = errno;
        ::close(fd);
        fail("{}: cannot read bytes {}-{}: {}", path, x.offset + o, x.offset + x.length - 1,
             r == 0 ? "end of file" : std::strerror(e));
      }
      st.update(buf.data(), size_t(r));
      o += uint64_t(r);
    }
    ::close(fd);
  }
  return st.digest64();
}

}  // namespace sluice
