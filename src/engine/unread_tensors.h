// Tensors of the text model that the loaded model never read. A checkpoint whose
// optional tensor is renamed (or that carries tensors of a variant the builders
// do not implement: zero points, extra norms, biases) would otherwise load and
// silently compute a different function. The expected set is the expert index's
// spine: every tensor of the decoder layers and outside them, minus routed
// experts and tensors no architecture reads (format/expert_index.h).
#pragma once
#include <string>
#include <vector>

namespace sluice {

class Decoder;
class ExpertIndex;

// Spine tensors the decoder did not look up while it was built, in name order.
std::vector<std::string> unread_spine_tensors(const Decoder& d, const ExpertIndex& index);

// Throws naming the directory and the first unread tensors when there are any.
void check_no_unread_tensors(const Decoder& d, const ExpertIndex& index);

}  // namespace sluice
