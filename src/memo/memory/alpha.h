// The MEMO cost model for alpha, the fraction of tokens whose "other" skeletal tensors are
// offloaded (the rest are recomputed). The MEMO paper's program (arXiv 2407.12117, section 4.1)
// has this closed form:
//   alpha* = clamp(min((B T_layer - S_in - S_attn) / S_oth,
//                      (M_host / (L-2) - S_in - S_attn) / S_oth), 0, 1)
// i.e. the largest alpha with (S_in + S_attn + alpha S_oth) / B <= T_layer (the offload hides under
// the next layer's forward) and (L-2)(S_in + S_attn + alpha S_oth) <= M_host (the host holds every
// offloaded layer; the last two stay on the device). Pure: no profiling, no I/O.
#pragma once

#include <cstdint>
#include <string>

namespace memo {

struct AlphaInputs {
  // Bytes per layer per micro-batch: the layer input x; the attention output with its lse; all
  // other skeletal tensors (SkeletalField::per_token) over all T tokens.
  int64_t input_bytes = 0;
  int64_t attn_bytes = 0;
  int64_t other_bytes = 0;
  int num_layers = 0;                  // L
  double layer_forward_s = 0.0;        // T_layer, one layer's forward (profiled)
  double bandwidth_bytes_per_s = 0.0;  // B, device-to-host (profiled on the D2H stream); 0: unknown
  int64_t host_memory_bytes = 0;       // M_host; 0: unlimited
  int64_t seq = 0;                     // tokens per sequence, to say which shorter one would fit
};

enum class AlphaBound {
  kNone,        // alpha = 1 satisfies both constraints (or nothing leaves the device:
                // L <= 2)
  kBandwidth,   // the copy of one layer must hide under one layer's forward
  kHostMemory,  // the host must hold L - 2 layers
};
const char* alpha_bound_name(AlphaBound b);  // "none", "bandwidth", "host memory"

struct AlphaChoice {
  double alpha = 1.0;  // the closed form's answer, in [0, 1]
  AlphaBound binding = AlphaBound::kNone;
  double alpha_bandwidth = 1.0;  // each constraint's own bound before clamping (may be < 0
  double alpha_host = 1.0;       //   or > 1; +inf when the constraint is absent)
  bool host_fits = true;         // false: even alpha = 0 overflows the host; run refused
  bool copy_hidden = true;       // false: even alpha = 0 copies slower than a layer computes
  std::string advice;            // when !host_fits or !copy_hidden: the numbers and what fits
};

AlphaChoice choose_alpha(const AlphaInputs& in);

// Host bytes of (L - 2) offloaded layers at a given alpha: (L-2)(S_in + S_attn + alpha S_oth).
double host_bytes_at(const AlphaInputs& in, double alpha);

// One line with alpha, the binding constraint and every input, for the start-of-run log.
std::string describe(const AlphaInputs& in, const AlphaChoice& choice);

}  // namespace memo
