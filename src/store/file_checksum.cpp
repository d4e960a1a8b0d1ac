#include "store/file_checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>


#include "util/error.h"
#include "util/xxh3.h"

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

std::string xxh3_add_range(xxh3::State& st, int fd, uint64_t offset, uint64_t length, std::vector<uint8_t>& buf,
                           const std::function<void(uint64_t)>& on_bytes) {
  for (uint64_t done = 0; done < length;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), length - done));
    const ssize_t got = ::pread(fd, buf.data(), n, off_t(offset + done));
    if (got <= 0)
      return fmt::format("at offset {}: {}", offset + done, got < 0 ? std::strerror(errno) : "end of file");
    st.update(buf.data(), size_t(got));
    done += uint64_t(got);
    if (on_bytes) on_bytes(done);
  }
  return "";
}

uint64_t xxh3_of_ranges(const std::string& path, const std::vector<ExpertExtent>& ranges,
                        const std::function<void(uint64_t)>& on_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  xxh3::State st;
  std::vector<uint8_t> buf(8 << 20);
  uint64_t before = 0;
  std::string problem;
  for (const auto& r : ranges) {
    problem = xxh3_add_range(st, fd, r.offset, r.length, buf, [&](uint64_t n) {
      if (on_bytes) on_bytes(before + n);
    });
    if (!problem.empty()) break;
    before += r.length;
  }
  const uint64_t h = st.digest64();
  ::close(fd);
  if (!problem.empty()) fail("{}: read {}", path, problem);
  return h;
}

}  // namespace sluice
