// Mistral (Hugging Face MistralForCausalLM): the LLaMA layer; its sliding window (the config's
// sliding_window, on every layer) is applied by the layers' attention (layer_attention_forward in
// model/architecture.cc, with the window for_layer gives the layer), so the layer is LLaMA's.
#include "memo/model/llama_layer.h"

namespace memo {

const Architecture& mistral_architecture() {
  static const std::unique_ptr<Architecture> mistral = make_llama_layer("mistral", false, false);
  return *mistral;
}

}  // namespace memo
