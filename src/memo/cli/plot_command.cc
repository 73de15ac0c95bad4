// memo plot: training logs as one SVG (train/log_plot.h).
#include <iostream>
#include <memory>

#include "memo/cli/commands.h"
#include "memo/io/atomic_file.h"
#include "memo/train/log_plot.h"

namespace memo::cli {

void add_plot_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> logs;
    std::string out, title = "memo training";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "Loss, learning rate, throughput and memory of training logs (SVG), runs overlaid");
  cmd->add_option("logs", o->logs, "JSON lines logs of memo train --log")->required();
  cmd->add_option("--out", o->out, "SVG file to write")->required();
  cmd->add_option("--title", o->title, "Title")->capture_default_str();
  cmd->callback([o] {
    std::vector<TrainLog> logs;
    for (const std::string& path : o->logs) logs.push_back(read_train_log(path));
    write_file_atomic(o->out, train_log_svg(logs, o->title));
    std::cerr << "plot: " << o->out << "\n";
  });
}

}  // namespace memo::cli
