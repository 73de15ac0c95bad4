// An SVG (core/svg.h) of training logs (the JSON lines of `memo train --log`): four panels over
// steps, training loss (validation loss as points for records with "val_loss": memo train's last
// step record has it), learning rate, throughput (tokens/s) and activation memory (device peak,
// MiB); several runs overlaid, one colour each, named by file. Same drawing style as
// scaling/sweep_plot.cc. Not a general plotter.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace memo {

struct TrainLog {
  std::string name;                     // legend label (the file's stem)
  std::vector<nlohmann::json> records;  // one per line
};

// Reads a log; a line that is not JSON: FormatError naming the file and line.
TrainLog read_train_log(const std::string& path);

// The SVG document. No step records in any log: DataError.
std::string train_log_svg(const std::vector<TrainLog>& logs, const std::string& title);

}  // namespace memo
