// memo train's run file: see Note [Run files].
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace memo::cli {

// Note [Run files]
// A run is a long command line; `memo train --run run.toml` takes it from a TOML file instead,
// one key per flag under the section the flag is listed in by `memo train --help` ([data],
// [step], [optimizer], [gradients], [run], [positions], [runtime], [gpu], [layout],
// [activations], [batch-schedule]), named as the flag without its dashes:
//     [step]
//     seq = 4096
//     lr = 3e-4
//     [run]
//     async-save = true
// A flag on the command line wins over the file's key: the file's keys become flags placed
// before the command line's, less those the command line gives (CLI11 reads config files for the
// top-level command only, so the subcommand's arguments are rewritten before parsing). Keys are
// checked before anything runs: an unknown key, a key under another section, a value of the wrong
// TOML type (an integer for an integer flag, a number for a real one, a string for a text one, true
// or false for a switch) or a malformed file is a one-line error that names the key. `memo train
// ... --print-run` prints the flags given, in this format, with every other flag's default as a
// comment, and exits: fed back through --run it gives the same run. Every run writes that text into
// its run directory and each checkpoint (run.toml), so a run can be diffed against another and
// repeated exactly.
//
// The file is parsed by toml++ (Debian's libtomlplusplus-dev). Values reach the flags as text:
// numbers exactly (integers as they are, reals in the fewest digits that read back the same).

// The arguments of the subcommand `cmd` (those after its name) with `--run FILE` replaced by the
// file's keys as flags ("--key=value"), before the others: a key whose flag the arguments give
// is left out (the command line wins). Throws ConfigError naming the file, line and key. No
// --run: the arguments as they are.
std::vector<std::string> with_run_file(const CLI::App& cmd, const std::vector<std::string>& args);

// `cmd`'s flags as given (parsed), as a run file; defaults: the other flags too, as comments
// with their default where --help shows one. What --print-run prints and run.toml holds.
std::string run_file_text(const CLI::App& cmd, bool defaults);

}  // namespace memo::cli
