// Whether the expert reader's two fast paths work on a file's filesystem:
// an aligned O_DIRECT read and a read through an io_uring queue (`sluice info`).
#pragma once
#include <string>

namespace sluice {

struct ReadProbe {
  bool ok = false;
  std::string detail;  // why not, when !ok
};

// One aligned 4 KiB read with O_DIRECT.
ReadProbe probe_o_direct(const std::string& file);
// One 4 KiB read through an io_uring queue (the expert reader's default).
ReadProbe probe_io_uring(const std::string& file);

}  // namespace sluice
