#include "memo/train/stop_signals.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <utility>

#include "memo/core/error.h"

namespace memo {
namespace {

// Note [Stopping a run]: the handler's flag. Lock-free and async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int signal) {
  int expected = 0;
  if (!g_received.compare_exchange_strong(expected, signal))
    _exit(128 + signal);  // the second: at once (async-signal-safe)
}

struct Named {
  const char* name;
  int signal;
};
constexpr Named kSignals[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}};

// `how` (SIG_BLOCK, SIG_UNBLOCK) `signals` in every OpenMP worker but the calling thread (thread
// 0 of the region): Note [A signal in oneDNN's sgemm].
void mask_in_openmp_workers(int how, const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
#pragma omp parallel num_threads(omp_get_max_threads())
  if (omp_get_thread_num() != 0) pthread_sigmask(how, &set, nullptr);
}

}  // namespace

StopSignals::StopSignals(std::vector<int> signals)
    : signals_(std::move(signals)), previous_(signals_.size() * sizeof(struct sigaction)) {
  g_received.store(0);
  if (signals_.empty()) return;
  // Note [A signal in oneDNN's sgemm]: the handler's own stack, with room for an AVX-512 frame
  alt_stack_.resize(size_t(std::max<long>(1 << 16, 4 * sysconf(_SC_MINSIGSTKSZ))));
  stack_t stack{};
  stack.ss_sp = alt_stack_.data();
  stack.ss_size = alt_stack_.size();
  stack_t old_stack{};
  if (sigaltstack(&stack, &old_stack) != 0)
    throw Error(str("cannot set a signal stack: ", std::strerror(errno)));
  previous_stack_.resize(sizeof old_stack);
  std::memcpy(previous_stack_.data(), &old_stack, sizeof old_stack);
  mask_in_openmp_workers(SIG_BLOCK, signals_);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_ONSTACK;  // a write or a wait in flight goes on
  for (size_t i = 0; i < signals_.size(); ++i) {
    struct sigaction old {};
    if (sigaction(signals_[i], &action, &old) != 0) {
      const int error = errno;
      restore(i);
      throw Error(str("cannot handle ", signal_name(signals_[i]), ": ", std::strerror(error)));
    }
    std::memcpy(previous_.data() + i * sizeof old, &old, sizeof old);
  }
}

StopSignals::~StopSignals() { restore(signals_.size()); }

void StopSignals::restore(size_t installed) {
  for (size_t i = 0; i < installed; ++i) {
    struct sigaction old {};
    std::memcpy(&old, previous_.data() + i * sizeof old, sizeof old);
    sigaction(signals_[i], &old, nullptr);
  }
  if (!previous_stack_.empty()) {
    mask_in_openmp_workers(SIG_UNBLOCK, signals_);
    stack_t old_stack{};
    std::memcpy(&old_stack, previous_stack_.data(), sizeof old_stack);
    sigaltstack(&old_stack, nullptr);  // SS_DISABLE where there was none
  }
  g_received.store(0);
}

int StopSignals::received() { return g_received.load(); }

std::vector<int> parse_exit_signals(std::string_view text) {
  std::string upper;
  for (char c : text) upper += char(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "NONE") return {};
  std::vector<int> out;
  size_t start = 0;
  while (start <= upper.size()) {
    const size_t comma = upper.find(',', start);
    std::string name =
        upper.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int found = 0;
    for (const Named& n : kSignals)
      if (name == n.name) found = n.signal;
    if (found == 0)
      throw ConfigError(
          str("--exit-signal '", text, "': '", name,
              "' is not one of TERM, INT, USR1, USR2, HUP (comma-separated), or none"));
    out.push_back(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string signal_name(int signal) {
  for (const Named& n : kSignals)
    if (n.signal == signal) return str("SIG", n.name);
  return str("signal ", signal);
}

}  // namespace memo
