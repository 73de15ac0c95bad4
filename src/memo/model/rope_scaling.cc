#include "memo/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "memo/backend/backend.h"
#include "memo/core/error.h"

namespace memo {
namespace {

struct Named {
  RopeType type;
  const char* name;
};
constexpr Named kTypes[] = {{RopeType::kDefault, "default"},   {RopeType::kLinear, "linear"},
                            {RopeType::kDynamic, "dynamic"},   {RopeType::kYarn, "yarn"},
                            {RopeType::kLongrope, "longrope"}, {RopeType::kLlama3, "llama3"}};

// YaRN's attention scale for a context stretched `factor` times: 0.1 k ln(factor) + 1.
double yarn_mscale(double factor, double k) {
  return factor <= 1.0 ? 1.0 : 0.1 * k * std::log(factor) + 1.0;
}

// The pair index (fractional) whose wavelength turns `rotations` times over `context` tokens.
double yarn_correction_dim(double rotations, int64_t head_dim, double theta, double context) {
  return double(head_dim) * std::log(context / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

int64_t original_context(const RopeScaling& s, int64_t max_positions) {
  return s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                : max_positions;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw ConfigError(str("rope_scaling: ", what));
}

}  // namespace

const char* rope_type_name(RopeType t) {
  for (const Named& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

RopeType rope_type_from_name(const std::string& name) {
  for (const Named& n : kTypes)
    if (name == n.name) return n.type;
  throw ConfigError(str("rope_scaling: rope_type \"", name,
                        "\" is not supported; memo implements default, linear, dynamic, yarn, "
                        "longrope and llama3"));
}

void validate_rope_scaling(const RopeScaling& s, int64_t head_dim, int64_t max_positions) {
  if (s.is_default()) return;
  const char* t = rope_type_name(s.type);
  check(std::isfinite(s.factor) && s.factor > 0,
        str(t, ": factor = ", s.factor, " must be a positive number"));
  check(s.original_max_position_embeddings >= 0,
        str(t, ": original_max_position_embeddings = ", s.original_max_position_embeddings,
            " must be positive"));
  if (s.attention_factor)
    check(std::isfinite(*s.attention_factor) && *s.attention_factor > 0,
          str(t, ": attention_factor = ", *s.attention_factor, " must be positive"));
  switch (s.type) {
    case RopeType::kYarn:
      check(s.beta_fast > 0 && s.beta_slow > 0,
            str("yarn: beta_fast = ", s.beta_fast, " and beta_slow = ", s.beta_slow,
                " must be positive"));
      break;
    case RopeType::kLlama3:
      check(s.original_max_position_embeddings > 0,
            "llama3: original_max_position_embeddings is required");
      check(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
            str("llama3: low_freq_factor = ", s.low_freq_factor, ", high_freq_factor = ",
                s.high_freq_factor, "; need 0 < low_freq_factor < high_freq_factor"));
      break;
    case RopeType::kLongrope:
      for (const auto* list : {&s.short_factor, &s.long_factor}) {
        const char* name = list == &s.short_factor ? "short_factor" : "long_factor";
        check(int64_t(list->size()) == head_dim / 2,
              str("longrope: ", name, " has ", list->size(), " entries; head_dim ", head_dim,
                  " needs ", head_dim / 2));
        for (double f : *list)
          check(std::isfinite(f) && f > 0, str("longrope: ", name, " holds ", f, "; need > 0"));
      }
      check(original_context(s, max_positions) > 1,
            "longrope: the original context must be over one token");
      break;
    default:
      break;
  }
}

RopeFrequencies rope_frequencies(const RopeScaling& s, int64_t head_dim, double theta,
                                 int64_t max_positions, int64_t seq_len) {
  RopeFrequencies out;
  out.inv_freq = rope_inv_freq(head_dim, theta);
  std::vector<double>& inv = out.inv_freq;
  const int64_t half = head_dim / 2;
  const double d = double(head_dim);
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:  // position interpolation: every position divided by the factor
      for (double& w : inv) w /= s.factor;
      break;
    case RopeType::kDynamic: {  // NTK-aware: the base grows with the length past the context
      const double L = double(max_positions), len = double(std::max(seq_len, max_positions));
      if (len > L) {
        const double base = theta * std::pow(s.factor * len / L - (s.factor - 1.0), d / (d - 2.0));
        inv = rope_inv_freq(head_dim, base);
      }
      break;
    }
    case RopeType::kYarn: {
      const double L0 = double(original_context(s, max_positions));
      double lo = yarn_correction_dim(s.beta_fast, head_dim, theta, L0);
      double hi = yarn_correction_dim(s.beta_slow, head_dim, theta, L0);
      if (s.truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      lo = std::max(lo, 0.0);
      hi = std::min(hi, d - 1.0);
      if (lo == hi) hi += 0.001;  // no division by zero in the ramp
      for (int64_t i = 0; i < half; ++i) {
        // keep = 1 below the ramp (high frequencies extrapolate), 0 above it (interpolated)
        const double keep = 1.0 - std::clamp((double(i) - lo) / (hi - lo), 0.0, 1.0);
        inv[size_t(i)] = inv[size_t(i)] / s.factor * (1.0 - keep) + inv[size_t(i)] * keep;
      }
      if (s.attention_factor)
        out.attention_factor = *s.attention_factor;
      else if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0)
        out.attention_factor =
            yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
      else
        out.attention_factor = yarn_mscale(s.factor, 1.0);
      break;
    }
    case RopeType::kLongrope: {
      const int64_t L0 = original_context(s, max_positions);
      const double factor = s.factor_given ? s.factor : double(max_positions) / double(L0);
      const std::vector<double>& ext = seq_len > L0 ? s.long_factor : s.short_factor;
      for (int64_t i = 0; i < half; ++i)
        inv[size_t(i)] = 1.0 / (ext[size_t(i)] * std::pow(theta, 2.0 * double(i) / d));
      if (s.attention_factor)
        out.attention_factor = *s.attention_factor;
      else
        out.attention_factor =
            factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(double(L0)));
      break;
    }
    case RopeType::kLlama3: {
      const double L0 = double(s.original_max_position_embeddings);
      const double long_wave = L0 / s.low_freq_factor, short_wave = L0 / s.high_freq_factor;
      for (double& w : inv) {
        const double wavelength = 2.0 * std::numbers::pi / w;
        if (wavelength < short_wave) continue;  // high frequency: kept
        if (wavelength > long_wave) {           // low frequency: interpolated
          w /= s.factor;
          continue;
        }
        const double smooth =
            (L0 / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        w = (1.0 - smooth) * w / s.factor + smooth * w;
      }
      break;
    }
  }
  return out;
}

}  // namespace memo
