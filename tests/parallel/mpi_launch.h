// Shared by the tests that launch memo under mpirun: the launch line, a run's JSON log, and a
// signal to one rank of a running job.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../cli/cli_test_util.h"
#include "memo/io/checkpoint.h"
#include "memo/io/safetensors.h"
#include "test_util.h"

namespace memo::test {

// mpirun as the tests need it: root allowed (CI), more ranks than cores, one thread per rank, no
// leak check of Open MPI's own allocations under AddressSanitizer.
// (Appended in steps: GCC 12 sees a false -Warray-bounds in `"literal" + std::string&&`.)
inline std::string mpirun(int ranks) {
  std::string command =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
      "ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe --bind-to none -np ";
  command += std::to_string(ranks);
  command += ' ';
  return command;
}

inline double relative(double got, double want) { return std::abs(got - want) / std::abs(want); }

// A noise batch schedule that grows a tiny model's batch within a few tens of steps of 32 tokens
// (--warmup 2 --steps 40 at --seq 32 --batch 8 --micro-batch 2 grows it at least once).
inline constexpr const char* kQuickNoiseSchedule =
    " --batch-schedule noise --eps-max 1e-2 --b-noise 2048 --noise-multiple 20 "
    "--noise-min-steps 3 --noise-patience 2 --max-batch 24";

// Largest |a - b| / (1 + |b|) over every tensor of two checkpoints' model.safetensors.
inline double weights_difference(const std::string& run_a, const std::string& run_b) {
  const SafetensorsFile a(find_latest_checkpoint(run_a) / kModelFile);
  const SafetensorsFile b(find_latest_checkpoint(run_b) / kModelFile);
  EXPECT_EQ(a.names(), b.names());
  double worst = 0.0;
  for (const std::string& name : a.names()) {
    std::vector<float> x(static_cast<size_t>(a.numel(name))), y(x.size());
    a.read_into(name, x.data(), a.shape(name));
    b.read_into(name, y.data(), a.shape(name));
    for (size_t i = 0; i < x.size(); ++i)
      worst = std::max(worst, double(std::abs(x[i] - y[i])) / (1.0 + std::abs(y[i])));
  }
  return worst;
}

// Every record of a JSON-lines log, in order.
// The pid of rank `rank` of the job whose command line contains `marker`, or 0.
inline pid_t rank_pid(int rank, const std::string& marker) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline"), env(e.path() / "environ");
    const std::string cmdline((std::istreambuf_iterator<char>(cmd)), {});
    if (cmdline.find(marker) == std::string::npos || cmdline.find("mpirun") == 0) continue;
    const std::string environ((std::istreambuf_iterator<char>(env)), {});
    for (size_t p = 0; p < environ.size(); p = environ.find('\0', p) + 1) {
      if (environ.compare(p, want.size() + 1, want + '\0') == 0) return pid_t(std::stoi(name));
      if (environ.find('\0', p) == std::string::npos) break;
    }
  }
  return 0;
}

// Runs `cmd` in the background; once `ready` exists, sends `signal` to rank 1. Returns the
// command's result and how long it ran after the signal (a job still running 60 s after it is
// killed).
inline std::pair<CommandResult, double> signal_rank_one(const std::string& cmd,
                                                        const std::filesystem::path& ready,
                                                        const std::string& marker, int signal) {
  std::future<CommandResult> job =
      std::async(std::launch::async, [cmd] { return run_command(cmd); });
  pid_t pid = 0;
  for (int i = 0; i < 3000 && pid == 0; ++i) {  // up to 60 s for the job to get going
    if (job.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) break;
    if (std::filesystem::exists(ready)) pid = rank_pid(1, marker);
  }
  EXPECT_NE(pid, 0) << "rank 1 of the job was not found";
  const auto t0 = std::chrono::steady_clock::now();
  if (pid != 0) ::kill(pid, signal);
  if (job.wait_for(std::chrono::seconds(60)) != std::future_status::ready && pid != 0)
    ::kill(pid, SIGKILL);  // the job did not stop by itself: end it so the test can report that
  const CommandResult result = job.get();
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (signal == SIGSTOP && pid != 0) ::kill(pid, SIGKILL);  // whatever is left of it
  return {result, after};
}

}  // namespace memo::test
