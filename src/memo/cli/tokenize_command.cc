// memo tokenize: text and JSON lines files into llm.c token shards (data/shards.h).
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "memo/cli/commands.h"
#include "memo/data/shards.h"

namespace memo::cli {

void add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Tokenise text or JSON lines files into llm.c token shards with a manifest");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Folder with encoder.json + vocab.bpe (GPT-2), or a tokenizer.json (or its "
                  "folder)")
      ->required();
  cmd->add_option("--out", o->out_dir, "Output folder (rerun to resume an interrupted run)")
      ->required();
  cmd->add_option("--shard-tokens", o->shard_tokens, "Tokens per shard")->capture_default_str();
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Documents starting in the last X of the input bytes go to val-*.bin shards")
      ->capture_default_str();
  cmd->add_option("--format", o->format,
                  "text: documents to pretrain on; prompt-completion: JSON lines with \"prompt\" "
                  "and \"completion\", or \"messages\", written with a loss mask that counts "
                  "the completions only (see data/shards.h)")
      ->check(CLI::IsMember({kShardTextFormat, kShardPromptCompletionFormat}))
      ->capture_default_str();
  cmd->add_option("inputs", o->inputs,
                  "Files or folders: plain text (one document per file) or *.jsonl / *.json "
                  "(one JSON object per line with a \"text\" field)")
      ->required();
  cmd->callback([o] {
    const TokenizeResult r = tokenize_corpus(*o, std::cerr);
    if (r.already_complete) std::cerr << "tokenize: " << o->out_dir << " is already complete\n";
    std::cout << nlohmann::json{{"out", o->out_dir},
                                {"documents", r.documents},
                                {"train_tokens", r.train_tokens},
                                {"val_tokens", r.val_tokens},
                                {"shards", r.shards},
                                {"text_bytes", r.text_bytes},
                                {"seconds", r.seconds},
                                {"resumed", r.resumed}}
                     .dump()
              << "\n";
  });
}

}  // namespace memo::cli
