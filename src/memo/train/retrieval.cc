// Implementation of train/retrieval.h.
#include "memo/train/retrieval.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "memo/core/error.h"
#include "memo/core/random.h"
#include "memo/model/kv_decoder.h"
#include "memo/train/generate.h"

namespace memo {
namespace {

std::string with_key(std::string sentence, const std::string& key) {
  for (size_t at; (at = sentence.find("{key}")) != std::string::npos;) sentence.replace(at, 5, key);
  return sentence;
}

// n ids of the filler, cycled from index `from`.
void append_filler(std::vector<int32_t>& out, const std::vector<int32_t>& filler, int64_t from,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out.push_back(filler[size_t((from + i) % int64_t(filler.size()))]);
}

}  // namespace

RetrievalTask passkey_task(const Tokenizer& tokenizer) {
  RetrievalTask t;
  t.preamble =
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
      "it. I will quiz you about the important information there.";
  t.filler = tokenizer.encode(
      " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
      "again.",
      TextStart::continued);
  t.key_sentence = " The pass key is {key}. Remember it. {key} is the pass key.";
  t.question = " What is the pass key? The pass key is";
  t.key_digits = 5;
  return t;
}

RetrievalTask needle_task(const Tokenizer& tokenizer, std::string_view haystack) {
  RetrievalTask t;
  t.filler = tokenizer.encode(haystack);
  if (t.filler.empty()) throw ConfigError("--haystack: the file holds no text");
  t.key_sentence = " The special magic number is {key}.";
  t.question = " What is the special magic number? The special magic number is";
  t.key_digits = 7;
  return t;
}

RetrievalPrompt retrieval_prompt(const Tokenizer& tokenizer, const RetrievalTask& task,
                                 int64_t length, double depth, const std::string& key) {
  MEMO_CHECK(depth >= 0.0 && depth <= 1.0 && !task.filler.empty(), "retrieval_prompt: depth ",
             depth, ", ", task.filler.size(), " filler ids");
  const std::vector<int32_t> pre = tokenizer.encode(task.preamble),
                             sentence = tokenizer.encode(with_key(task.key_sentence, key),
                                                         TextStart::continued),
                             question = tokenizer.encode(task.question, TextStart::continued);
  // a prompt begins as the tokenizer's sequences do (Llama's BOS), as memo generate's do
  const std::span<const int32_t> bos = tokenizer.prefix_ids();
  const int64_t fixed = int64_t(bos.size() + pre.size() + sentence.size() + question.size());
  if (length < fixed)
    throw ConfigError(str("--lengths ", length, ": a retrieval prompt needs at least ", fixed,
                          " tokens (", bos.empty() ? "" : "BOS, ",
                          "preamble, key sentence and question)"));
  const int64_t filler = length - fixed, before = std::llround(depth * double(filler));
  RetrievalPrompt p;
  p.key = key;
  p.ids.assign(bos.begin(), bos.end());
  p.ids.insert(p.ids.end(), pre.begin(), pre.end());
  append_filler(p.ids, task.filler, 0, before);
  p.key_position = int64_t(p.ids.size());
  p.ids.insert(p.ids.end(), sentence.begin(), sentence.end());
  append_filler(p.ids, task.filler, before, filler - before);
  p.ids.insert(p.ids.end(), question.begin(), question.end());
  return p;
}

std::string retrieval_key(uint64_t seed, int64_t trial, int64_t key_digits) {
  std::string key;
  for (int64_t i = 0; i < key_digits; ++i) {
    const uint64_t r = mix(seed, uint64_t(trial) * 64 + uint64_t(i));
    key.push_back(char('0' + (i == 0 ? 1 + r % 9 : r % 10)));
  }
  return key;
}

std::string parse_answer(std::string_view answer) {
  const size_t first = answer.find_first_of("0123456789");
  if (first == std::string_view::npos) return "";
  size_t last = first;
  while (last < answer.size() && answer[last] >= '0' && answer[last] <= '9') ++last;
  return std::string(answer.substr(first, last - first));
}

RetrievalReport run_retrieval(const Tokenizer& tokenizer, const RetrievalTask& task,
                              const std::vector<int64_t>& lengths,
                              const std::vector<double>& depths, int64_t trials, uint64_t seed,
                              const AnswerFn& answer) {
  if (lengths.empty() || depths.empty() || trials <= 0)
    throw ConfigError(str("retrieval: ", lengths.size(), " lengths, ", depths.size(),
                          " depths and ", trials, " trials (each must be at least one)"));
  for (double d : depths)
    if (!(d >= 0.0 && d <= 1.0)) throw ConfigError(str("--depths ", d, " must lie in [0, 1]"));
  RetrievalReport r;
  r.lengths = lengths;
  r.depths = depths;
  r.accuracy.assign(lengths.size(), std::vector<double>(depths.size(), 0.0));
  int64_t index = 0;  // keys differ over every trial of the run
  for (size_t l = 0; l < lengths.size(); ++l)
    for (size_t d = 0; d < depths.size(); ++d)
      for (int64_t t = 0; t < trials; ++t, ++index) {
        const RetrievalPrompt p = retrieval_prompt(tokenizer, task, lengths[l], depths[d],
                                                   retrieval_key(seed, index, task.key_digits));
        RetrievalTrial trial{lengths[l], depths[d], p.key, answer(p.ids), "", false};
        trial.parsed = parse_answer(trial.answer);
        trial.correct = trial.parsed == p.key;
        r.accuracy[l][d] += trial.correct ? 1.0 / double(trials) : 0.0;
        r.trials.push_back(std::move(trial));
      }
  return r;
}

std::string greedy_answer(const Model& model, const Tokenizer& tokenizer,
                          std::span<const int32_t> prompt, int64_t max_new_tokens,
                          int64_t prefill_chunk) {
  MEMO_CHECK(!prompt.empty() && max_new_tokens > 0 && prefill_chunk > 0,
             "greedy_answer: ", prompt.size(), " prompt tokens, ", max_new_tokens,
             " new, chunks of ", prefill_chunk);
  KvDecoder decoder(model, int64_t(prompt.size()) + max_new_tokens - 1);  // the last: not fed
  const int64_t V = model.config().vocab_size, known = std::min(V, tokenizer.vocab_size());
  std::vector<float> logits(static_cast<size_t>(V));
  decoder.prefill(prompt, logits, prefill_chunk);
  const std::optional<int32_t> eot = tokenizer.end_of_text();
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    // ids past the tokenizer's vocabulary (a padded vocab_size) are never drawn
    std::fill(logits.begin() + known, logits.end(), -std::numeric_limits<float>::infinity());
    const int32_t id = sample_token(logits, SamplingOptions{0.0, 0, 1.0, 0}, i);
    if (eot && id == *eot) break;
    ids.push_back(id);
    if (i + 1 < max_new_tokens) decoder.forward(std::span<const int32_t>(&id, 1), logits);
  }
  return tokenizer.decode(ids);
}

}  // namespace memo
