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
//
// Note [A signal in oneDNN's sgemm]
// oneDNN's JIT sgemm kernels (Debian's libdnnl 2.7) point the stack pointer into a heap buffer
// while they run. A handled signal that interrupts one has its frame written below that pointer,
// on the heap: glibc then aborts ("corrupted size vs. prev_size") or the process segfaults, with
// a handler that does nothing (a C program calling only dnnl_sgemm does it too). Measured: 6 of 10
// runs of configs/small.json stopped by SIGUSR1 died so. So the handler runs on an alternate
// signal stack (SA_ONSTACK) of the thread that installs it, and the OpenMP workers, which run
// oneDNN's kernels too, block the stop signals while they are installed: the kernel delivers them
// to a thread that does not block them, the installing one (or a copy or MPI thread, which runs
// no oneDNN code). Test: StopSignals.a_signal_during_sgemm_leaves_the_heap_and_the_products_intact.
class StopSignals {
 public:
  // Installs the handler for `signals` (signal numbers) on an alternate stack of the calling
  // thread, and blocks them in the OpenMP workers (Note [A signal in oneDNN's sgemm]); none:
  // nothing is installed. The calling thread must be the one that runs the OpenMP regions.
  explicit StopSignals(std::vector<int> signals);
  ~StopSignals();  // restores the handlers, stack and masks there before; forgets a request
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first signal received since the handlers were installed, or 0.
  static int received();

 private:
  void restore(size_t installed);  // the first `installed` handlers, the stack and the masks

  std::vector<int> signals_;
  std::vector<char> previous_;        // the sigaction each replaced, as bytes
  std::vector<char> alt_stack_;       // the handler's stack
  std::vector<char> previous_stack_;  // the stack_t it replaced, as bytes
};

// "TERM,INT,USR1" (with or without SIG, any case) -> signal numbers; "none" -> {}. Throws
// ConfigError naming --exit-signal and the accepted names for anything else.
std::vector<int> parse_exit_signals(std::string_view text);
// "SIGTERM" for SIGTERM, and so on for the accepted names.
std::string signal_name(int signal);

}  // namespace memo
