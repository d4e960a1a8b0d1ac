// Thrown when a caller's stop check said stop in the middle of long work (a
// prefill pass polls it between layers: model/model.h State::stop). Not a
// sluice::Error: nothing is wrong with the input, and code that reports
// Errors must not mistake it for one.
#pragma once
#include <stdexcept>

namespace sluice {

class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("cancelled") {}
};

}  // namespace sluice
