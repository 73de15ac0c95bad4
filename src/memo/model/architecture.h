// The seam between the model and one decoder architecture. The model (model/model.h) owns the
// parameters, runs the embedding, the stack of layers, the head and the loss, and hands each layer
// to its architecture; the strategies (memory/) see a layer only as its skeletal set. An
// architecture owns everything that differs between LLaMA and GPT-2: the Hugging Face tensors and
// their init, the layer's forward, token-wise recompute and backward as straight lists of kernel
// calls, the tensors the backward reads (its skeletal set, with names and shapes), the final norm,
// and the layer's step in incremental decoding (model/kv_decoder.h).
//
// Adding an architecture: one file that implements Architecture (model/llama.cc is the model to
// follow), its value in `enum class Arch` (model/config.h), and one line in architecture()
// (model/architecture.cc). Its Hugging Face config names belong to io/config_json.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "memo/backend/allocator.h"
#include "memo/backend/backend.h"
#include "memo/core/tensor.h"
#include "memo/memory/skeletal.h"
#include "memo/model/config.h"
#include "memo/model/context_parallel.h"
#include "memo/model/parallel.h"
#include "memo/model/params.h"

namespace memo {

// Everything a layer needs besides weights and saved activations.
struct LayerContext {
  const ModelConfig* config;
  int64_t batch;               // B sequences in the micro-batch
  int64_t seq;                 // S tokens per sequence
  ConstTensor rope_cos;        // [S, D/2]; empty with learned positions
  ConstTensor rope_sin;        // [S, D/2]; empty with learned positions
  ActivationAllocator* alloc;  // transients
  Backend* backend;            // every kernel runs through it
  Parallel parallel;           // t: the tensor-parallel ranks (tp's size); c = 1 (see cp)
  DType act;                   // the activations' dtype (backend->activation_dtype())
  // Context parallelism (Note [Context parallel layout]): seq is then this rank's 2n tokens per
  // sequence, chunk-major, and rope_cos/sin are the tables of the whole sequence. Null: one rank.
  const ContextParallel* cp;
  // The tensor-parallel group (Note [TP collectives]); null without tensor parallelism.
  Communicator* tp = nullptr;
  // Document masks (Note [Document masks]): for each token of each whole sequence ([batch x the
  // whole sequence's length], also under context parallelism), the position its document starts
  // at, in host memory. Empty: each sequence is one document.
  View<const int32_t> doc_start = {};
  // With document masks, each of the layer's token rows' position ([T], chunk-major under context
  // parallelism), in host memory; empty: positions run on over each sequence.
  View<const int32_t> positions = {};
  // The layer's sliding window (ModelConfig::layer_window), set by for_layer; -1: no layer's
  // context yet, which the attention refuses where the model has a window.
  int64_t window = -1;
};

// ctx for layer l (global index): with l's sliding window.
inline LayerContext for_layer(const LayerContext& ctx, int64_t l) {
  LayerContext c = ctx;
  c.window = ctx.config->layer_window(l);
  return c;
}

// Note [Document masks]
// Packed windows hold several documents; with document masks (Model::set_document_mask) a token
// attends only to the earlier tokens of its own document, and its position (RoPE's, or GPT-2's
// learned row) counts from its document's first token, the Hugging Face position_ids convention
// for packed data. Documents start at each document start token and at the window's start:
// the end of text in GPT-2's layout (as llm.c's token files), where the prediction made from a
// document's last token is the next one's end of text and the one made from the end of text
// sees nothing of its document; the BOS in a Llama tokenizer's, where each document ends with
// the end of text, whose prediction is the next document's BOS (Note [Document layout] in
// data/shards.h). --eod-mask-loss (Megatron-LM's option, Model::set_eod_loss_mask) leaves the
// predictions made from the end of text out of the loss (Note [Counted tokens] in
// train/step.cc). The attention takes key_start = the document's start
// (AttnMask), the ring passes the same whole-sequence starts to each chunk pair, and RoPE runs
// over the runs of consecutive positions (for_each_position_run), each with its rows of the
// tables. The plan depends on shapes only: key_start and positions are host vectors.

// run(row, position, length) for each maximal run of consecutive positions among rows [r0, r1)
// of `positions`.
template <class F>
void for_each_position_run(View<const int32_t> positions, int64_t r0, int64_t r1, F&& run) {
  const int32_t* p = positions.data();
  for (int64_t a = r0; a < r1;) {
    int64_t b = a + 1;
    while (b < r1 && p[b] == p[b - 1] + 1) ++b;
    run(a, int64_t(p[a]), b - a);
    a = b;
  }
}

// The first key each query row sees (AttnMask::key_start) when the queries are positions
// [q0, q0 + n) and the keys start at position k0 of each of ctx.batch whole sequences: the later
// of its document's start (ctx.doc_start) and, with the layer's sliding window W (ctx.window), q -
// W + 1, less k0; rows b n + t. Appended to `out`; returns false (appending nothing) when neither a
// document mask nor a window applies, so the call is plain causal or full.
bool attention_key_start(std::vector<int32_t>& out, const LayerContext& ctx, int64_t q0, int64_t n,
                         int64_t k0);
inline View<const int32_t> host_view(const std::vector<int32_t>& v) {
  return {v.data(), {int64_t(v.size())}};
}

// The layer's rotary embedding of rows [first_row, first_row + x.rows()) of its tokens (at their
// true positions under context parallelism), and its causal self-attention over whole sequences
// (the ring of model/context_parallel.h under context parallelism, one kernel call otherwise):
// what every architecture calls, so a layer never branches on the layout.
void layer_rope(Tensor x, int64_t first_row, const LayerContext& ctx, bool backward);
void layer_attention_forward(Tensor o, Tensor lse, ConstTensor q, ConstTensor k, ConstTensor v,
                             int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx);
void layer_attention_backward(Tensor dq, Tensor dk, Tensor dv, ConstTensor dout, ConstTensor q,
                              ConstTensor k, ConstTensor v, ConstTensor o, ConstTensor lse,
                              int64_t n_heads, int64_t n_kv_heads, const LayerContext& ctx);

// One layer of incremental decoding on n new token rows at `position`: buffers the decoder owns.
// x is the layer's input on entry and its output on exit; k and v are the rows of the layer's
// cache that the new tokens fill; `attend` computes attn from q over the cache (keys up to
// position + n), after k and v are written. mean and rstd are [n] scratch for the norms'
// statistics, mlp_gate, mlp_in and mlp_act [n, F] scratch for the MLP (LLaMA: gate, up and
// silu(gate) * up; GPT-2: c_fc's output and its GELU). q_raw [n, H*D], k_raw [n, Hkv*D], q_rstd
// [n, H] and k_rstd [n, Hkv] are scratch for the products and statistics of q/k head norms (Qwen3).
struct DecodeRows {
  Tensor x, xn, h, q, k, v, attn;
  Tensor q_raw, k_raw, q_rstd, k_rstd;
  Tensor mean, rstd;
  Tensor mlp_in, mlp_gate, mlp_act;
  ConstTensor rope_cos, rope_sin;  // [max tokens, D/2]; empty with learned positions
  int64_t position = 0;
  std::function<void()> attend;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual std::string_view name() const = 0;  // "llama", "gpt2"

  // Every parameter in Hugging Face's names, layouts and checkpoint order, with its role and init
  // (offset and numel are the layout's to fill). A layer's tensors are listed in the order its
  // forward reads them from LayerWeights.
  virtual std::vector<ParamInfo> params(const ModelConfig& config) const = 0;
  // The tensors one layer's backward reads, x first (memory/skeletal.h): SavedActs slot i holds
  // field i. Activations are of dtype `activations`, per-token statistics fp32; a rank's fields
  // under tensor parallelism over tp ranks (Note [Tensor-parallel activations]).
  virtual std::vector<SkeletalField> skeletal_fields(const ModelConfig& config, DType activations,
                                                     int64_t tp) const = 0;
  // Weight matrices of the MLP (LLaMA's SwiGLU: 3; GPT-2: 2), for the FLOP count.
  virtual int mlp_matrices() const = 0;

  // Fills every field of s but x (read), and writes the layer output y: [T, C].
  virtual void forward(Tensor y, const SavedActs& s, const LayerWeights& w,
                       const LayerContext& ctx) const = 0;
  // Rebuilds token rows [row_begin, row_end) of every per-token field of s from x and the
  // attention output, without attention. The rows come out bit for bit as forward wrote them: the
  // same kernels, and the products in the same row panels (Note [Reproducible rows] in
  // backend/backend.h), so row_begin must be a multiple of the backend's reproducible_rows() (or
  // row_begin == row_end; check_recompute_rows throws otherwise). Needs no transients.
  virtual void recompute_tokens(const SavedActs& s, int64_t row_begin, int64_t row_end,
                                const LayerWeights& w, const LayerContext& ctx) const = 0;
  // On entry dres = dL/dy, on exit dres = dL/dx (updated in place: the residual stream's gradient
  // passes through unchanged plus the branches). Weight gradients accumulate into dw.
  virtual void backward(Tensor dres, const LayerWeights& dw, const SavedActs& s,
                        const LayerWeights& w, const LayerContext& ctx) const = 0;

  // The final norm's statistics for T tokens ([T]: 1/rms; [2, T]: LayerNorm's mean and rstd).
  virtual Shape final_norm_stats_shape(int64_t tokens) const = 0;
  virtual void final_norm_forward(Tensor xf, Tensor stats, ConstTensor x, const ModelWeights& w,
                                  const ModelConfig& config, Backend& backend) const = 0;
  // dx += d norm / dx (dx is the residual stream's gradient); the norm's weight gradients
  // accumulate into dw.
  virtual void final_norm_backward(Tensor dx, const ModelWeights& dw, ConstTensor dxf,
                                   ConstTensor x, ConstTensor stats, const ModelWeights& w,
                                   Backend& backend) const = 0;

  // A prefix of the parameter names that checkpoints saved from the base model rather than the
  // language-model class leave off (GPT-2's "transformer.": "h.0.attn.c_attn.weight"); loading
  // accepts both forms. Empty: names are always whole.
  virtual std::string_view optional_name_prefix() const { return {}; }

  // The layer's forward on a chunk of decoded rows (model/kv_decoder.h), kernel for kernel as
  // forward computes them.
  virtual void decode(const DecodeRows& r, const LayerWeights& w, const ModelConfig& config,
                      Backend& backend) const = 0;
};

// The registered architectures.
const Architecture& architecture(Arch arch);

// config's skeletal set with activations of dtype `activations` (the backend's
// activation_dtype()), as the strategies see it.
SkeletalLayout skeletal_layout(const ModelConfig& config, DType activations, int64_t tp = 1);

// Throws unless [r0, r1) is a row range of T tokens that recompute_tokens can rebuild exactly: r0 a
// multiple of ctx.backend->reproducible_rows() (any r0 when the backend promises none), or empty.
void check_recompute_rows(const char* fn, int64_t r0, int64_t r1, int64_t T,
                          const LayerContext& ctx);

}  // namespace memo
