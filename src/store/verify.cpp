#include "store/verify.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "experts/expert_disk_cache.h"
#include "format/manifest.h"
#include "store/file_checksum.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/xxh3.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

// Each file's bytes outside the experts and the spine file (store/file_checksum.h);
// `opened[i]` < 0 marks a file already reported missing or of the wrong size.
void verify_spine(const std::string& dir, const Manifest& man, const std::vector<int>& opened, bool progress,
                  VerifyReport& r) {
  const bool spine_listed = std::any_of(man.files.begin(), man.files.end(),
                                        [](const auto& f) { return f.first == kSpineFile; });
  if (man.rest_checksums.empty() || (!man.spine_file && !spine_listed)) {
    r.unchecked.push_back(fmt::format("the spine and shard headers: {} was written by an older sluice prepare "
                                      "(run `sluice prepare --model {}` again to record their checksums)",
                                      kManifestFile, dir));
    if (man.rest_checksums.empty()) return;
  }
  std::vector<ExpertExtent> extents;
  for (const auto& e : man.experts) extents.insert(extents.end(), e.extents.begin(), e.extents.end());
  std::vector<std::pair<std::string, std::vector<ExpertExtent>>> todo;  // path, ranges
  std::vector<uint64_t> want;
  for (size_t i = 0; i < man.files.size(); ++i) {
    if (opened[i] < 0) continue;
    todo.push_back({man.file_path(dir, i),
                    bytes_outside(extents, int32_t(i), man.files[i].second)});
    want.push_back(man.rest_checksums[i]);
  }
  const std::string spine_path = (fs::path(dir) / kSpineFile).string();
  if (man.spine_file) {
    std::error_code ec;
    const auto size = fs::file_size(spine_path, ec);
    if (ec) {
      r.problems.push_back(fmt::format("{}: cannot read: {}", spine_path, ec.message()));
    } else if (size != man.spine_file->size) {
      r.problems.push_back(fmt::format("{}: {} bytes, the manifest says {}", spine_path, size, man.spine_file->size));
    } else {
      todo.push_back({spine_path, {{0, 0, size}}});
      want.push_back(man.spine_file->checksum);
    }
  }
  uint64_t total = 0;
  for (const auto& [path, ranges] : todo)
    for (const auto& x : ranges) total += x.length;
  Progress bar("verify: spine", total, progress);
  uint64_t before = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& [path, ranges] = todo[i];
    const bool whole = path == spine_path && man.spine_file;
    try {
      const uint64_t h = xxh3_of_ranges(path, ranges, [&](uint64_t n) { bar.update(before + n); });
      if (h != want[i])
        r.problems.push_back(fmt::format("{}: {} XXH3 {:016x}, the manifest says {:016x}", path,
                                         whole ? "the spine file's" : "the bytes outside the experts (header, spine):",
                                         h, want[i]));
    } catch (const Error& e) {
      r.problems.push_back(e.what());
    }
    for (const auto& x : ranges) before += x.length;
  }
  r.spine_bytes = total;
  bar.finish();
}

// Shards and packs (on every drive): present, with the size they had when prepared.
// The descriptors of those that are (-1 for the others, each a problem in r).
std::vector<int> open_files(const std::string& dir, const Manifest& man, VerifyReport& r) {
  std::vector<int> fds(man.files.size(), -1);
  for (size_t i = 0; i < man.files.size(); ++i) {
    const uint64_t size = man.files[i].second;
    const std::string path = man.file_path(dir, i);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ++r.files;
    if (fd < 0) {
      r.problems.push_back(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || uint64_t(st.st_size) != size) {
      r.problems.push_back(fmt::format("{}: {} bytes, the manifest says {}", path, uint64_t(st.st_size), size));
      ::close(fd);
      continue;
    }
    fds[i] = fd;
  }
  return fds;
}

// Where an expert is: each file it has bytes in (one per drive with --expert-dirs) and the first offset there.
std::string expert_location(const std::string& dir, const Manifest& man, const ManifestExpert& e) {
  std::string where;
  std::vector<int32_t> named;
  for (const auto& x : e.extents) {
    if (std::find(named.begin(), named.end(), x.file) != named.end()) continue;
    named.push_back(x.file);
    where += fmt::format("{}{} at offset {}", where.empty() ? "" : ", ",
                         x.file >= 0 && size_t(x.file) < man.files.size() ? man.file_path(dir, size_t(x.file)) : "?",
                         x.offset);
  }
  return where;
}

}  // namespace

VerifyReport verify_checkpoint(const std::string& dir, bool progress) {
  if (is_stream_dir(dir))
    fail("{} is a stream-mode directory (experts are fetched on use): `sluice cache verify` checks its cached experts",
         dir);
  const auto man = find_manifest(dir);
  if (!man) fail("{}: no {} (run `sluice prepare --model {}` on the checkpoint first)", dir, kManifestFile, dir);
  VerifyReport r;
  for (size_t d = 0; d < man->expert_dirs.size(); ++d)
    if (!fs::is_directory(man->expert_dirs[d]))
      r.problems.push_back(fmt::format("{}: expert directory (drive {} of {}) does not exist", man->expert_dirs[d],
                                       d + 1, man->expert_dirs.size()));
  const std::vector<int> fds = open_files(dir, *man, r);
  uint64_t total = 0;
  for (const auto& e : man->experts)
    for (const auto& x : e.extents) total += x.length;
  Progress bar("verify: experts", total, progress);
  std::vector<uint8_t> buf(8 << 20);
  xxh3::State st;
  for (const auto& e : man->experts) {
    ++r.experts;
    st.reset();
    std::string problem;
    for (const auto& x : e.extents) {
      if (x.file < 0 || size_t(x.file) >= fds.size()) {
        problem = fmt::format("extent in file {} of {}", x.file, fds.size());
        break;
      }
      const int fd = fds[size_t(x.file)];
      if (fd < 0) {
        problem = fmt::format("its file {} is missing or has the wrong size", man->file_path(dir, size_t(x.file)));
        break;
      }
      const uint64_t before = r.bytes;
      const std::string failed = xxh3_add_range(st, fd, x.offset, x.length, buf, [&](uint64_t n) {
        r.bytes = before + n;
        bar.update(r.bytes);
      });
      if (!failed.empty()) problem = fmt::format("read of {} {}", man->file_path(dir, size_t(x.file)), failed);
      if (!problem.empty()) break;
    }
    if (problem.empty()) {
      const uint64_t h = st.digest64();
      if (h != e.checksum) problem = fmt::format("XXH3 {:016x}, the manifest says {:016x}", h, e.checksum);
    }
    if (!problem.empty()) {
      const std::string where = expert_location(dir, *man, e);
      r.problems.push_back(fmt::format("expert {} of layer {} ({}): {}", e.expert, e.layer, where.empty() ? "?" : where, problem));
    }
  }
  bar.finish();
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  verify_spine(dir, *man, fds, progress, r);
  return r;
}

}  // namespace sluice
