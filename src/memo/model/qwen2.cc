// Qwen2 (Hugging Face Qwen2ForCausalLM): the LLaMA layer with biases on the q, k and v projections,
// the tied or untied head of its config; the sliding window is refused at load (io/config_json.cc).
#include "memo/model/llama_layer.h"

namespace memo {

const Architecture& qwen2_architecture() {
  static const std::unique_ptr<Architecture> qwen2 = make_llama_layer("qwen2", true, false);
  return *qwen2;
}

}  // namespace memo
