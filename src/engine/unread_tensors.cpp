#include "engine/unread_tensors.h"

#include <set>

#include "format/expert_index.h"
#include "model/decoder.h"
#include "util/error.h"

namespace sluice {

std::vector<std::string> unread_spine_tensors(const Decoder& d, const ExpertIndex& index) {
  const auto accessed = d.weights().accessed_names();
  const std::set<std::string> read(accessed.begin(), accessed.end());
  std::vector<std::string> unread;
  for (const auto& name : index.spine())
    if (!read.count(name)) unread.push_back(name);
  return unread;
}

void check_no_unread_tensors(const Decoder& d, const ExpertIndex& index) {
  const auto unread = unread_spine_tensors(d, index);
  if (unread.empty()) return;
  std::string list;
  for (size_t i = 0; i < unread.size() && i < 8; ++i) list += (i ? ", " : "") + unread[i];
  if (unread.size() > 8) list += fmt::format(", ... ({} more)", unread.size() - 8);
  fail("{}: {} tensor(s) of the model are never read by the {} loader: {}. A renamed tensor, or one of a variant "
       "this loader does not implement, would silently change the model",
       d.checkpoint().dir(), unread.size(), index.layout().arch, list);
}

}  // namespace sluice
