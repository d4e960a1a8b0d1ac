#include "io/read_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "io/read_queue.h"

namespace sluice {

ReadProbe probe_o_direct(const std::string& file) {
  ReadProbe r;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) {
    r.detail = fmt::format("open with O_DIRECT: {}", std::strerror(errno));
    return r;
  }
  void* buf = nullptr;
  if (posix_memalign(&buf, kDirectAlign, kDirectAlign) != 0) {
    ::close(fd);
    r.detail = "out of memory";
    return r;
  }
  const ssize_t n = ::pread(fd, buf, kDirectAlign, 0);
  if (n < 0) r.detail = fmt::format("aligned read: {}", std::strerror(errno));
  r.ok = n >= 0;
  std::free(buf);
  ::close(fd);
  return r;
}

ReadProbe probe_io_uring(const std::string& file) {
  ReadProbe r;
  try {
    auto q = ReadQueue::create(ReadQueue::Kind::IoUring, 4);
    bool direct = false;
    const int fd = open_for_reads(file, false, &direct);
    std::vector<uint8_t> buf(4096);
    q->submit({fd, 0, uint32_t(buf.size()), buf.data(), 1});
    std::vector<ReadCompletion> done;
    while (done.empty()) q->reap(done, true);
    ::close(fd);
    if (done[0].result < 0) {
      r.detail = fmt::format("read: {}", std::strerror(int(-done[0].result)));
      return r;
    }
    r.ok = true;
  } catch (const std::exception& e) {
    r.detail = e.what();
  }
  return r;
}

}  // namespace sluice
