// memo eval: the mean loss of a checkpoint over windows read in order.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "memo/cli/commands.h"
#include "memo/train/trainer.h"

namespace memo::cli {

void add_eval_command(CLI::App& app) {
  struct Options {
    std::string checkpoint, data;
    int64_t seq = 256, batch = 8, batches = 16;
  };
  auto o = std::make_shared<Options>();
  CLI::App* eval = app.add_subcommand("eval", "Mean loss of a checkpoint on windows read in order");
  eval->add_option("--checkpoint", o->checkpoint, "Checkpoint (or run) directory")->required();
  eval->add_option("--data", o->data, "Data: raw text (bytes) or an llm.c token file")->required();
  eval->add_option("--seq", o->seq, "Tokens per window")->capture_default_str();
  eval->add_option("--batch", o->batch, "Windows per forward")->capture_default_str();
  eval->add_option("--batches", o->batches, "Forwards (micro-batches) to average over")->capture_default_str();
  eval->callback([o] {
    const EvalResult r = evaluate_checkpoint(o->checkpoint, o->data, o->seq, o->batch, o->batches);
    std::cout << nlohmann::json{{"loss", r.mean_loss}, {"tokens", r.tokens}, {"windows", r.windows},
                                {"seq", o->seq}}.dump()
              << "\n";
  });
}

}  // namespace memo::cli
