#include "chat/prefill_pacer.h"

#include <algorithm>
#include <cmath>

namespace sluice::chat {

PrefillPacer::PrefillPacer(int64_t limit, double target_seconds)
    : limit_(std::max<int64_t>(1, limit)),
      target_(target_seconds > 0 ? target_seconds : 0),
      next_(target_ > 0 ? std::min(limit_, kFirstTokens) : limit_) {}

void PrefillPacer::done(int64_t n, double seconds) {
  if (target_ <= 0 || n <= 0) return;
  // Fourfold growth at most: a short chunk's rate carries its fixed costs, and a
  // rate measured early says little about positions far later.
  const double fit = seconds > 0 ? target_ * double(n) / seconds : double(limit_);
  const double grown = std::min(fit, 4.0 * double(n));
  next_ = std::clamp<int64_t>(int64_t(std::floor(std::min(grown, double(limit_)))), std::min(kMinTokens, limit_), limit_);
}

}  // namespace sluice::chat
