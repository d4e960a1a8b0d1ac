#include "cli/json_file.h"

#include <fstream>

#include "cluster/cluster.h"
#include "util/error.h"

namespace sluice::cli {

void write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty() || !primary_rank()) return;  // under mpirun rank 0 writes
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) fail("{}: cannot write", path);  // a failed open leaves the stream failed too
}

}  // namespace sluice::cli
