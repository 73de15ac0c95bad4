// memo generate: text from a checkpoint, sampled through the KV-cache decoder.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/runtime.h"
#include "memo/core/error.h"
#include "memo/io/checkpoint.h"
#include "memo/train/generate.h"
#include "memo/train/trainer.h"

namespace memo::cli {

void add_generate_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, prompt;
    GenerateOptions generate;
    bool stream = false, no_kv_cache = false, document_mask = false;
    int64_t eot_id = -1;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a checkpoint");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint (or run) directory")->required();
  cmd->add_option("--prompt", o->prompt, "Text to continue (\"\": start from end-of-text)")
      ->required();
  cmd->add_option("--max-new-tokens", o->generate.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temperature", o->generate.sampling.temperature,
                  "Softmax temperature; 0: greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", o->generate.sampling.top_k, "Sample among the k most likely; 0: all")
      ->capture_default_str();
  cmd->add_option("--top-p", o->generate.sampling.top_p,
                  "Sample among the most likely tokens of total probability >= p; 1: all")
      ->capture_default_str();
  cmd->add_option("--seed", o->generate.sampling.seed, "Random seed of the sampler")
      ->capture_default_str()
      ->check(number_check(false));
  cmd->add_flag("--stream", o->stream, "Print each token as it is generated");
  cmd->add_flag("--document-mask", o->document_mask,
                "As a model trained with --document-mask sees it: the prompt's last document "
                "alone (from its last --eot-id token), from position 0");
  cmd->add_option("--eot-id", o->eot_id,
                  "The token that starts each document (default: the tokenizer's BOS where it "
                  "puts one before a sequence, else its end of text)")
      ->check(number_check(false));
  cmd->add_flag("--no-kv-cache", o->no_kv_cache,
                "Re-run the whole sequence for every token (the slow baseline, for comparison)");
  auto device = std::make_shared<RuntimeFlags>();
  add_runtime_flags(*cmd, *device);
  cmd->callback([o, device] {
    if (o->eot_id >= 0 && !o->document_mask)
      throw ConfigError(
          "--eot-id says where documents start for --document-mask; give both, or "
          "neither");
    const std::filesystem::path dir = find_latest_checkpoint(o->checkpoint);
    LoadedCheckpoint ckpt = load_checkpoint(dir, CheckpointUse::kWeights);
    check_config_describes_tensors(ckpt);
    const std::unique_ptr<Runtime> runtime = make_runtime(*device, nullptr, std::cout);
    Model model(ckpt.config, runtime->backend(), ModelUse::kInference);
    load_model_tensors(model, ckpt.model);
    const Tokenizer tokenizer =
        checkpoint_tokenizer(dir, ckpt.config.vocab_size, ckpt.trainer_state);
    o->generate.kv_cache = !o->no_kv_cache;
    o->generate.stop_ids = reply_stop_ids(dir, tokenizer);
    if (o->document_mask) {
      if (o->eot_id >= ckpt.config.vocab_size)  // checked before it narrows to an id
        throw ConfigError(str("--eot-id ", o->eot_id, " lies outside the vocabulary of ",
                              ckpt.config.vocab_size, " ids"));
      const std::optional<int32_t> eot =
          o->eot_id >= 0 ? std::optional<int32_t>(int32_t(o->eot_id)) : tokenizer.document_start();
      if (!eot)
        throw ConfigError(str("--document-mask: ", dir.string(),
                              "'s tokenizer has no end-of-text token; give the token that starts "
                              "each document with --eot-id N"));
      if (*eot >= ckpt.config.vocab_size)
        throw ConfigError(str("--document-mask: the tokenizer's document start ", *eot,
                              " lies outside the vocabulary of ", ckpt.config.vocab_size,
                              " ids; give the token that starts each document with --eot-id N"));
      o->generate.document_start = *eot;
    }
    std::function<void(std::string_view)> on_text;
    if (o->stream)
      on_text = [](std::string_view bytes) {
        std::fwrite(bytes.data(), 1, bytes.size(), stdout);
        std::fflush(stdout);
      };
    const GenerateResult r = generate(model, tokenizer, o->prompt, o->generate, on_text);
    if (!o->stream) std::fwrite(r.text.data(), 1, r.text.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    const double tok_per_s =
        r.decode_seconds > 0 ? double(r.new_ids.size()) / r.decode_seconds : 0.0;
    std::fprintf(stderr,
                 "generate: %zu prompt tokens in %.3f s, %zu new tokens in %.3f s (%.1f tokens/s, "
                 "%s)\n",
                 r.prompt_ids.size(), r.prefill_seconds, r.new_ids.size(), r.decode_seconds,
                 tok_per_s, o->no_kv_cache ? "no KV cache" : "KV cache");
  });
}

}  // namespace memo::cli
