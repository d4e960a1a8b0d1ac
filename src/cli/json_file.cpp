#include "cli/json_file.h"

#include <fstream>

#include "util/error.h"

namespace sluice::cli {

void write_json_file(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) fail("{}: cannot write", path);  // a failed open leaves the stream failed too
}

}  // namespace sluice::cli
