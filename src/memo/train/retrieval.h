// Passkey retrieval and needle-in-a-haystack (memo eval --passkey, --needle): a key sentence
// hidden at a depth of filler text, a question after it, the model's greedy answer parsed for the
// key. The prompts are built in token ids, piece by piece, so each has exactly the length asked
// for and its key at the asked depth; the model reads them through the KV decoder, prefilled in
// chunks (model/kv_decoder.h), so a length costs the cache, not a training step's activations.
// Every piece after the first begins with a space and is encoded as text continuing the one
// before it (TextStart::continued), so the ids at each join are those of the joined text as the
// tokenizer splits words (" The", "▁The"), not a lone space token or a second "▁".
//   passkey (Mohtashami and Jaggi 2023, "Landmark Attention", the form LongLoRA and others use):
//     "There is an important info hidden inside a lot of irrelevant text. Find it and memorize
//     it. I will quiz you about the important information there." + filler " The grass is green.
//     The sky is blue. The sun is yellow. Here we go. There and back again." repeated, with " The
//     pass key is K. Remember it. K is the pass key." at the depth, then " What is the pass key?
//     The pass key is"; K a 5-digit number.
//   needle: the user's haystack text as filler (cycled), " The special magic number is K." at
//     the depth, then " What is the special magic number? The special magic number is"; K 7
//     digits.
// The answer is right when its first run of ASCII digits is K.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memo/data/tokenizer.h"
#include "memo/model/model.h"

namespace memo {

struct RetrievalTask {
  std::string preamble;         // before the filler
  std::vector<int32_t> filler;  // ids, cycled (and cut) to fill the context
  std::string key_sentence;     // with "{key}" where the key goes
  std::string question;         // after the filler
  int64_t key_digits = 5;
};
RetrievalTask passkey_task(const Tokenizer& tokenizer);
// haystack: the text of the user's file; empty, or encoding to no ids: ConfigError.
RetrievalTask needle_task(const Tokenizer& tokenizer, std::string_view haystack);

struct RetrievalPrompt {
  std::vector<int32_t> ids;  // exactly the length asked for
  std::string key;
  int64_t key_position = 0;  // the token where the key sentence starts
};
// The prompt of `length` tokens, the tokenizer's prefix_ids (BOS) first, with the key sentence
// after round(depth * filler tokens) of filler. A length that cannot hold the BOS, preamble, key
// sentence and question: ConfigError
// saying the least length that can.
RetrievalPrompt retrieval_prompt(const Tokenizer& tokenizer, const RetrievalTask& task,
                                 int64_t length, double depth, const std::string& key);

// The key of trial t of seed: key_digits decimal digits, the first not 0.
std::string retrieval_key(uint64_t seed, int64_t trial, int64_t key_digits);
// The first run of ASCII digits in the answer; "" when there is none.
std::string parse_answer(std::string_view answer);

struct RetrievalTrial {
  int64_t length = 0;
  double depth = 0.0;
  std::string key, answer, parsed;
  bool correct = false;
};
struct RetrievalReport {
  std::vector<int64_t> lengths;
  std::vector<double> depths;
  std::vector<std::vector<double>> accuracy;  // [length][depth], fraction of trials right
  std::vector<RetrievalTrial> trials;
};
// answer(prompt ids) -> the model's answer text. Every (length, depth) runs `trials` keys.
using AnswerFn = std::function<std::string(std::span<const int32_t> prompt)>;
RetrievalReport run_retrieval(const Tokenizer& tokenizer, const RetrievalTask& task,
                              const std::vector<int64_t>& lengths,
                              const std::vector<double>& depths, int64_t trials, uint64_t seed,
                              const AnswerFn& answer);

// The greedy answer of `model` after `prompt`: the prompt through the KV decoder in chunks of
// prefill_chunk tokens, then up to max_new_tokens argmax tokens (stopping at end-of-text).
std::string greedy_answer(const Model& model, const Tokenizer& tokenizer,
                          std::span<const int32_t> prompt, int64_t max_new_tokens,
                          int64_t prefill_chunk);

}  // namespace memo
