// What the activation strategies know of a model's layers, whatever the architecture: the skeletal
// set of one layer (the tensors its backward reads) as a list of named fields, and a way to re-run
// a layer to rebuild them. An architecture (model/architecture.h) says which fields it saves and
// how they are computed; a strategy only allocates, moves and asks to rebuild them by index, so it
// never names a field and memory/ depends on nothing above backend/.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "memo/backend/backend.h"
#include "memo/core/tensor.h"

namespace memo {

// One skeletal tensor of a layer, for a micro-batch of B sequences of S tokens (T = B*S).
struct SkeletalField {
  std::string name;        // the request name the allocator and the plan see ("xn1", "lse")
  int64_t width = 0;       // a [T, width] tensor; 0: a [T] vector (a per-token statistic)
  int64_t heads = 0;       // > 0: a [B, heads, S] tensor instead (the attention log-sum-exp)
  bool per_token = false;  // rebuildable token by token from x and the attention output
  DType dtype = DType::kF32;
  // Under tensor + sequence parallelism over t ranks (Note [Tensor-parallel activations] in
  // model/llama.cc) a field holds either the rank's T/t tokens (row_shards = t: the residual
  // stream, the norms and their statistics) or every token of its heads or units (row_groups = t:
  // T rows, one group of T/t per rank of the sequence split, whose rows r0.. of each group are
  // the tokens of the rank's rows r0..); width and heads are then the rank's. 1 and 1 otherwise.
  int64_t row_shards = 1;
  int64_t row_groups = 1;
  Shape shape(int64_t batch, int64_t seq) const;
  int64_t bytes(int64_t batch, int64_t seq) const {
    return shape(batch, seq).numel() * dtype_bytes(dtype);
  }
};

// The most fields one layer saves (GPT-2: 15, LLaMA: 14, Qwen3: 18), for fixed-size per-field
// arrays.
inline constexpr int kMaxSkeletalFields = 18;

// The skeletal set of every layer of a model: L layers, each saving `fields` (x, the layer input,
// first; it starts every rebuild and always travels). Fields that are neither x nor per-token
// (the attention output and its log-sum-exp, O(S^2) to rebuild) are never recomputed.
struct SkeletalLayout {
  int num_layers = 0;
  int64_t hidden_size = 0;  // C: the width of a layer's input and output
  std::vector<SkeletalField> fields;

  int num_fields() const { return int(fields.size()); }
  // The token rows a strategy splits between offload and recompute: B*S, or B*S/t under tensor +
  // sequence parallelism (the rank's rows of x).
  int64_t token_rows(int64_t batch, int64_t seq) const { return fields[0].shape(batch, seq)[0]; }
  Shape shape(int field, int64_t batch, int64_t seq) const {
    return fields[size_t(field)].shape(batch, seq);
  }
  // One layer's set.
  int64_t layer_bytes(int64_t batch, int64_t seq) const;
};

// One layer's skeletal tensors: field i of the layout in slot i (x in slot 0).
struct SavedActs {
  std::array<Tensor, kMaxSkeletalFields> fields{};

  Tensor& operator[](int i) { return fields[size_t(i)]; }
  const Tensor& operator[](int i) const { return fields[size_t(i)]; }
  Tensor& x() { return fields[0]; }
  const Tensor& x() const { return fields[0]; }
};

// How a strategy re-runs the layers of the micro-batch in flight; the model implements it
// (model/model.h) over its weights and the micro-batch's context.
class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  // The backend the layers run on: its streams, host memory and reproducible rows.
  virtual Backend& backend() const = 0;
  // Layer l's forward from s.x(): fills every other field of s and writes its output into y [T, C]
  // (recompute: a full re-run, bit for bit as the first).
  virtual void forward(int layer, Tensor y, const SavedActs& s) const = 0;
  // Rebuilds token rows [row_begin, row_end) of every per-token field of s from s.x() and the
  // attention output, bit for bit as the forward wrote them; row_begin a multiple of the backend's
  // reproducible_rows() (Note [Reproducible rows] in backend/backend.h) or row_begin == row_end.
  // Rows count SkeletalLayout::token_rows (a field of row_groups g: those rows of each group).
  virtual void recompute_tokens(int layer, const SavedActs& s, int64_t row_begin,
                                int64_t row_end) const = 0;
  // The rows to offload that every rank running the same layers agrees on, given this rank's
  // choice: under tensor parallelism a rebuild runs collectives over the group, so its ranks must
  // rebuild the same rows (the model takes the least). One rank: `rows`.
  virtual int64_t agree_offload_rows(int64_t rows) const { return rows; }
  // Whether every one of this rank's `tokens` rows must travel whatever is chosen (under tensor
  // parallelism, rows that are not whole reproducible panels: agree_offload_rows returns them
  // all). Collective-free, so a strategy can say it before the micro-batch.
  virtual bool all_rows_travel(int64_t tokens) const { return false; }
};

}  // namespace memo
