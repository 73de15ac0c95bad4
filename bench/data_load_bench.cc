// Loading token data: memory-mapped (TokenData::load: map, scan every id against the
// vocabulary) against reading the file into memory and widening it to int32 (the loader memo
// had before shards), on one llm.c file of N uint16 tokens written here. Prints load seconds,
// the process's resident and heap growth, and windows per second drawn by the sampler from each.
// Usage: data_load_bench DIR [--tokens 50000000] [--seq 1024]
#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "memo/data/sampler.h"
#include "memo/data/token_data.h"
#include "memo/io/atomic_file.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double rss_mib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return double(resident) * 4096.0 / (1024.0 * 1024.0);
}

double heap_mib() { return double(mallinfo2().uordblks + mallinfo2().hblkhd) / (1024.0 * 1024.0); }

double windows_per_s(const memo::TokenData& data, int64_t seq) {
  const memo::WindowSampler sampler(data, seq, 7);
  std::vector<int32_t> x(size_t(8 * seq)), y(x.size());
  const double t0 = now();
  int64_t steps = 0;
  while (now() - t0 < 1.0) sampler.fill(steps++, 0, x.data(), y.data(), 8);
  return double(steps * 8) / (now() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: data_load_bench DIR [--tokens N] [--seq S]\n");
    return 2;
  }
  int64_t n = 50'000'000, seq = 1024;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) n = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--seq") == 0) seq = std::atoll(argv[i + 1]);
  }
  const std::string path = std::string(argv[1]) + "/data_load_bench.bin";
  {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = int32_t((i * 2654435761u) % 50257);
    memo::write_llmc_tokens(path, tokens);
  }
  malloc_trim(0);
  const int64_t vocab = 50257;
  std::printf("%lld uint16 tokens (%.0f MiB file), seq %lld, page cache warm\n",
              static_cast<long long>(n), double(n) * 2 / (1024.0 * 1024.0),
              static_cast<long long>(seq));
  {
    const double rss0 = rss_mib(), heap0 = heap_mib(), t0 = now();
    const memo::TokenData mapped = memo::TokenData::load(path, vocab);
    const double t = now() - t0;
    std::printf("mmap:          load %.3f s, heap +%.0f MiB, resident +%.0f MiB, %.0f windows/s\n",
                t, heap_mib() - heap0, rss_mib() - rss0, windows_per_s(mapped, seq));
  }
  malloc_trim(0);
  {
    const double rss0 = rss_mib(), heap0 = heap_mib(), t0 = now();
    std::vector<int32_t> tokens;
    {
      const std::string bytes = memo::read_file(path);
      tokens.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, bytes.data() + 1024 + 2 * i, 2);
        tokens[size_t(i)] = v;
      }
    }
    const memo::TokenData in_memory(std::move(tokens), path, vocab);
    const double t = now() - t0;
    std::printf("read + widen:  load %.3f s, heap +%.0f MiB, resident +%.0f MiB, %.0f windows/s\n",
                t, heap_mib() - heap0, rss_mib() - rss0, windows_per_s(in_memory, seq));
  }
  std::remove(path.c_str());
  return 0;
}
