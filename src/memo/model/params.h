// The model's parameters: one flat fp32 buffer laid out tensor after tensor under their Hugging
// Face names and layouts (as the architecture lists them: Llama's Linear [out, in], GPT-2's Conv1D
// [in, out] weights), and views of it per layer. A checkpoint is the buffer's tensors as they are:
// no transposes, no renaming. Gradients use the same layout in a second buffer, so optimisers work
// on flat arrays and checkpoints map names to ranges.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memo/core/tensor.h"
#include "memo/model/config.h"

namespace memo {

// How init_weights starts a tensor (Hugging Face's _init_weights for the architecture).
enum class ParamInit { kNormal, kOne, kZero };

// What a tensor is to the model: the layers' tensors are the architecture's business
// (model/architecture.h); the model itself reads the embedding, the learned positions, the final
// norm and the head.
enum class ParamRole { kEmbedding, kPositions, kLayer, kNorm, kNormBias, kHead };

struct ParamInfo {
  std::string name;  // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t>
      shape;           // as Hugging Face stores it: Linear [out, in], GPT-2 Conv1D [in, out]
  int64_t offset = 0;  // elements from the start of the flat buffer (64-byte aligned)
  int64_t numel = 0;
  ParamInit init = ParamInit::kNormal;
  double init_std_scale =
      1.0;  // kNormal: std = initializer_range * this (GPT-2 c_proj: 1/sqrt(2L))
  ParamRole role = ParamRole::kLayer;
  int64_t layer = -1;  // kLayer: the layer it belongs to
  // Its place in the architecture's list (Architecture::params), whatever part of the list a
  // layout holds: the init stream it draws from (init_weights).
  int64_t index = 0;
  // Tensor parallelism (Note [Tensor-parallel parameters]): the dimension split over the group's
  // ranks (0: rows, 1: columns), or -1 when every rank holds the whole tensor. `shape` is the
  // part this rank holds, `full_shape` the whole tensor (the same without tensor parallelism).
  int split = -1;
  // A tensor of several blocks along `split` (GPT-2's c_attn: q | k | v) is split block by block:
  // rank r holds the r-th part of each, in block order.
  int split_blocks = 1;
  // The vocabulary (embedding, lm_head) splits into parts of ceil(V / t) rows: the last rank's
  // rows past V are zero padding, as Megatron-LM pads the vocabulary, so any V splits.
  bool pad_split = false;
  std::vector<int64_t> full_shape;
  bool is_matrix() const { return shape.size() == 2; }
  bool is_split() const { return split >= 0 && shape != full_shape; }
  int64_t full_numel() const {
    int64_t n = 1;
    for (int64_t d : full_shape) n *= d;
    return n;
  }
};

// Note [Tensor-parallel parameters]
// Under Megatron-LM's tensor parallelism over t ranks, rank r holds the r-th of t equal parts of
// each split tensor: the rows of a column-parallel product's weight (q, k, v, gate, up: its heads
// or intermediate units r F/t ...), the columns of a row-parallel one's (o, down), and the rows of
// the vocabulary (embedding, lm_head: tokens [r V/t, (r + 1) V/t)). GPT-2's Conv1D weights are
// [in, out], so there the columns of a column-parallel weight and the rows of a row-parallel one,
// and c_attn's q | k | v blocks each split. Norm weights and biases, the biases of row-parallel
// products and learned positions are whole on every rank, and their gradients (each rank's tokens'
// share) are summed over the group. A layout with t > 1 is the rank's: its flat buffer holds the
// rank's parts, which is all an optimiser or a gradient reduction sees. Checkpoints hold whole
// tensors (io/checkpoint.h): extract_shard and insert_shard convert.
struct TensorShard {
  int rank = 0;
  int ranks = 1;
};

// The parameters of config's architecture (Architecture::params) in checkpoint order, each at its
// offset in one flat buffer.
class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  // Rank shard.rank's parts under tensor parallelism over shard.ranks (Note [Tensor-parallel
  // parameters]). Throws ConfigError when a split dimension does not divide by the ranks.
  ParamLayout(const ModelConfig& config, TensorShard shard);
  // Tensors [first, last) of `full`, at offsets from the first one's: the part of the parameters
  // one data-parallel rank updates under ZeRO-1 (train/zero.h), starting base_offset() elements
  // into the full buffer.
  ParamLayout(const ParamLayout& full, size_t first, size_t last);
  // The tensors of `full` that `keep` takes, in its order, laid out again from offset 0: a
  // pipeline rank's parameters (Note [Pipeline parts] in model/model.h).
  ParamLayout(const ParamLayout& full, const std::function<bool(const ParamInfo&)>& keep);
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t base_offset() const { return base_offset_; }
  int64_t total_numel() const { return total_numel_; }   // with alignment padding
  int64_t count() const;                                 // parameters, without padding
  const ParamInfo& find(const std::string& name) const;  // throws ConfigError if absent
  const TensorShard& shard() const { return shard_; }

 private:
  TensorShard shard_;
  std::vector<ParamInfo> params_;
  int64_t total_numel_ = 0;
  int64_t base_offset_ = 0;
};

// The most tensors one layer has (GPT-2: 12, LLaMA: 9, 16 with attention_bias and mlp_bias).
inline constexpr int kMaxLayerParams = 16;

// Views of one layer's weights (or of their gradients: the same over the gradient buffer), in the
// order its architecture lists them; the architecture names them (model/architecture.h).
struct LayerWeights {
  std::array<Tensor, kMaxLayerParams> tensors{};
  int count = 0;
  const Tensor& operator[](int i) const { return tensors[size_t(i)]; }
};

struct ModelWeights {
  Tensor embed;  // [V, C] model.embed_tokens (GPT-2: transformer.wte)
  Tensor pos;    // [P, C] transformer.wpe, GPT-2 with learned positions only; else empty
  std::vector<LayerWeights> layers;
  Tensor norm;    // [C]    model.norm (GPT-2: transformer.ln_f.weight)
  Tensor norm_b;  // [C]    transformer.ln_f.bias (GPT-2 only)
  Tensor head;    // [V, C] lm_head, or the embedding itself when tied
};

// Binds views over a flat buffer laid out by `layout` (parameters or gradients): each tensor has
// the buffer's dtype and memory space.
ModelWeights bind_weights(const ModelConfig& config, const ParamLayout& layout, Tensor base);

// Hugging Face init, per ParamInfo::init: Llama's Linear and Embedding weights ~ N(0, std), norm
// weights = 1; GPT-2's Conv1D and embedding weights ~ N(0, std), the two c_proj weights
// ~ N(0, std / sqrt(2 L)), biases 0, LayerNorm weights 1 and biases 0. Deterministic for a seed
// (one counter-based stream per tensor: ParamInfo::index's).
// Under tensor parallelism each rank draws the whole tensor and keeps its part, so a run over any
// layout starts from the weights of one process.
void init_weights(const ParamLayout& layout, float* base, double std, uint64_t seed);

// A contiguous run of rank shard's part of a tensor: `count` elements at `whole` in the whole
// tensor (p.full_shape, row-major) and at `part` in the part (p.shape). shard_runs lists them in
// the part's order; the elements of the part no run covers (a padded part's rows past the whole's
// end) are zero in every part.
struct ShardRun {
  int64_t whole = 0, part = 0, count = 0;
};
std::vector<ShardRun> shard_runs(const ParamInfo& p, TensorShard shard);

// Rank shard's part of the whole tensor `whole` (p.full_shape) into `part` (p.shape), and back.
void extract_shard(const ParamInfo& p, TensorShard shard, const float* whole, float* part);
void insert_shard(const ParamInfo& p, TensorShard shard, const float* part, float* whole);

}  // namespace memo
