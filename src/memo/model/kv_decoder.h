// Inference with a key/value cache: each layer keeps the keys and values of every position seen,
// so a new token costs one pass of each layer over one row plus attention over the cache, not a
// re-run of the whole prefix. LLaMA and GPT-2 configs (the same weights the trainer uses), batch 1,
// fp32, forward only. A chunk starting at position 0 (the prompt) runs the training kernels
// (FlashAttention-style attention over the chunk); later chunks attend to the cache with a plain
// per-row softmax. Not a server: one sequence, no paging.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "memo/backend/space_array.h"
#include "memo/model/model.h"

namespace memo {

class KvDecoder {
 public:
  // Keeps a reference to `model` (must outlive the decoder); caches max_tokens positions
  // (<= the config's max_position_embeddings, else ConfigError).
  KvDecoder(const Model& model, int64_t max_tokens);

  // Runs tokens at positions [position(), position() + n) and appends their keys and values to
  // the cache; writes the logits of the last one into logits [V]. More tokens than the cache
  // holds: ConfigError naming both; an id outside the vocabulary: DataError.
  void forward(std::span<const int32_t> tokens, std::span<float> logits);
  // forward() over a prompt in chunks of at most `chunk` tokens (a bound on the activations'
  // memory), with the result of one forward over it: RoPE that depends on the length (dynamic,
  // longrope) rotates every prompt row for the prompt's whole length, as one forward would.
  void prefill(std::span<const int32_t> prompt, std::span<float> logits, int64_t chunk);
  void reset() { position_ = rope_written_ = 0; }  // forget the cache
  int64_t position() const { return position_; }
  int64_t max_tokens() const { return max_tokens_; }

 private:
  void layer(int l, int64_t n);   // x_ rows [0, n) through layer l, in place
  void attend(int l, int64_t n);  // attn_ = attention of q_ rows over layer l's cache
  // Rows [begin, end) of the rope tables with the frequencies for a sequence of seq_len tokens.
  void write_rope_rows(int64_t begin, int64_t end, int64_t seq_len);

  const Model& model_;
  const ModelConfig& cfg_;
  int64_t max_tokens_;
  int64_t rope_written_ = 0;  // length-dependent RoPE: rows below it already hold their rotation
  int64_t position_ = 0;
  // Every buffer lives in the model backend's device space (read by its kernels).
  SpaceArray<float> k_cache_, v_cache_;    // [L, max_tokens, Hkv*D] each, after RoPE for k
  SpaceArray<float> rope_cos_, rope_sin_;  // [max_tokens, D/2]; empty with learned positions
  // Per-chunk buffers, [n, width] each, grown to the longest chunk seen.
  SpaceArray<float> x_, xn_, stats_, q_, attn_, h_, gate_, up_, act_, lse_, scratch_;
  SpaceArray<float> qk_raw_, qk_rstd_;  // DecodeRows' q_raw | k_raw and q_rstd | k_rstd
  // The chunk's tokens and the logits, when the host cannot address the device space.
  SpaceArray<int32_t> tokens_;
  SpaceArray<float> logits_;
  SpaceArray<float> workspace_;  // the backend's matrix-product workspace, when it wants one
  int64_t chunk_capacity_ = 0;
};

}  // namespace memo
