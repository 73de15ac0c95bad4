// memo eval: loss, perplexity and bits per byte of checkpoints on the validation split; the loss
// by position within the window; passkey retrieval and needle-in-a-haystack (train/retrieval.h).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/position_flags.h"
#include "memo/cli/runtime.h"
#include "memo/core/error.h"
#include "memo/core/units.h"
#include "memo/data/shards.h"
#include "memo/io/atomic_file.h"
#include "memo/io/checkpoint.h"
#include "memo/train/eval_plots.h"
#include "memo/train/evaluate.h"
#include "memo/train/generate.h"
#include "memo/train/retrieval.h"
#include "memo/train/run_data.h"
#include "memo/train/trainer.h"

namespace memo::cli {
namespace {

// --split all: the whole data, a `memo tokenize` folder's training and validation shards both.
TokenData load_all_data(const std::string& path, int64_t vocab) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::path(path) / kShardManifestFile, ec))
    return TokenData::load(path, vocab);
  std::optional<TokenData> all = TokenData::load_split(path, "all", vocab);
  if (!all) throw DataError(str(path, " lists no shards in its ", kShardManifestFile));
  return std::move(*all);
}

struct EvalOptions {
  std::vector<std::string> checkpoints;
  std::string data, split = "val", svg, haystack;
  int64_t seq = 256, batch = 8, batches = 0, by_position = 0;
  double val_fraction = 0.05;
  bool document_mask = false, eod_mask_loss = false, json = false, passkey = false, needle = false;
  int64_t eot_id = -1;
  std::string lengths = "1K,4K", depths = "0,0.25,0.5,0.75,1";
  // the flags of one kind of evaluation, refused by name in the other
  std::vector<const CLI::Option*> loss_only, retrieval_only;
  const CLI::Option* val_fraction_opt = nullptr;
  int64_t trials = 5, prefill_chunk = 4096, max_answer_tokens = 8;
  uint64_t seed = 0;
  PositionFlags positions;  // each checkpoint evaluated with them (a base model past its context)
};

// A comma-separated list's items, the empty ones too ("1K,", ",1K" and "" hold one), so that
// each is checked.
std::vector<std::string> list_items(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    const size_t comma = list.find(',', at);
    out.push_back(list.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

// "1K,4K,16K": 1K = 1024 tokens, 1M = 1024K.
std::vector<int64_t> parse_lengths(const std::string& list) {
  std::vector<int64_t> out;
  for (const std::string& item : list_items(list)) {
    const std::optional<int64_t> v = parse_token_count(item);
    if (!v)
      throw ConfigError(
          str("--lengths ", list, ": '", item, "' is not a positive count (1K = 1024)"));
    out.push_back(*v);
  }
  return out;
}

std::vector<double> parse_depths(const std::string& list) {
  std::vector<double> out;
  for (const std::string& item : list_items(list)) {
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(v >= 0.0 && v <= 1.0))
      throw ConfigError(str("--depths ", list, ": '", item, "' is not a fraction in [0, 1]"));
    out.push_back(v);
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.good()) throw DataError(str("cannot write ", path));
}

struct Loaded {
  std::filesystem::path dir;
  LoadedCheckpoint ckpt;
};

void set_document_mask(Model& model, const Tokenizer* tokenizer, const EvalOptions& o) {
  if (!o.document_mask && !o.eod_mask_loss) return;
  const int32_t ckpt_eot = tokenizer ? tokenizer->end_of_text().value_or(-1) : -1;
  const bool data_names_it = o.eot_id >= 0 || !shard_tokenizer_json(o.data).empty();
  const DocumentTokens t =
      data_names_it || ckpt_eot < 0
          ? document_tokens(o.data, o.eot_id, model.config().vocab_size,
                            o.document_mask ? "--document-mask" : "--eod-mask-loss")
          : DocumentTokens{ckpt_eot, ckpt_eot};
  if (o.document_mask) model.set_document_mask(t.start);
  if (o.eod_mask_loss) model.set_eod_loss_mask(t.end);
}

void print_retrieval(const RetrievalReport& r, const std::string& name, std::ostream& out) {
  out << name << ": accuracy by length (rows, tokens) and depth (columns)\n"
      << "  length";
  char cell[32];
  for (double d : r.depths) std::snprintf(cell, sizeof cell, " %6.2f", d), out << cell;
  out << "\n";
  for (size_t l = 0; l < r.lengths.size(); ++l) {
    std::snprintf(cell, sizeof cell, "%8lld", (long long)r.lengths[l]);
    out << cell;
    for (double a : r.accuracy[l]) std::snprintf(cell, sizeof cell, " %6.2f", a), out << cell;
    out << "\n";
  }
}

nlohmann::json retrieval_json(const RetrievalReport& r) {
  nlohmann::json trials = nlohmann::json::array();
  for (const RetrievalTrial& t : r.trials)
    trials.push_back({{"length", t.length},
                      {"depth", t.depth},
                      {"key", t.key},
                      {"answer", t.answer},
                      {"parsed", t.parsed},
                      {"correct", t.correct}});
  return {
      {"lengths", r.lengths}, {"depths", r.depths}, {"accuracy", r.accuracy}, {"trials", trials}};
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Loss, perplexity and bits per byte of checkpoints on windows read in order; the loss by "
      "position; passkey retrieval and needle-in-a-haystack");
  eval->add_option("--checkpoint", o->checkpoints,
                   "Checkpoint (or run) directory; several overlay their loss by position")
      ->required();
  o->loss_only.push_back(
      eval->add_option("--data", o->data,
                       "Data: raw text (bytes), an llm.c token file, a `memo tokenize` folder or a "
                       "glob of shards (not read by --passkey and --needle)"));
  o->loss_only.push_back(
      eval->add_option(
              "--split", o->split,
              "val: a shard folder's validation shards, else the last --val-fraction of the "
              "data (as memo train holds it out); all: the whole data")
          ->check(CLI::IsMember({"val", "all"}))
          ->capture_default_str());
  o->val_fraction_opt = eval->add_option("--val-fraction", o->val_fraction,
                                         "Held-out tail when there are no val shards")
                            ->capture_default_str();
  o->loss_only.push_back(o->val_fraction_opt);
  o->loss_only.push_back(
      eval->add_option("--seq", o->seq, "Tokens per window")->capture_default_str());
  o->loss_only.push_back(
      eval->add_option("--batch", o->batch, "Windows per forward")->capture_default_str());
  o->loss_only.push_back(
      eval->add_option("--batches", o->batches, "Forwards to average over; 0: every window")
          ->check(number_check(false))
          ->capture_default_str());
  o->loss_only.push_back(eval->add_flag(
      "--document-mask", o->document_mask,
      "Attention within each document of a window, positions from 0 at each (as memo "
      "train --document-mask)"));
  o->loss_only.push_back(
      eval->add_option("--eot-id", o->eot_id,
                       "The token that starts each document and ends the one before (default: "
                       "as memo train --eot-id, else the checkpoint tokenizer's end of text)")
          ->check(number_check(false)));
  o->loss_only.push_back(
      eval->add_flag("--eod-mask-loss", o->eod_mask_loss,
                     "The loss leaves out the predictions made from each end-of-text (or "
                     "--eot-id) token (as memo train --eod-mask-loss)"));
  o->loss_only.push_back(
      eval->add_option(
              "--by-position", o->by_position,
              "Also the loss by position within the window, in buckets of this many tokens")
          ->check(number_check(true)));
  eval->add_flag("--passkey", o->passkey,
                 "Passkey retrieval: a number hidden in filler text, asked for at the end");
  eval->add_flag(
      "--needle", o->needle,
      "Needle in a haystack: a number hidden in --haystack's text, asked for at the end");
  o->retrieval_only.push_back(
      eval->add_option("--haystack", o->haystack, "The text file --needle hides its number in"));
  o->retrieval_only.push_back(
      eval->add_option("--lengths", o->lengths, "Retrieval prompt lengths in tokens (1K = 1024)")
          ->capture_default_str());
  o->retrieval_only.push_back(
      eval->add_option("--depths", o->depths,
                       "Where the key sits, as fractions of the filler before it")
          ->capture_default_str());
  o->retrieval_only.push_back(eval->add_option("--trials", o->trials, "Keys per length and depth")
                                  ->capture_default_str()
                                  ->check(number_check(true)));
  o->retrieval_only.push_back(eval->add_option("--seed", o->seed, "Seed of the keys")
                                  ->capture_default_str()
                                  ->check(number_check(false)));
  o->retrieval_only.push_back(
      eval->add_option(
              "--prefill-chunk", o->prefill_chunk,
              "Prompt tokens per KV-decoder forward (bounds the attention's working memory)")
          ->capture_default_str()
          ->check(number_check(true)));
  o->retrieval_only.push_back(eval->add_option("--max-answer-tokens", o->max_answer_tokens,
                                               "Greedy tokens generated for an answer")
                                  ->capture_default_str()
                                  ->check(number_check(true)));
  eval->add_option("--svg", o->svg,
                   "Write the loss by position (checkpoints overlaid) or the retrieval heatmap");
  eval->add_flag("--json", o->json, "One JSON object per checkpoint instead of tables");
  add_position_flags(*eval, o->positions, "Evaluate each checkpoint with");
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*eval, *device);
  eval->callback([o, device] {
    const bool retrieval = o->passkey || o->needle;
    if (o->passkey && o->needle) throw ConfigError("--passkey and --needle: one at a time");
    if (retrieval && o->checkpoints.size() != 1)
      throw ConfigError("--passkey and --needle take one --checkpoint");
    if (o->needle && o->haystack.empty()) throw ConfigError("--needle needs --haystack FILE");
    for (const CLI::Option* flag : retrieval ? o->loss_only : o->retrieval_only)
      if (flag->count() > 0)
        throw ConfigError(str(flag->get_name(), retrieval
                                                    ? " applies to the loss evaluation, not to "
                                                      "--passkey or --needle"
                                                    : " applies to --passkey and --needle"));
    if (o->passkey && !o->haystack.empty())
      throw ConfigError("--haystack applies to --needle; --passkey hides its key in fixed filler");
    if (!retrieval && o->data.empty()) throw ConfigError("memo eval needs --data");
    if (o->split == "all" && o->val_fraction_opt->count() > 0)
      throw ConfigError(
          "--val-fraction says what --split val holds out; --split all reads the "
          "whole data");
    if (!o->svg.empty() && !retrieval && o->by_position <= 0)
      throw ConfigError("--svg draws the loss by position (--by-position N) or a retrieval");
    const PositionOverrides positions = resolve_position_flags(o->positions);
    // checked before any checkpoint is read
    const std::vector<int64_t> lengths =
        retrieval ? parse_lengths(o->lengths) : std::vector<int64_t>();
    const std::vector<double> depths = retrieval ? parse_depths(o->depths) : std::vector<double>();
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, nullptr, std::cout);
    std::vector<PositionCurve> curves;
    for (const std::string& path : o->checkpoints) {
      const std::filesystem::path dir = find_latest_checkpoint(path);
      LoadedCheckpoint ckpt = load_checkpoint(dir, CheckpointUse::kWeights);
      check_config_describes_tensors(ckpt);
      Model model(ckpt.config, runtime->backend(), ModelUse::kInference);
      load_model_tensors(model, ckpt.model);
      model.set_positions(positions, str("--checkpoint ", path));
      const ModelConfig& config = model.config();
      // the positions a checkpoint was trained on bound what it is asked; a RoPE model may be
      // asked past them (how a base model fails past its context) with the position flags
      const std::string past =
          str(" of --checkpoint ", path, positions.any() ? " with the position flags" : "",
              config.uses_rope() && !positions.max_position_embeddings
                  ? "; --max-position-embeddings N evaluates it with more positions than it "
                    "was trained on"
                  : "");
      // the loss needs no tokenizer: without one, no bits per byte
      const std::optional<Tokenizer> known =
          checkpoint_tokenizer_if_any(dir, ckpt.config.vocab_size, ckpt.trainer_state);
      if (retrieval) {
        const Tokenizer tokenizer =
            checkpoint_tokenizer(dir, ckpt.config.vocab_size, ckpt.trainer_state);
        const RetrievalTask task =
            o->passkey ? passkey_task(tokenizer) : needle_task(tokenizer, read_file(o->haystack));
        // the last answer token is never fed back: l + max_answer_tokens - 1 positions
        // (compared so that no sum overflows)
        for (int64_t l : lengths)
          if (o->max_answer_tokens - 1 > config.max_positions() - l)
            throw ConfigError(str("--lengths ", l, " and ", o->max_answer_tokens,
                                  " answer tokens exceed the model's ", config.positions_limit(),
                                  ": a prompt of L tokens answers in L + --max-answer-tokens - 1 "
                                  "positions",
                                  past));
        const RetrievalReport r =
            run_retrieval(tokenizer, task, lengths, depths, o->trials, o->seed,
                          [&](std::span<const int32_t> prompt) {
                            return greedy_answer(model, tokenizer, prompt, o->max_answer_tokens,
                                                 o->prefill_chunk);
                          });
        if (o->json) {
          nlohmann::json j = retrieval_json(r);
          j["task"] = o->passkey ? "passkey" : "needle";
          j["checkpoint"] = dir.string();
          // a byte model's answer may be invalid UTF-8: U+FFFD in its place
          std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
          print_retrieval(r, dir.string(), std::cout);
        }
        if (!o->svg.empty())
          write_file(o->svg, retrieval_heatmap_svg(r.lengths, r.depths, r.accuracy,
                                                   str(o->passkey ? "passkey" : "needle",
                                                       " retrieval: ", dir.string())));
        return;
      }
      const Tokenizer* tokenizer = known ? &*known : nullptr;
      if (tokenizer)
        check_data_tokenizer(*tokenizer, str("checkpoint ", dir.string()), o->data, "--data");
      set_document_mask(model, tokenizer, *o);
      const int64_t vocab = ckpt.config.vocab_size;
      const RunDataOptions split{o->data, "", o->val_fraction};  // memo train's split
      const TokenData data =
          o->split == "val" ? load_validation_data(split, vocab) : load_all_data(o->data, vocab);
      if (o->eot_id >= 0 && !o->document_mask && !o->eod_mask_loss && !data.has_loss_mask())
        throw ConfigError(
            "--eot-id says where documents start for --document-mask, --eod-mask-loss or "
            "prompt-completion data; give one of them");
      // prompt-completion examples are packed: they must not see each other
      if (data.has_loss_mask() && model.document_mask() < 0)
        model.set_document_mask(
            document_tokens(o->data, o->eot_id, vocab, "prompt-completion data").start);
      if (o->seq > config.max_positions())
        throw ConfigError(str("--seq ", o->seq, " exceeds ", config.positions_limit(), past));
      // The progress bar only on a terminal: scripts read one JSON object from the output.
      const EvalReport r = evaluate(model, tokenizer, data, o->seq, o->batch, o->batches,
                                    ::isatty(2) ? &std::cerr : nullptr, o->by_position);
      nlohmann::json j{
          {"loss", r.loss},
          {"perplexity", r.perplexity},
          {"bits_per_byte", r.bits_per_byte ? nlohmann::json(*r.bits_per_byte) : nlohmann::json()},
          {"tokens", r.tokens},
          {"bytes", r.bytes},
          {"windows", r.windows},
          {"seq", o->seq},
          {"data", data.source()}};
      if (o->checkpoints.size() > 1) j["checkpoint"] = dir.string();
      if (o->by_position > 0) {
        nlohmann::json buckets = nlohmann::json::array();
        for (const PositionLoss& b : r.by_position)
          buckets.push_back(  // a bucket that counts no token has no loss: null
              {{"from", b.from},
               {"to", b.to},
               {"tokens", b.tokens},
               {"loss", b.tokens > 0 ? nlohmann::json(b.loss) : nlohmann::json()},
               {"perplexity", b.tokens > 0 ? nlohmann::json(std::exp(b.loss)) : nlohmann::json()}});
        j["by_position"] = buckets;
        curves.push_back({dir.string(), r.by_position});
      }
      if (o->by_position > 0 && !o->json) {
        std::cout << dir.string() << ": loss " << r.loss << " over " << r.tokens
                  << " tokens; by position:\n";
        char line[96];
        std::snprintf(line, sizeof line, "%10s %10s %10s %10s %12s\n", "from", "to", "tokens",
                      "loss", "perplexity");
        std::cout << line;
        for (const PositionLoss& b : r.by_position) {
          if (b.tokens > 0)
            std::snprintf(line, sizeof line, "%10lld %10lld %10lld %10.4f %12.3f\n",
                          (long long)b.from, (long long)b.to, (long long)b.tokens, b.loss,
                          std::exp(b.loss));
          else  // no token counted here: no loss
            std::snprintf(line, sizeof line, "%10lld %10lld %10lld %10s %12s\n", (long long)b.from,
                          (long long)b.to, 0LL, "-", "-");
          std::cout << line;
        }
      } else {
        std::cout << j.dump() << "\n";
      }
    }
    if (!o->svg.empty()) write_file(o->svg, loss_by_position_svg(curves, "loss by position"));
  });
}

}  // namespace memo::cli
