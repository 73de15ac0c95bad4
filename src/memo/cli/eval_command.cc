// memo eval: loss, perplexity and bits per byte of a checkpoint on the validation split.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "memo/cli/commands.h"
#include "memo/cli/runtime.h"
#include "memo/core/error.h"
#include "memo/data/shards.h"
#include "memo/io/checkpoint.h"
#include "memo/train/evaluate.h"
#include "memo/train/generate.h"
#include "memo/train/run_data.h"
#include "memo/train/trainer.h"

namespace memo::cli {

void add_eval_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, data, split = "val";
    int64_t seq = 256, batch = 8, batches = 0;
    double val_fraction = 0.05;
    bool document_mask = false;
    int64_t eot_id = -1;
  };
  auto o = std::make_shared<Options>();
  CLI::App* eval = app.add_subcommand(
      "eval", "Loss, perplexity and bits per byte of a checkpoint on windows read in order");
  eval->add_option("--checkpoint", o->checkpoint, "Checkpoint (or run) directory")->required();
  eval->add_option("--data", o->data,
                   "Data: raw text (bytes), an llm.c token file, a `memo tokenize` folder or a "
                   "glob of shards")
      ->required();
  eval->add_option("--split", o->split,
                   "val: a shard folder's validation shards, else the last --val-fraction of the "
                   "data (as memo train holds it out); all: the whole data")
      ->check(CLI::IsMember({"val", "all"}))
      ->capture_default_str();
  eval->add_option("--val-fraction", o->val_fraction, "Held-out tail when there are no val shards")
      ->capture_default_str();
  eval->add_option("--seq", o->seq, "Tokens per window")->capture_default_str();
  eval->add_option("--batch", o->batch, "Windows per forward")->capture_default_str();
  eval->add_option("--batches", o->batches, "Forwards to average over; 0: every window")
      ->capture_default_str();
  eval->add_flag("--document-mask", o->document_mask,
                 "Attention within each document of a window, positions from 0 at each (as memo "
                 "train --document-mask)");
  eval->add_option("--eot-id", o->eot_id,
                   "The token that starts each document (default: the end-of-text token of the "
                   "data's tokenizer, else of the checkpoint's)");
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*eval, *device);
  eval->callback([o, device] {
    const std::filesystem::path dir = find_latest_checkpoint(o->checkpoint);
    LoadedCheckpoint ckpt = load_checkpoint(dir);
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, nullptr, std::cout);
    Model model(ckpt.config, runtime->backend(), ModelUse::kInference);
    load_model_tensors(model, ckpt.model);
    const Tokenizer tokenizer = checkpoint_tokenizer(dir, ckpt.config.vocab_size);
    const int64_t vocab = ckpt.config.vocab_size;
    if (o->document_mask) {
      const std::optional<int32_t> ckpt_eot = tokenizer.end_of_text();
      const bool data_names_it = o->eot_id >= 0 || !shard_tokenizer_json(o->data).empty();
      model.set_document_mask(
          data_names_it || !ckpt_eot ? document_start_token(o->data, o->eot_id, vocab) : *ckpt_eot);
    }
    const RunDataOptions split{o->data, "", o->val_fraction};  // memo train's split
    const TokenData data =
        o->split == "val" ? load_validation_data(split, vocab) : TokenData::load(o->data, vocab);
    // The progress bar only on a terminal: scripts read one JSON object from the output.
    const EvalReport r = evaluate(model, tokenizer, data, o->seq, o->batch, o->batches,
                                  ::isatty(2) ? &std::cerr : nullptr);
    std::cout << nlohmann::json{{"loss", r.loss},
                                {"perplexity", r.perplexity},
                                {"bits_per_byte", r.bits_per_byte},
                                {"tokens", r.tokens},
                                {"bytes", r.bytes},
                                {"windows", r.windows},
                                {"seq", o->seq},
                                {"data", data.source()}}
                     .dump()
              << "\n";
  });
}

}  // namespace memo::cli
