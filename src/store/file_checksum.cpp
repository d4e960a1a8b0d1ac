#include "store/file_checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <xxhash.h>

#include "util/error.h"

namespace sluice {

std::vector<ExpertExtent> bytes_outside(const std::vector<ExpertExtent>& extents, int32_t file, uint64_t file_size) {
  std::vector<ExpertExtent> in_file;
  for (const auto& x : extents)
    if (x.file == file && x.length > 0) in_file.push_back(x);
  std::vector<ExpertExtent> gaps;
  uint64_t at = 0;
  for (const auto& x : merge_extents(std::move(in_file))) {
    if (x.offset > at) gaps.push_back({file, at, std::min(x.offset, file_size) - at});
    at = std::max(at, x.offset + x.length);
    if (at >= file_size) break;
  }
  if (at < file_size) gaps.push_back({file, at, file_size - at});
  return gaps;
}

uint64_t xxh3_of_ranges(const std::string& path, const std::vector<ExpertExtent>& ranges,
                        const std::function<void(uint64_t)>& on_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<uint8_t> buf(8 << 20);
  uint64_t hashed = 0;
  std::string problem;
  for (const auto& r : ranges) {
    for (uint64_t done = 0; done < r.length && problem.empty();) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), r.length - done));
      const ssize_t got = ::pread(fd, buf.data(), n, off_t(r.offset + done));
      if (got <= 0) {
        problem = fmt::format("{}: read at offset {}: {}", path, r.offset + done,
                              got < 0 ? std::strerror(errno) : "end of file");
        break;
      }
      XXH3_64bits_update(st, buf.data(), size_t(got));
      done += uint64_t(got);
      hashed += uint64_t(got);
      if (on_bytes) on_bytes(hashed);
    }
    if (!problem.empty()) break;
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  ::close(fd);
  if (!problem.empty()) fail("{}", problem);
  return h;
}

}  // namespace sluice
