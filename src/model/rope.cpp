#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace sluice {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

Rope rope_from_config(const Config& c, int64_t dim, bool interleaved) {
  Rope r;
  r.dim = dim;
  r.interleaved = interleaved;
  if (dim <= 0 || dim % 2) fail("{}: rotary dimension {} must be positive and even", c.source(), dim);
  std::optional<Config> rs = c.opt_sub("rope_scaling");
  if (!rs) rs = c.opt_sub("rope_parameters");
  double base = c.has("rope_theta") ? c.req_double("rope_theta") : (rs ? rs->get_double("rope_theta", 10000.0) : 10000.0);
  std::string type = "default";
  if (rs) type = rs->has("rope_type") ? rs->req_string("rope_type") : rs->get_string("type", "default");
  r.inv_freq.resize(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) r.inv_freq[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(dim));
  if (type == "default") return r;
  if (type != "yarn") fail("{}: rope type '{}' is not supported (default and yarn are)", rs->source(), type);

  r.yarn = true;
  const double factor = rs->req_double("factor");
  r.yarn_factor = factor;
  const int64_t orig = rs->has("original_max_position_embeddings") ? rs->req_int("original_max_position_embeddings")
                                                                     : c.req_int("max_position_embeddings");
  const double beta_fast = rs->get_double("beta_fast", 32.0), beta_slow = rs->get_double("beta_slow", 1.0);
  const bool truncate = rs->get_bool("truncate", true);
  if (rs->has("attention_factor")) {
    r.attention_factor = rs->req_double("attention_factor");
  } else {
    const double mscale = rs->get_double("mscale", 0.0), mscale_all = rs->get_double("mscale_all_dim", 0.0);
    r.attention_factor = (mscale != 0.0 && mscale_all != 0.0)
                             ? yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all)
                             : yarn_get_mscale(factor, 1.0);
  }
  auto corr_dim = [&](double rot) {
    return double(dim) * std::log(double(orig) / (rot * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = corr_dim(beta_fast), high = corr_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the original frequency
    const double f = r.inv_freq[size_t(i)];
    r.inv_freq[size_t(i)] = (f / factor) * (1.0 - extrapolation) + f * extrapolation;
  }
  return r;
}

double mla_yarn_mscale(const Config& c, const Rope& rope) {
  if (!rope.yarn) return 1.0;
  const Config rs = c.opt_sub("rope_scaling") ? c.sub("rope_scaling") : c.sub("rope_parameters");
  const double mscale_all = rs.get_double("mscale_all_dim", 0.0);
  return mscale_all != 0.0 ? yarn_get_mscale(rope.yarn_factor, mscale_all) : 1.0;
}

}  // namespace sluice
