// Implementation of train/generate.h.
#include "memo/train/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "memo/core/error.h"
#include "memo/io/checkpoint.h"
#include "memo/io/json_file.h"
#include "memo/model/kv_decoder.h"

namespace memo {
namespace {

using Clock = std::chrono::steady_clock;

// splitmix64's finaliser, as in data/sampler.cc: a bijection with full avalanche.
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, int64_t step) {
  if (!(o.temperature >= 0.0 && std::isfinite(o.temperature)))
    throw ConfigError(str("--temperature ", o.temperature, " must be finite and >= 0 (0: greedy)"));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0))
    throw ConfigError(str("--top-p ", o.top_p, " must lie in (0, 1]"));
  if (o.top_k < 0) throw ConfigError(str("--top-k ", o.top_k, " must be >= 0 (0: all tokens)"));
  const int64_t V = int64_t(logits.size());
  if (o.temperature == 0.0)
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Candidates by falling logit (ties: lower id first), cut by top-k, then by top-p.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] ||
           (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  std::vector<double> p(static_cast<size_t>(keep));
  const double top = double(logits[size_t(order[0])]);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    p[size_t(i)] = std::exp((double(logits[size_t(order[size_t(i)])]) - top) / o.temperature);
    sum += p[size_t(i)];
  }
  if (o.top_p < 1.0) {
    double mass = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      mass += p[size_t(i)] / sum;
      if (mass >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  // u uniform in [0, 1) from 53 random bits of (seed, step)
  const double u = double(mix(mix(o.seed) ^ uint64_t(step)) >> 11) * 0x1.0p-53;
  double acc = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[size_t(i)] / sum;
    if (u < acc) return order[size_t(i)];
  }
  return order[size_t(keep - 1)];  // u within rounding of 1
}

GenerateResult generate(const Model& model, const Tokenizer& tokenizer, std::string_view prompt,
                        const GenerateOptions& o,
                        const std::function<void(std::string_view)>& on_text) {
  if (o.max_new_tokens < 0)
    throw ConfigError(str("--max-new-tokens ", o.max_new_tokens, " must be >= 0"));
  GenerateResult r;
  r.prompt_ids = tokenizer.encode_with_special(prompt);
  const std::optional<int32_t> eot = tokenizer.end_of_text();
  if (r.prompt_ids.empty()) {
    if (!eot)
      throw ConfigError(
          "an empty prompt needs an end-of-text token to start from; this "
          "tokenizer has none, so give --prompt some text");
    r.prompt_ids.push_back(*eot);
  }
  if (o.document_start >= 0) {  // the last document alone
    const auto last = std::find(r.prompt_ids.rbegin(), r.prompt_ids.rend(), o.document_start);
    if (last != r.prompt_ids.rend()) r.prompt_ids.erase(r.prompt_ids.begin(), last.base() - 1);
  }
  const int64_t V = model.config().vocab_size;
  for (size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i] >= V)
      throw DataError(str("prompt token ", i, " has id ", r.prompt_ids[i],
                          ", outside the model's vocabulary of ", V));
  // the positions the decoder holds: the prompt's and every new token's but the last, which is
  // never fed back (a count past the model's positions is refused below before it can overflow)
  const int64_t prompt_tokens = int64_t(r.prompt_ids.size()),
                limit = model.config().max_positions();
  const int64_t total = o.max_new_tokens > limit
                            ? limit + 1
                            : prompt_tokens + std::max<int64_t>(0, o.max_new_tokens - 1);
  KvDecoder decoder(model, std::min(total, limit));
  if (int64_t(r.prompt_ids.size()) > decoder.max_tokens())
    throw ConfigError(str("the prompt's ", r.prompt_ids.size(), " tokens exceed the model's ",
                          limit, " positions; give a prompt of at most ", decoder.max_tokens(),
                          " tokens"));
  if (total > decoder.max_tokens())
    throw ConfigError(
        str("the prompt's ", r.prompt_ids.size(), " tokens plus --max-new-tokens ",
            o.max_new_tokens, " exceed the model's ", limit,
            " positions; use --max-new-tokens <= ", decoder.max_tokens() - prompt_tokens + 1));
  std::vector<int32_t> sequence = r.prompt_ids;
  std::vector<float> logits(static_cast<size_t>(V));
  auto t0 = Clock::now();
  decoder.forward(sequence, logits);
  r.prefill_seconds = seconds_since(t0);
  t0 = Clock::now();
  // A vocabulary padded past the tokenizer's ids (to a multiple of 64, say) has rows no text
  // maps to: they are never drawn.
  const int64_t drawable = std::min(V, tokenizer.vocab_size());
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    std::fill(logits.begin() + drawable, logits.end(), -INFINITY);
    if (step == 0) r.first_logits = logits;
    const int32_t id = sample_token(logits, o.sampling, step);
    if (o.stop_at_end_of_text && eot && id == *eot) break;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end()) break;
    r.new_ids.push_back(id);
    sequence.push_back(id);
    if (on_text) on_text(tokenizer.token_bytes(id));
    if (step + 1 == o.max_new_tokens) break;
    if (o.kv_cache) {
      decoder.forward(std::span<const int32_t>(&id, 1), logits);
    } else {  // the baseline: the whole sequence again, from an empty cache
      decoder.reset();
      decoder.forward(sequence, logits);
    }
  }
  r.decode_seconds = seconds_since(t0);
  r.text = tokenizer.decode(r.new_ids, false);  // a continuation of the prompt, as streamed
  return r;
}

std::vector<int32_t> reply_stop_ids(const std::filesystem::path& checkpoint,
                                    const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  auto add = [&](std::optional<int64_t> id) {
    if (id && *id >= 0 && *id < tokenizer.vocab_size() &&
        std::find(ids.begin(), ids.end(), int32_t(*id)) == ids.end())
      ids.push_back(int32_t(*id));
  };
  // generation_config.json, or where there is none config.json, from which transformers then
  // makes its generation defaults
  std::filesystem::path generation = checkpoint / "generation_config.json";
  if (!std::filesystem::is_regular_file(generation)) generation = checkpoint / "config.json";
  if (std::filesystem::is_regular_file(generation)) {
    const nlohmann::json j = read_json_file<FormatError>(generation);
    const nlohmann::json eos = j.is_object() ? j.value("eos_token_id", nlohmann::json()) : nullptr;
    for (const nlohmann::json& id : eos.is_array() ? eos : nlohmann::json::array({eos}))
      if (id.is_number_integer()) add(id.get<int64_t>());
  }
  add(tokenizer.eos_token());
  for (const char* end_of_turn : {"<|im_end|>", "<|eot_id|>"})
    add(tokenizer.special_id(end_of_turn));
  return ids;
}

std::optional<Tokenizer> checkpoint_tokenizer_if_any(const std::filesystem::path& dir,
                                                     int64_t vocab_size,
                                                     const nlohmann::json& trainer_state) {
  const std::filesystem::path file = dir / kTokenizerFile;
  if (std::filesystem::exists(file)) {
    Tokenizer t = Tokenizer::load(file);
    if (t.vocab_size() > vocab_size)
      throw ConfigError(str(file.string(), " has ", t.vocab_size(),
                            " ids but the model's vocab_size is ", vocab_size));
    return t;
  }
  const bool trained_on_bytes = trainer_state.is_object() &&
                                trainer_state.value(kDataTokenizerKey, nlohmann::json()) == "bytes";
  if (vocab_size == 256 || (trained_on_bytes && vocab_size > 256)) return Tokenizer::bytes();
  return std::nullopt;
}

Tokenizer checkpoint_tokenizer(const std::filesystem::path& dir, int64_t vocab_size,
                               const nlohmann::json& trainer_state) {
  if (std::optional<Tokenizer> t = checkpoint_tokenizer_if_any(dir, vocab_size, trainer_state))
    return std::move(*t);
  throw DataError(str("checkpoint ", dir.string(), " has no ", kTokenizerFile,
                      " and its vocab_size ", vocab_size,
                      " is not a byte model's 256; copy the tokenizer.json it was ",
                      "trained with into it (memo train on `memo tokenize` shards does this)"));
}

}  // namespace memo
