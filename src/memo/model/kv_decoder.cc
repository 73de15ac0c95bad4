// Implementation of model/kv_decoder.h. Each layer runs its architecture's decode step
// (Architecture::decode: the layer's forward kernel for kernel) on a chunk of rows whose keys and
// values land in the cache instead of in saved activations.
#include "memo/model/kv_decoder.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "memo/backend/checks.h"
#include "memo/core/error.h"
#include "memo/model/architecture.h"

namespace memo {

KvDecoder::KvDecoder(const Model& model, int64_t max_tokens)
    : model_(model), cfg_(model.config()), max_tokens_(max_tokens) {
  if (max_tokens <= 0 || max_tokens > cfg_.max_positions())
    throw ConfigError(str("a decoder for ", max_tokens, " tokens: the model has ",
                          cfg_.positions_limit(),
                          "; ask for at most that many tokens, prompt included"));
  if (cfg_.sliding_window > 0 && max_tokens > cfg_.sliding_window &&
      !model.backend().masked_attention())
    throw ConfigError(str("a decoder for ", max_tokens, " tokens: longer than sliding_window = ",
                          cfg_.sliding_window, ", which the ", model.backend().name(),
                          " backend's attention does not window yet; ask for at most ",
                          cfg_.sliding_window, " tokens, prompt included"));
  const int64_t L = cfg_.num_hidden_layers, kv = cfg_.kv_dim();
  Backend& be = model_.backend();
  k_cache_ = SpaceArray<float>(be, L * max_tokens * kv, "the key cache");
  v_cache_ = SpaceArray<float>(be, L * max_tokens * kv, "the value cache");
  if (cfg_.uses_rope()) {
    const int64_t half = cfg_.head_dim() / 2;
    rope_cos_ = SpaceArray<float>(be, max_tokens * half, "the rope cos table");
    rope_sin_ = SpaceArray<float>(be, max_tokens * half, "the rope sin table");
    write_rope_rows(0, max_tokens, max_tokens);
  }
}

void KvDecoder::write_rope_rows(int64_t begin, int64_t end, int64_t seq_len) {
  const int64_t half = cfg_.head_dim() / 2;
  const RopeFrequencies f = rope_frequencies(cfg_.rope_scaling, cfg_.head_dim(), cfg_.rope_theta,
                                             cfg_.max_position_embeddings, seq_len);
  model_.backend().rope_table(rope_cos_.tensor({max_tokens_, half}).slice_rows(begin, end),
                              rope_sin_.tensor({max_tokens_, half}).slice_rows(begin, end),
                              f.inv_freq, f.attention_factor, begin);
}

void KvDecoder::forward(std::span<const int32_t> tokens, std::span<float> logits) {
  const int64_t n = int64_t(tokens.size()), C = cfg_.hidden_size, V = cfg_.vocab_size;
  MEMO_CHECK(n > 0 && int64_t(logits.size()) == V, "KvDecoder::forward: ", n, " tokens, ",
             logits.size(), " logits for vocab ", V);
  if (position_ + n > max_tokens_)
    throw ConfigError(str("generation reached ", position_ + n, " tokens, more than the ",
                          max_tokens_, " the decoder holds"));
  // dynamic and longrope rotate with the frequencies of the length reached (as transformers
  // does when it decodes): the new rows are rewritten, but for those prefill() wrote for the
  // whole prompt; the cached keys keep their rotation.
  if (cfg_.uses_rope() && cfg_.rope_scaling.depends_on_length() && position_ + n > rope_written_)
    write_rope_rows(position_, position_ + n, position_ + n);
  Backend& be = model_.backend();
  const bool direct = be.host_can_access(be.device_space());
  // the products' workspace for this call (Note [Matrix-product workspace] in backend/backend.h)
  if (const int64_t bytes = be.matmul_workspace_bytes(); bytes > 0) {
    if (workspace_.numel() * 4 < bytes)
      workspace_ = SpaceArray<float>(be, (bytes + 3) / 4, "the matrix-product workspace");
    be.set_matmul_workspace(workspace_.tensor({workspace_.numel()}));
  }
  struct Unset {
    Backend& be;
    ~Unset() { be.set_matmul_workspace(Tensor()); }
  } const unset{be};
  if (n > chunk_capacity_) {  // grows for the prompt only; single tokens reuse it
    const int64_t F = cfg_.intermediate_size, HD = cfg_.num_attention_heads * cfg_.head_dim();
    x_ = SpaceArray<float>(be, n * C);
    xn_ = SpaceArray<float>(be, n * C);
    h_ = SpaceArray<float>(be, n * C);
    stats_ = SpaceArray<float>(be, 2 * n);
    q_ = SpaceArray<float>(be, n * HD);
    // q/k head norms' inputs and statistics (Qwen3): q_raw | k_raw, q_rstd | k_rstd
    qk_raw_ = SpaceArray<float>(be, n * (HD + cfg_.kv_dim()));
    qk_rstd_ = SpaceArray<float>(be, n * (cfg_.num_attention_heads + cfg_.num_key_value_heads));
    attn_ = SpaceArray<float>(be, n * HD);
    gate_ = SpaceArray<float>(be, n * F);
    up_ = SpaceArray<float>(be, n * F);
    act_ = SpaceArray<float>(be, n * F);
    lse_ = SpaceArray<float>(be, cfg_.num_attention_heads * n);
    chunk_capacity_ = n;
  }
  const ModelWeights& w = model_.weights();
  const Tensor x = x_.tensor({n, C});
  const int32_t* ids = tokens.data();
  check_token_ids("embedding_forward", "token", View<const int32_t>(ids, {n}), V);
  if (!direct) {
    if (tokens_.numel() < n) tokens_ = SpaceArray<int32_t>(be, n, "the decoded tokens");
    be.copy_from_host(tokens_.data(), ids, n * int64_t(sizeof(int32_t)));
    ids = tokens_.data();
  }
  be.embedding_forward(x, View<const int32_t>(ids, {n}), w.embed);
  if (!w.pos.empty()) model_.backend().add_into(x, w.pos.slice_rows(position_, position_ + n));
  for (int l = 0; l < int(cfg_.num_hidden_layers); ++l) layer(l, n);
  // final norm and head on the last row only
  const Tensor last = x.slice_rows(n - 1, n), xf = xn_.tensor({1, C});
  const Architecture& arch = architecture(cfg_.arch);
  arch.final_norm_forward(xf, stats_.tensor(arch.final_norm_stats_shape(1)), last, w, cfg_,
                          model_.backend());
  if (direct) {
    be.matmul(View<float>(logits.data(), {1, V}), xf, w.head, false, true);  // host memory
  } else {
    if (logits_.numel() < V) logits_ = SpaceArray<float>(be, V, "the logits");
    be.matmul(logits_.tensor({1, V}), xf, w.head, false, true);
    be.copy_to_host(logits.data(), logits_.data(), V * int64_t(sizeof(float)));
  }
  position_ += n;
}

void KvDecoder::prefill(std::span<const int32_t> prompt, std::span<float> logits, int64_t chunk) {
  const int64_t n = int64_t(prompt.size());
  MEMO_CHECK(n > 0 && chunk > 0, "KvDecoder::prefill: ", n, " tokens in chunks of ", chunk);
  if (position_ + n > max_tokens_)
    throw ConfigError(str("generation reached ", position_ + n, " tokens, more than the ",
                          max_tokens_, " the decoder holds"));
  if (cfg_.uses_rope() && cfg_.rope_scaling.depends_on_length()) {
    write_rope_rows(position_, position_ + n, position_ + n);
    rope_written_ = position_ + n;
  }
  for (int64_t at = 0; at < n; at += chunk)
    forward(prompt.subspan(size_t(at), size_t(std::min(n - at, chunk))), logits);
}

void KvDecoder::layer(int l, int64_t n) {
  const int64_t C = cfg_.hidden_size, F = cfg_.intermediate_size;
  const int64_t HD = cfg_.num_attention_heads * cfg_.head_dim(), KV = cfg_.kv_dim();
  const int64_t cache_row = (int64_t(l) * max_tokens_ + position_) * KV;
  DecodeRows r;
  r.x = x_.tensor({n, C});
  r.xn = xn_.tensor({n, C});
  r.h = h_.tensor({n, C});
  r.q = q_.tensor({n, HD});
  r.k = k_cache_.tensor({n, KV}, cache_row);
  r.v = v_cache_.tensor({n, KV}, cache_row);
  r.attn = attn_.tensor({n, HD});
  r.q_raw = qk_raw_.tensor({n, HD});
  r.k_raw = qk_raw_.tensor({n, KV}, n * HD);
  r.q_rstd = qk_rstd_.tensor({n, cfg_.num_attention_heads});
  r.k_rstd = qk_rstd_.tensor({n, cfg_.num_key_value_heads}, n * cfg_.num_attention_heads);
  r.mean = stats_.tensor({n});
  r.rstd = stats_.tensor({n}, n);
  r.mlp_gate = gate_.tensor({n, F});
  r.mlp_in = up_.tensor({n, F});
  r.mlp_act = act_.tensor({n, F});
  if (cfg_.uses_rope()) {
    const int64_t half = cfg_.head_dim() / 2;
    r.rope_cos = rope_cos_.tensor({max_tokens_, half});
    r.rope_sin = rope_sin_.tensor({max_tokens_, half});
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
  const int64_t layer_row = int64_t(l) * max_tokens_ * KV;
  const bool prompt = position_ == 0;  // the training kernel, as Model's forward runs it
  // the decoder's activations are f32 on every backend, bf16 ones too
  const int64_t scratch_numel = prompt ? be.f32_attention_forward_scratch_numel(n, D, H, Hkv)
                                       : be.attention_decode_scratch_numel(keys);
  if (scratch_.numel() < scratch_numel) scratch_ = SpaceArray<float>(be, scratch_numel);
  const Tensor scratch = scratch_.tensor({scratch_numel});
  const ConstTensor k = k_cache_.tensor({keys, KV}, layer_row),
                    v = v_cache_.tensor({keys, KV}, layer_row);
  const int64_t window = cfg_.layer_window(l);  // key j seen by query i for i - window < j
  if (prompt) {
    std::vector<int32_t> key_start;
    if (window > 0 && n > window)
      for (int64_t i = 0; i < n; ++i)
        key_start.push_back(int32_t(std::max<int64_t>(0, i - window + 1)));
    return be.attention_forward(
        attn_.tensor({n, HD}), lse_.tensor({1, H, n}), q_.tensor({n, HD}), k, v, 1, H, Hkv, scratch,
        key_start.empty() ? AttnMask::kCausal
                          : AttnMask::causal_from({key_start.data(), {int64_t(key_start.size())}}));
  }
  if (window == 0 || keys <= window)
    return be.attention_decode(attn_.tensor({n, HD}), q_.tensor({n, HD}), k, v, position_, H, Hkv,
                               scratch);
  // windowed: row by row, each over the keys of its window
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = position_ + i, lo = std::max<int64_t>(0, p - window + 1);
    be.attention_decode(attn_.tensor({n, HD}).slice_rows(i, i + 1),
                        q_.tensor({n, HD}).slice_rows(i, i + 1), k.slice_rows(lo, p + 1),
                        v.slice_rows(lo, p + 1), p - lo, H, Hkv, scratch);
  }
}

}  // namespace memo
