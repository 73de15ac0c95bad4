// Each subcommand of `memo` registers its flags and its action on the app; main.cc only parses
// and reports errors. One file per subcommand (train_command.cc, eval_command.cc, ...).
#pragma once

#include <CLI/CLI.hpp>

#include "memo/mpi/mpi_communicator.h"

namespace memo::cli {

// world: the MPI job this process is one rank of (null: not started by mpirun); the command
// builds its runtime over it (cli/runtime.h).
void add_train_command(CLI::App& app, MpiCommunicator* world);
void add_eval_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_lr_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_plot_command(CLI::App& app);

}  // namespace memo::cli
