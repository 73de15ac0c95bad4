// Text generation from a checkpoint: the prompt through the KV-cache decoder (model/kv_decoder.h),
// then one token at a time, sampled with temperature, top-k and top-p (nucleus) from a
// counter-based random stream, so a seed gives the same text. Works for byte models (vocabulary
// 256, no tokenizer file) and BPE models (the checkpoint's tokenizer.json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memo/data/tokenizer.h"
#include "memo/model/model.h"

namespace memo {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the smallest set of probability >= top_p; 1: all
  uint64_t seed = 1234;
};

// The ids that end a reply besides the tokenizer's end-of-text, as transformers stops: the
// checkpoint's generation_config.json eos_token_id (an id or a list; Llama 3 Instruct lists
// <|eot_id|>; config.json's where there is no such file), tokenizer_config.json's eos_token, and
// the end-of-turn token memo's messages template closes an assistant turn with (<|im_end|>,
// <|eot_id|>: Note [Loss mask files]), which a model fine-tuned on it learns to emit. Ids outside
// the tokenizer are left out.
std::vector<int32_t> reply_stop_ids(const std::filesystem::path& checkpoint,
                                    const Tokenizer& tokenizer);

// The token drawn from `logits` at generation step `step` (the random draw is a pure function of
// seed and step). Bad options (temperature < 0, top_p outside (0, 1]): ConfigError.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, int64_t step);

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  bool kv_cache = true;             // false: re-run the whole sequence for every token (baseline)
  bool stop_at_end_of_text = true;  // stop when the tokenizer's end-of-text token is drawn
  std::vector<int32_t> stop_ids;    // and when one of these is (reply_stop_ids)
  // Document masks (Note [Document masks] in model/architecture.h; -1: off): the prompt from its
  // last token document_start on, the last document alone, starting at position 0. That is
  // exactly what a model with document masks computes for that document's tokens and those it
  // generates, which see nothing before its start.
  int32_t document_start = -1;
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;  // as run: with document_start, the last document's
  std::vector<int32_t> new_ids;     // without a final end-of-text
  std::string text;                 // decoded new_ids, as a continuation (what --stream prints)
  std::vector<float> first_logits;  // [V] the logits that chose the first new token (ids past
                                    // the tokenizer's vocabulary at -inf)
  double prefill_seconds = 0.0, decode_seconds = 0.0;  // prompt; the rest
};

// Generates after `prompt` (special-token strings in it become their ids; an empty prompt starts
// from end-of-text). Calls on_text with each new token's bytes as it is drawn, if set.
GenerateResult generate(const Model& model, const Tokenizer& tokenizer, std::string_view prompt,
                        const GenerateOptions& options,
                        const std::function<void(std::string_view)>& on_text = {});

// The tokenizer a checkpoint directory was trained with: its tokenizer.json, else the byte
// tokenizer for a vocabulary of 256 or where trainer_state says memo trained it on bytes (a byte
// vocabulary padded past 256: the ids above 255 are never drawn); else DataError saying how to
// supply one. A tokenizer with more ids than the config's vocab_size: ConfigError.
Tokenizer checkpoint_tokenizer(const std::filesystem::path& checkpoint_dir, int64_t vocab_size,
                               const nlohmann::json& trainer_state);
// The same, but nullopt where checkpoint_tokenizer says there is none (memo eval's loss needs no
// tokenizer: a model trained on an llm.c token file has none).
std::optional<Tokenizer> checkpoint_tokenizer_if_any(const std::filesystem::path& checkpoint_dir,
                                                     int64_t vocab_size,
                                                     const nlohmann::json& trainer_state);

}  // namespace memo
