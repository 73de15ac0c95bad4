// The `memo` command: parses, validates and reports; the work is in the library. Each
// subcommand lives in its own file (cli/commands.h).
#include <utf8proc.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "memo/cli/commands.h"
#include "memo/cli/number_check.h"
#include "memo/cli/run_file.h"
#include "memo/core/error.h"
#include "memo/mpi/mpi_communicator.h"

namespace {

// The one line of an error. The standard library's filesystem errors read "filesystem error:
// cannot create directories: Invalid argument [/proc/x]"; memo says "cannot create directories
// /proc/x: Invalid argument", as its own errors name what failed first.
std::string error_text(const std::exception& e) {
  const auto* fe = dynamic_cast<const std::filesystem::filesystem_error*>(&e);
  if (!fe) return e.what();
  std::string what = fe->what();
  const std::string prefix = "filesystem error: ";
  if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
  const size_t colon = what.find(": ");
  const std::string op = colon == std::string::npos ? what : what.substr(0, colon);
  std::string paths = fe->path1().empty() ? "''" : fe->path1().string();
  if (!fe->path2().empty()) paths += " -> " + fe->path2().string();
  return memo::str(op, " ", paths, ": ", fe->code().message());
}

// A message as one printable line: line feeds and tabs become spaces, and bytes that are not
// UTF-8 (a damaged file's text quoted by a parser) and other control characters \xNN, so the
// terminal and a log reader see what was there.
std::string one_line(const std::string& text) {
  std::string out;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto n = utf8proc_ssize_t(text.size());
  for (utf8proc_ssize_t i = 0; i < n;) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(bytes + i, n - i, &c);
    if (len > 0 && c >= 0x20 && c != 0x7F) {
      out.append(text, size_t(i), size_t(len));
      i += len;
      continue;
    }
    if (len > 0 && (c == '\n' || c == '\t')) {
      out += ' ';
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", unsigned(bytes[i]));
      out += hex;
    }
    ++i;
  }
  return out;
}

void report(const char* format, const std::string& text) {
  std::fprintf(stderr, format, one_line(text).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // A file past the file-size limit (ulimit -f) fails its write with EFBIG, which memo reports
  // naming the file, instead of SIGXFSZ killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  // Under mpirun every rank runs this same command. The world outlives every subcommand, so a rank
  // that fails takes the job down (abort_job_if_parallel) before MPI is finalised.
  std::unique_ptr<memo::MpiCommunicator> world;
  try {
    if (memo::MpiCommunicator::launched_by_mpirun()) world = memo::MpiCommunicator::world();
  } catch (const std::exception& e) {
    report("memo: error: %s\n", e.what());
    return 1;
  }
  CLI::App app{
      "memo: train decoder-only language models (LLaMA, Qwen2, Qwen3, Mistral, GPT-2) on long "
      "sequences within a memory budget"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Every subcommand's flags");
  // A flag given twice takes its last value, as shell wrappers that append flags expect.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  memo::cli::add_train_command(app, world.get());
  memo::cli::add_eval_command(app);
  memo::cli::add_bench_command(app);
  memo::cli::add_plan_command(app);
  memo::cli::add_sweep_command(app);
  memo::cli::add_fit_command(app);
  memo::cli::add_lr_command(app);
  memo::cli::add_tokenize_command(app);
  memo::cli::add_generate_command(app);
  memo::cli::add_plot_command(app);
  memo::cli::refuse_empty_numbers(app);
  // memo train --run FILE: the file's keys become flags before the command line's (Note [Run
  // files]); the rewritten arguments are kept alive here for argv.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> rewritten;
  try {
    if (argc > 1 && args[1] == "train") {
      std::vector<std::string> train(args.begin() + 2, args.end());
      train = memo::cli::with_run_file(*app.get_subcommand("train"), train);
      args.resize(2);
      args.insert(args.end(), train.begin(), train.end());
      for (std::string& a : args) rewritten.push_back(a.data());
      argc = int(rewritten.size());
      argv = rewritten.data();
    }
  } catch (const std::exception& e) {
    report("memo: error: %s\n", e.what());
    return 1;
  }
  // Only memo train shares its work over ranks: another command under mpirun would run whole on
  // every rank (a sweep's rows written N times, N tokenize runs racing in one folder).
  const bool a_command =
      args.size() > 1 &&
      !app.get_subcommands([&](const CLI::App* c) { return c->get_name() == args[1]; }).empty();
  if (world && world->size() > 1 && a_command && args[1] != "train") {
    if (world->rank() == 0)
      report("memo: error: %s\n",
             memo::str("memo ", args[1], " runs as one process; of the commands only memo train ",
                       "runs under mpirun (", world->size(), " ranks here)"));
    return 1;
  }
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's action
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    report("memo: error: %s (see memo --help)\n", msg);
    return 2;
  } catch (const memo::JobError& e) {  // every rank stops here: each reports, none aborts
    report("memo: error: %s\n", memo::str("rank ", world ? world->rank() : 0, " of ",
                                          world ? world->size() : 1, ": ", e.what()));
    return 1;
  } catch (const std::exception& e) {
    if (world && world->size() > 1)
      report("memo: error: %s\n",
             memo::str("rank ", world->rank(), " of ", world->size(), ": ", error_text(e)));
    else
      report("memo: error: %s\n", error_text(e));
    memo::abort_job_if_parallel(1);
    return 1;
  }
  return 0;
}
