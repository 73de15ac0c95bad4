// The LLaMA layer (model/llama.cc) for the architectures that share it: LLaMA itself, and those
// that add to it (Qwen2's q/k/v biases, model/qwen2.cc; Qwen3's q/k norms, model/qwen3.cc). Each
// registers an instance under its name.
#pragma once

#include <memory>
#include <string_view>

#include "memo/model/architecture.h"

namespace memo {

// The layer named `name` (what Architecture::name returns; a literal, it is kept as a view),
// with biases on q_proj, k_proj and v_proj when `qkv_bias` (else as the config's attention_bias
// says), and RMSNorms q_norm and k_norm over each head of q and k before RoPE when `qk_norm`.
std::unique_ptr<Architecture> make_llama_layer(std::string_view name, bool qkv_bias, bool qk_norm);

}  // namespace memo
