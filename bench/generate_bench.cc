// Generation speed with and without the KV cache (train/generate.h): greedy tokens per second
// after a short prompt, at several generated lengths, for a randomly initialised model of the
// given config. Times are process CPU seconds (getrusage), so a loaded machine does not count
// against them; run with OMP_NUM_THREADS=1 for a per-core figure.
// Usage: generate_bench CONFIG [--lengths 64,256,1024] [--prompt-tokens 16]
#include <omp.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "memo/cpu/cpu_backend.h"
#include "memo/data/tokenizer.h"
#include "memo/io/config_json.h"
#include "memo/model/model.h"
#include "memo/train/generate.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: generate_bench CONFIG [--lengths 64,256,1024]\n");
    return 2;
  }
  std::vector<int64_t> lengths = {64, 256, 1024};
  int64_t prompt_tokens = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--lengths") == 0) {
      lengths.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string t; std::getline(ss, t, ',');) lengths.push_back(std::atoll(t.c_str()));
    } else if (std::strcmp(argv[i], "--prompt-tokens") == 0) {
      prompt_tokens = std::atoll(argv[i + 1]);
    }
  }
  memo::ModelConfig config = memo::load_model_config(argv[1]);
  memo::Model model(config, memo::cpu_backend());
  model.init(1);
  // A byte-level stand-in tokenizer: the ids are what is timed, not their text.
  const memo::Tokenizer bytes = memo::Tokenizer::bytes();
  const std::string prompt(size_t(prompt_tokens), 'a');
  std::printf("%s: %lld layers, hidden %lld, vocab %lld; %d threads; prompt %lld tokens\n", argv[1],
              static_cast<long long>(config.num_hidden_layers),
              static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
              omp_get_max_threads(), static_cast<long long>(prompt_tokens));
  std::printf("%8s %14s %14s %8s\n", "new", "cache tok/s", "no-cache tok/s", "ratio");
  for (int64_t n : lengths) {
    memo::GenerateOptions o;
    o.max_new_tokens = n;
    o.sampling.temperature = 0.0;
    o.stop_at_end_of_text = false;
    double rate[2];
    for (int cached = 1; cached >= 0; --cached) {
      o.kv_cache = cached == 1;
      const double c0 = cpu_seconds();
      const memo::GenerateResult r = memo::generate(model, bytes, prompt, o);
      rate[cached] = double(r.new_ids.size()) / (cpu_seconds() - c0);
    }
    std::printf("%8lld %14.1f %14.1f %7.1fx\n", static_cast<long long>(n), rate[1], rate[0],
                rate[1] / rate[0]);
  }
  return 0;
}
