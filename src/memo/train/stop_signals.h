// Signals that end a run cleanly: see Note [Stopping a run].
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memo {

// Note [Stopping a run]
// A scheduler ends a job with a signal (SIGTERM; SLURM's --signal=USR1@90 some time before its
// limit), and a person with SIGINT. memo train turns each signal of --exit-signal (default TERM,
// INT and USR1) into a request to stop: the step in flight finishes, every rank agrees on the
// step to stop after (one rank's request stops them all after the same step), a checkpoint is
// written and the run exits 0, saying how to continue. A second signal ends the process at once,
// with exit status 128 + the signal. --time-limit makes the same request once the wall time since
// the run began plus 1.5 times its longest step would pass the limit. The handler can only set a
// flag: the one process-wide variable of memo (a signal reaches the process, not an object).
class StopSignals {
 public:
  // Installs the handler for `signals` (signal numbers); none: nothing is installed.
  explicit StopSignals(std::vector<int> signals);
  ~StopSignals();  // restores the handlers that were there before, and forgets a request
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first signal received since the handlers were installed, or 0.
  static int received();

 private:
  std::vector<int> signals_;
  std::vector<char> previous_;  // the sigaction each replaced, as bytes
};

// "TERM,INT,USR1" (with or without SIG, any case) -> signal numbers; "none" -> {}. Throws
// ConfigError naming --exit-signal and the accepted names for anything else.
std::vector<int> parse_exit_signals(std::string_view text);
// "SIGTERM" for SIGTERM, and so on for the accepted names.
std::string signal_name(int signal);

}  // namespace memo
