// Which keys a query sees in the attention kernels (backend/backend.h).
#pragma once

#include <cstdint>

#include "memo/core/tensor.h"

namespace memo {

// Query row i of sequence b (call row b S + i) sees key row j of its sequence when
//   key_start[b S + i] <= j   (every j when key_start is empty), and
//   j <= i                    (causal; not for a full mask).
// Causal: the model's self-attention. Full: the keys are a chunk that lies wholly before the
// queries' chunk (a context-parallel rank's block pairs, model/context_parallel.h). key_start
// gives each query the first key it may see: its document's start (Note [Document masks]) or
// i - window + 1 (a sliding window), in the key rows of the call (so it may be negative, all
// keys, or past the last key, none). It must not decrease along a sequence: the kernels skip
// whole key tiles (and chunk pairs) from the first and last rows of a query tile alone, and a
// causal call's key_start[b S + i] must be <= i (a token always sees itself). A row that sees
// no key gets o = 0 and lse = -inf (attention_merge then takes the other part). key_start is in
// host memory for every backend (the kernels' tile skipping is decided from it; a device backend
// copies it to its own memory).
struct AttnMask {
  bool causal = true;
  View<const int32_t> key_start;  // [B S] or empty

  static const AttnMask kCausal;  // causal, no key_start
  static const AttnMask kFull;    // full, no key_start
  static AttnMask causal_from(View<const int32_t> key_start) { return {true, key_start}; }
  static AttnMask full_from(View<const int32_t> key_start) { return {false, key_start}; }
};
inline const AttnMask AttnMask::kCausal{true, {}};
inline const AttnMask AttnMask::kFull{false, {}};

}  // namespace memo
