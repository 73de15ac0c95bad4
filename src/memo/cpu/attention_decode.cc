// Causal attention of a few new rows over a key/value cache (generation with a KV cache): one
// (row, head) per work item, a plain softmax over the row's keys with the sum in double.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "memo/backend/checks.h"
#include "memo/cpu/kernels.h"

namespace memo::cpu {

int64_t attention_decode_scratch_numel(int64_t keys) {
  MEMO_CHECK(keys > 0, "attention_decode_scratch_numel: keys ", keys, " must be > 0");
  return int64_t(omp_get_max_threads()) * keys;
}

void attention_decode(Tensor o, ConstTensor q, ConstTensor k, ConstTensor v, int64_t first,
                      int64_t n_heads, int64_t n_kv_heads, Tensor scratch) {
  check_attention_decode(o, q, k, v, first, n_heads, n_kv_heads);
  const int64_t n = q.rows(), H = n_heads, D = q.cols() / n_heads, keys = first + n;
  const int64_t group = n_heads / n_kv_heads;
  const int threads = omp_get_max_threads();
  MEMO_CHECK(scratch.contiguous() && scratch.numel() >= threads * keys,
             "attention_decode: scratch has ", scratch.numel(), " floats, needs ", threads * keys);
  const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < n * H; ++task) {
    const int64_t i = task / H, head = task % H, kv_head = head / group;
    const int64_t last = first + i;  // causal: keys [0, last]
    float* scores = scratch.data() + int64_t(omp_get_thread_num()) * keys;
    const float* qi = &q(i, head * D);
    float max_score = -INFINITY;
    for (int64_t j = 0; j <= last; ++j) {
      const float* kj = &k(j, kv_head * D);
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
      scores[j] = dot * scale;
      max_score = std::max(max_score, scores[j]);
    }
    double sum = 0.0;  // double: thousands of terms of similar size
    for (int64_t j = 0; j <= last; ++j) {
      scores[j] = std::exp(scores[j] - max_score);
      sum += scores[j];
    }
    float* out = &o(i, head * D);
    std::fill(out, out + D, 0.0f);
    for (int64_t j = 0; j <= last; ++j) {
      const float p = float(scores[j] / sum);
      const float* vj = &v(j, kv_head * D);
      for (int64_t d = 0; d < D; ++d) out[d] += p * vj[d];
    }
  }
}

}  // namespace memo::cpu
