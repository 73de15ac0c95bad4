#include "memo/train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

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

}  // namespace

StopSignals::StopSignals(std::vector<int> signals)
    : signals_(std::move(signals)), previous_(signals_.size() * sizeof(struct sigaction)) {
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write or a wait in flight goes on
  for (size_t i = 0; i < signals_.size(); ++i) {
    struct sigaction old {};
    if (sigaction(signals_[i], &action, &old) != 0)
      throw Error(str("cannot handle ", signal_name(signals_[i]), ": ", std::strerror(errno)));
    std::memcpy(previous_.data() + i * sizeof old, &old, sizeof old);
  }
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < signals_.size(); ++i) {
    struct sigaction old {};
    std::memcpy(&old, previous_.data() + i * sizeof old, sizeof old);
    sigaction(signals_[i], &old, nullptr);
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
