// Tokenizer speed: memo's byte-level BPE on text files, one thread (CPU time of the calling
// thread, so a loaded machine does not count against it) and all threads over documents (wall
// time), plus the ids' checksum so another tokenizer's run on the same text can be compared
// (bench/tokenizer_reference.js runs tiktoken and gpt-3-encoder on the same files).
// Usage: tokenizer_bench TOKENIZER FILE... [--reps N] [--doc-bytes N]
//   TOKENIZER: a folder with encoder.json + vocab.bpe, or a tokenizer.json
//   --doc-bytes: the files are cut at line ends into documents of about N bytes for the
//   multi-threaded run (default 100000)
#include <omp.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memo/data/tokenizer.h"
#include "memo/io/atomic_file.h"

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER FILE... [--reps N] [--doc-bytes N]\n");
    return 2;
  }
  int reps = 3;
  size_t doc_bytes = 100000;
  std::vector<std::string> files;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--doc-bytes") == 0 && i + 1 < argc) {
      doc_bytes = size_t(std::atoll(argv[++i]));
    } else {
      files.push_back(argv[i]);
    }
  }
  const memo::Tokenizer tokenizer = memo::Tokenizer::load(argv[1]);
  std::string text;
  for (const std::string& f : files) text += memo::read_file(f);
  const double mb = double(text.size()) / 1e6;

  // One thread, the whole text as one document; best of reps.
  std::vector<int32_t> ids;
  double best_cpu = 1e30, best_wall = 1e30;
  for (int r = 0; r < reps; ++r) {
    ids.clear();
    const double c0 = thread_cpu_seconds(), w0 = wall_seconds();
    tokenizer.encode(text, ids);
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
    best_wall = std::min(best_wall, wall_seconds() - w0);
  }
  uint64_t checksum = 1469598103934665603ull;  // FNV-1a over the ids
  for (int32_t id : ids) checksum = (checksum ^ uint64_t(uint32_t(id))) * 1099511628211ull;
  std::printf("text: %.2f MB from %zu files, %zu tokens (%.2f bytes/token), ids FNV-1a %016llx\n",
              mb, files.size(), ids.size(), double(text.size()) / double(ids.size()),
              static_cast<unsigned long long>(checksum));
  std::printf("1 thread: %.2f MB/s per CPU second (%.3f s CPU), %.2f MB/s wall, best of %d\n",
              mb / best_cpu, best_cpu, mb / best_wall, reps);

  // All threads over documents cut at line ends.
  std::vector<std::string_view> docs;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', std::min(at + doc_bytes, text.size()));
    end = end == std::string::npos ? text.size() : end + 1;
    docs.push_back(std::string_view(text).substr(at, end - at));
    at = end;
  }
  double best_batch = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double w0 = wall_seconds();
    const auto out = tokenizer.encode_batch(docs);
    best_batch = std::min(best_batch, wall_seconds() - w0);
  }
  std::printf("%d threads, %zu documents: %.2f MB/s wall\n", omp_get_max_threads(), docs.size(),
              mb / best_batch);
  return 0;
}
