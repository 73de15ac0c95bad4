// Qwen3 (Hugging Face Qwen3ForCausalLM): the LLaMA layer with an RMSNorm over each head of q and
// k before RoPE (self_attn.q_norm, k_norm: weights [head_dim], eps rms_norm_eps), biases on q, k, v
// and o_proj only under attention_bias, an explicit head_dim (default 128); its sliding window is
// Qwen2's (qwen2.cc).
#include "memo/model/llama_layer.h"

namespace memo {

const Architecture& qwen3_architecture() {
  static const std::unique_ptr<Architecture> qwen3 = make_llama_layer("qwen3", false, true);
  return *qwen3;
}

}  // namespace memo
