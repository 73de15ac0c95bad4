// Shared by the model-vs-PyTorch tests: error measures of a memo tensor against the reference's,
// and reading a reference tensor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/io/safetensors.h"

namespace memo::test {

// Max |a - b| over max |b|: one number per tensor, robust to entries near zero.
inline double rel_error(const float* a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    ref = std::max(ref, std::fabs(double(b[i])));
  }
  return ref > 0 ? diff / ref : diff;
}

// ||a - b||_2 / ||b||_2: the norm-wise relative error of a whole tensor.
inline double rel_error_l2(const float* a, const std::vector<float>& b) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    ref += double(b[i]) * double(b[i]);
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

inline std::vector<float> read(const SafetensorsFile& f, const std::string& name) {
  int64_t n = 1;
  for (int64_t d : f.shape(name)) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  f.read_into(name, v.data(), n);
  return v;
}

}  // namespace memo::test
