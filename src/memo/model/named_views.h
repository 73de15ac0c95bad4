// What an architecture's file (model/llama.cc, model/gpt2.cc) uses to give names to the tensors the
// model and the strategies hold by index: a layer's weights (LayerWeights, in the order of
// Architecture::params) and its skeletal set (SavedActs, in the order of skeletal_fields). Each
// architecture declares a struct of named Tensors and a table of its members in that order; one
// table serves both the binding and the field list, so the two cannot disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memo/core/error.h"
#include "memo/core/tensor.h"
#include "memo/memory/skeletal.h"
#include "memo/model/config.h"
#include "memo/model/params.h"

namespace memo {

// The named struct whose member i is layer tensor i (LayerWeights, Architecture::params order).
template <class Named, size_t N>
Named bind_weights(const LayerWeights& w, Tensor Named::*const (&members)[N]) {
  MEMO_CHECK(w.count == int(N), "a layer with ", w.count, " tensors bound as ", N);
  Named named;
  for (size_t i = 0; i < N; ++i) named.*members[i] = w[int(i)];
  return named;
}

// One entry of Architecture::params (the layout fills in offset and numel).
inline ParamInfo param_info(std::string name, std::vector<int64_t> shape, ParamInit init,
                            ParamRole role, int64_t layer = -1, double std_scale = 1.0,
                            int split = -1, int split_blocks = 1) {
  ParamInfo info;
  info.split = split;
  info.split_blocks = split_blocks;
  info.name = std::move(name);
  info.shape = std::move(shape);
  info.init = init;
  info.init_std_scale = std_scale;
  info.role = role;
  info.layer = layer;
  return info;
}

// The width of a skeletal tensor in the config's dimensions.
enum class SavedWidth {
  kHidden,      // [T, C]
  kQuery,       // [T, H*D]
  kKv,          // [T, Hkv*D]
  kFfn,         // [T, F]
  kToken,       // [T]       a per-token statistic
  kHeads,       // [B, H, S] per head and position (the attention log-sum-exp)
  kQueryHeads,  // [T, H]    a per-token statistic of each query head (Qwen3's q_norm)
  kKvHeads,     // [T, Hkv]  and of each key head (k_norm)
};

// One row of an architecture's skeletal table.
template <class Saved>
struct SavedSpec {
  const char* name;  // the request name the plan sees
  Tensor Saved::*member;
  SavedWidth width;
  bool per_token;  // rebuildable token by token (all but x, the attention output and lse)
};

// Per-token statistics and the log-sum-exp stay fp32 whatever the activations' dtype.
// Under tensor parallelism over tp ranks (Note [Tensor-parallel activations] in
// model/parallel.h) a rank's field: kHidden and kToken hold T/tp rows, the others T rows of the
// rank's heads or units.
inline SkeletalField skeletal_field(const char* name, SavedWidth width, bool per_token,
                                    const ModelConfig& c, DType activations, int64_t tp = 1) {
  SkeletalField f;
  f.name = name;
  f.per_token = per_token;
  const bool stats = width == SavedWidth::kToken || width == SavedWidth::kHeads ||
                     width == SavedWidth::kQueryHeads || width == SavedWidth::kKvHeads;
  f.dtype = stats ? DType::kF32 : activations;
  switch (width) {
    case SavedWidth::kHidden:
      f.width = c.hidden_size;
      break;
    case SavedWidth::kQuery:
      f.width = c.num_attention_heads * c.head_dim();
      break;
    case SavedWidth::kKv:
      f.width = c.kv_dim();
      break;
    case SavedWidth::kFfn:
      f.width = c.intermediate_size;
      break;
    case SavedWidth::kToken:
      break;
    case SavedWidth::kHeads:
      f.heads = c.num_attention_heads;
      break;
    case SavedWidth::kQueryHeads:
      f.width = c.num_attention_heads;
      break;
    case SavedWidth::kKvHeads:
      f.width = c.num_key_value_heads;
      break;
  }
  if (tp > 1) {
    if (width == SavedWidth::kHidden || width == SavedWidth::kToken) {
      f.row_shards = tp;
    } else {
      f.width /= tp;
      f.heads /= tp;
      f.row_groups = width == SavedWidth::kHeads ? 1 : tp;
    }
  }
  return f;
}

// The named struct whose member specs[i].member is slot i of s.
template <class Saved, size_t N>
Saved bind_saved(const SavedActs& s, const SavedSpec<Saved> (&specs)[N]) {
  static_assert(N <= size_t(kMaxSkeletalFields));
  Saved named;
  for (size_t i = 0; i < N; ++i) named.*specs[i].member = s[int(i)];
  return named;
}

template <class Saved, size_t N>
std::vector<SkeletalField> skeletal_fields_of(const SavedSpec<Saved> (&specs)[N],
                                              const ModelConfig& c, DType activations,
                                              int64_t tp = 1) {
  std::vector<SkeletalField> fields;
  for (const SavedSpec<Saved>& spec : specs)
    fields.push_back(skeletal_field(spec.name, spec.width, spec.per_token, c, activations, tp));
  return fields;
}

}  // namespace memo
