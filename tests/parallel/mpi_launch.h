// Shared by the tests that launch memo under mpirun: the launch line and a run's JSON log.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace memo::test {

// mpirun as the tests need it: root allowed (CI), more ranks than cores, one thread per rank, no
// leak check of Open MPI's own allocations under AddressSanitizer.
inline std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
         "ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " ";
}

// Every record of a JSON-lines log, in order.
inline std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace memo::test
