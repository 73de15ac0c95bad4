// Qwen2 (Hugging Face Qwen2ForCausalLM): the LLaMA layer with biases on the q, k and v projections,
// the tied or untied head of its config; its sliding window (ModelConfig::layer_window, read from
// use_sliding_window, max_window_layers and layer_types in io/config_json.cc) is applied by the
// layers' attention, as Mistral's.
#include "memo/model/llama_layer.h"

namespace memo {

const Architecture& qwen2_architecture() {
  static const std::unique_ptr<Architecture> qwen2 = make_llama_layer("qwen2", true, false);
  return *qwen2;
}

}  // namespace memo
