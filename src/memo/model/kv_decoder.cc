// Implementation of model/kv_decoder.h. Each layer runs its architecture's decode step
// (Architecture::decode: the layer's forward kernel for kernel) on a chunk of rows whose keys and
// values land in the cache instead of in saved activations.
#include "memo/model/kv_decoder.h"

#include <algorithm>
#include <cmath>

#include "memo/core/error.h"
#include "memo/model/architecture.h"

namespace memo {

KvDecoder::KvDecoder(const Model& model, int64_t max_tokens)
    : model_(model), cfg_(model.config()), max_tokens_(max_tokens) {
  if (max_tokens <= 0 || max_tokens > cfg_.max_position_embeddings)
    throw ConfigError(str("a decoder for ", max_tokens, " tokens: the model has ",
                          cfg_.max_position_embeddings, " positions (", cfg_.positions_field(),
                          "); ask for at most that many tokens, prompt included"));
  const int64_t L = cfg_.num_hidden_layers, kv = cfg_.kv_dim();
  k_cache_.assign(size_t(L * max_tokens * kv), 0.0f);
  v_cache_.assign(k_cache_.size(), 0.0f);
  if (cfg_.uses_rope()) {
    const int64_t half = cfg_.head_dim() / 2;
    rope_cos_.assign(size_t(max_tokens * half), 0.0f);
    rope_sin_.assign(rope_cos_.size(), 0.0f);
    model_.backend().rope_table(Tensor(rope_cos_.data(), {max_tokens, half}),
                                Tensor(rope_sin_.data(), {max_tokens, half}), cfg_.head_dim(),
                                float(cfg_.rope_theta));
  }
}

void KvDecoder::forward(std::span<const int32_t> tokens, std::span<float> logits) {
  const int64_t n = int64_t(tokens.size()), C = cfg_.hidden_size, V = cfg_.vocab_size;
  MEMO_CHECK(n > 0 && int64_t(logits.size()) == V, "KvDecoder::forward: ", n, " tokens, ",
             logits.size(), " logits for vocab ", V);
  if (position_ + n > max_tokens_)
    throw ConfigError(str("generation reached ", position_ + n, " tokens, more than the ",
                          max_tokens_, " the decoder holds"));
  if (n > chunk_capacity_) {  // grows for the prompt only; single tokens reuse it
    const int64_t F = cfg_.intermediate_size, HD = cfg_.num_attention_heads * cfg_.head_dim();
    x_.assign(size_t(n * C), 0.0f);
    xn_.assign(size_t(n * C), 0.0f);
    h_.assign(size_t(n * C), 0.0f);
    stats_.assign(size_t(2 * n), 0.0f);
    q_.assign(size_t(n * HD), 0.0f);
    attn_.assign(size_t(n * HD), 0.0f);
    gate_.assign(size_t(n * F), 0.0f);
    up_.assign(size_t(n * F), 0.0f);
    act_.assign(size_t(n * F), 0.0f);
    lse_.assign(size_t(cfg_.num_attention_heads * n), 0.0f);
    chunk_capacity_ = n;
  }
  const ModelWeights& w = model_.weights();
  const Tensor x(x_.data(), {n, C});
  model_.backend().embedding_forward(x, View<const int32_t>(tokens.data(), {n}), w.embed);
  if (!w.pos.empty()) model_.backend().add_into(x, w.pos.slice_rows(position_, position_ + n));
  for (int l = 0; l < int(cfg_.num_hidden_layers); ++l) layer(l, n);
  // final norm and head on the last row only
  const Tensor last = x.slice_rows(n - 1, n), xf(xn_.data(), {1, C});
  const Architecture& arch = architecture(cfg_.arch);
  arch.final_norm_forward(xf, Tensor(stats_.data(), arch.final_norm_stats_shape(1)), last, w, cfg_,
                          model_.backend());
  model_.backend().matmul(Tensor(logits.data(), {1, V}), xf, w.head, false, true);
  position_ += n;
}

void KvDecoder::layer(int l, int64_t n) {
  const int64_t C = cfg_.hidden_size, F = cfg_.intermediate_size;
  const int64_t HD = cfg_.num_attention_heads * cfg_.head_dim(), KV = cfg_.kv_dim();
  const size_t cache_row = size_t((int64_t(l) * max_tokens_ + position_) * KV);
  DecodeRows r;
  r.x = Tensor(x_.data(), {n, C});
  r.xn = Tensor(xn_.data(), {n, C});
  r.h = Tensor(h_.data(), {n, C});
  r.q = Tensor(q_.data(), {n, HD});
  r.k = Tensor(k_cache_.data() + cache_row, {n, KV});
  r.v = Tensor(v_cache_.data() + cache_row, {n, KV});
  r.attn = Tensor(attn_.data(), {n, HD});
  r.mean = Tensor(stats_.data(), {n});
  r.rstd = Tensor(stats_.data() + n, {n});
  r.mlp_gate = Tensor(gate_.data(), {n, F});
  r.mlp_in = Tensor(up_.data(), {n, F});
  r.mlp_act = Tensor(act_.data(), {n, F});
  if (cfg_.uses_rope()) {
    const int64_t half = cfg_.head_dim() / 2;
    r.rope_cos = ConstTensor(rope_cos_.data(), {max_tokens_, half});
    r.rope_sin = ConstTensor(rope_sin_.data(), {max_tokens_, half});
  }
  r.position = position_;
  r.attend = [this, l, n] { attend(l, n); };
  architecture(cfg_.arch).decode(r, model_.weights().layers[size_t(l)], cfg_, model_.backend());
}

// attn = attention of the chunk's q rows over layer l's cache (keys [0, position_ + n)).
void KvDecoder::attend(int l, int64_t n) {
  Backend& be = model_.backend();
  const int64_t H = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim();
  const int64_t KV = cfg_.kv_dim(), HD = H * D, keys = position_ + n;
  const float* k_layer = k_cache_.data() + size_t(int64_t(l) * max_tokens_ * KV);
  const float* v_layer = v_cache_.data() + size_t(int64_t(l) * max_tokens_ * KV);
  const bool prompt = position_ == 0;  // the training kernel, as Model's forward runs it
  const int64_t scratch_numel =
      prompt ? be.attention_forward_scratch_numel(D) : be.attention_decode_scratch_numel(keys);
  if (int64_t(scratch_.size()) < scratch_numel) scratch_.assign(size_t(scratch_numel), 0.0f);
  const Tensor scratch(scratch_.data(), {scratch_numel});
  const ConstTensor k(k_layer, {keys, KV}), v(v_layer, {keys, KV});
  if (prompt)
    return be.attention_forward(Tensor(attn_.data(), {n, HD}), Tensor(lse_.data(), {1, H, n}),
                                ConstTensor(q_.data(), {n, HD}), k, v, 1, H, Hkv, scratch);
  be.attention_decode(Tensor(attn_.data(), {n, HD}), ConstTensor(q_.data(), {n, HD}), k, v,
                      position_, H, Hkv, scratch);
}

}  // namespace memo
