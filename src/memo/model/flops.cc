// Implementation of model/flops.h.
#include "memo/model/flops.h"

#include "memo/model/params.h"

namespace memo {

ModelFlops model_flops(const ModelConfig& config, int64_t seq) {
  const ParamLayout layout(config);
  double layer_matrix = 0.0;  // matrix parameters of all layers
  for (const ParamInfo& p : layout.params())
    if (p.is_matrix() && p.role == ParamRole::kLayer) layer_matrix += double(p.numel);
  ModelFlops f;
  f.layers = double(config.num_hidden_layers);
  f.layer_matmul = 2.0 * layer_matrix / f.layers;
  // the last product (the MLP's down projection, [C, F] or [F, C]) is never rebuilt
  f.layer_rebuild = f.layer_matmul - 2.0 * double(config.hidden_size * config.intermediate_size);
  const double qd = double(config.num_attention_heads * config.head_dim());
  // Note [Model FLOPs]: query i sees min(i + 1, W) keys, W the layer's window (S without one);
  // per layer, the sum over the S queries, then the mean over the layers.
  const double S = double(seq);
  double pairs = 0.0, band = 0.0;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const int64_t w = config.layer_window(l);
    const double W = w > 0 && w < seq ? double(w) : S;
    pairs += W * (W + 1.0) / 2.0 + (S - W) * W;
    band += W;
  }
  f.attn_causal = 4.0 * qd * (pairs / f.layers) / S;
  f.attn_full = 4.0 * qd * (band / f.layers);
  f.head = 2.0 * double(config.hidden_size) * double(config.vocab_size);
  return f;
}

double train_flops_per_token(const ModelConfig& config, int64_t seq) {
  return model_flops(config, seq).train_causal();
}

}  // namespace memo
