// RoPE's inverse frequencies and attention factor, for plain RoPE and for each `rope_scaling`
// type of Hugging Face's Llama configs (the semantics of transformers' modeling_rope_utils; the
// formulas are written out in shared/papers/longctx-notes.md §3 and in rope_scaling.cc).
//
// With d = head_dim, b = rope_theta and w_i = b^(-2i/d) for i < d/2, position p of a head is
// rotated by the angles p * inv_freq_i, and the rotation's cos and sin are both multiplied by the
// attention factor (so the attention logits by its square):
//   default   inv_freq_i = w_i                                      factor 1
//   linear    w_i / factor (positions interpolated)                 1
//   dynamic   w_i with b raised for sequences over max_position_embeddings (NTK-aware)
//   yarn      w_i blended towards w_i / factor over a ramp of pairs;  0.1 ln(factor) + 1 (or given)
//   longrope  w_i / ext_i, ext = long_factor past the original context, else short_factor
//   llama3    w_i kept for short wavelengths, / factor for long ones, blended between
// `dynamic` and `longrope` depend on the length the table is for (their frequencies change
// once a sequence passes the original context); the others do not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memo {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLongrope, kLlama3 };

// The `rope_type` of a config ("default", "linear", ...), and back (ConfigError if unknown).
const char* rope_type_name(RopeType t);
RopeType rope_type_from_name(const std::string& name);

// A config's `rope_scaling`, resolved: fields a type does not take keep their defaults here and
// are never written back. `original_max_position_embeddings` is 0 where the config gives none
// (the model's max_position_embeddings stands in, as in transformers).
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                               // linear, dynamic, yarn, llama3; longrope's
  bool factor_given = false;                         // longrope: else max_position / original
  int64_t original_max_position_embeddings = 0;      // yarn, longrope, llama3
  std::optional<double> attention_factor;            // yarn, longrope
  double beta_fast = 32.0, beta_slow = 1.0;          // yarn
  std::optional<double> mscale, mscale_all_dim;      // yarn
  bool truncate = true;                              // yarn
  double low_freq_factor = 0, high_freq_factor = 0;  // llama3
  std::vector<double> short_factor, long_factor;     // longrope, d/2 each

  bool is_default() const { return type == RopeType::kDefault; }
  // dynamic and longrope: the frequencies depend on the length of the sequence they rotate.
  bool depends_on_length() const {
    return type == RopeType::kDynamic || type == RopeType::kLongrope;
  }
  bool operator==(const RopeScaling&) const = default;
};

struct RopeFrequencies {
  std::vector<double> inv_freq;  // d/2
  double attention_factor = 1.0;
};

// The frequencies for rotating a sequence of `seq_len` tokens (positions 0 .. seq_len-1) of a model
// with `head_dim`, `theta` and `max_positions` = max_position_embeddings.
RopeFrequencies rope_frequencies(const RopeScaling& s, int64_t head_dim, double theta,
                                 int64_t max_positions, int64_t seq_len);

// ConfigError naming the field when `s` cannot be computed for this head_dim (a factor that is
// not positive, a longrope list of the wrong length, llama3's low_freq_factor >= high_freq_factor).
void validate_rope_scaling(const RopeScaling& s, int64_t head_dim, int64_t max_positions);

}  // namespace memo
