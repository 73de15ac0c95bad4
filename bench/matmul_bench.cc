// Which BLAS should memo::cpu::matmul use? Times OpenBLAS (cblas_sgemm) and oneDNN (dnnl_sgemm)
// in the same run, interleaved, on the products a LLaMA layer makes (forward y = x W^T, backward
// dx = dy W and dW = dy^T x) and on a large square product (the peak). Also checks that repeated
// calls give the same bits, and times each library right after an OpenMP kernel, as in training.
// Usage: matmul_bench [tokens...]   (default 1024 8192); matmul_bench --peak: square products
// only (to compare OPENBLAS_CORETYPE settings); matmul_bench -1: the OpenMP interplay only;
// matmul_bench --bf16-panels [tokens...]: memo's bf16 token panels (Note [Packed weights for
// token panels]) against one 128-row matmul_bf16 call per panel (the way before) and one call
// for all rows, on the forward's per-token products. matmul_bench --bf16-backward [tokens...]:
// the backward's bf16 products (dx and the weights' gradients), a gradient also as two halves of
// its token sum, one a thread.
// Results: bench/RESULTS.md.
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memo/cpu/kernels.h"
#include "memo/cpu/matmul_peak.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kThreads = 2;
// Timed calls per library and shape, interleaved, the best kept: at least kMinReps, more for
// small products until about kMinSeconds per library, since the load from other processes comes
// and goes.
constexpr int kMinReps = 3, kMaxReps = 30;
constexpr double kMinSeconds = 0.3;

enum class Lib { kOpenBlas, kDnnl };

struct Product {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
};

// C[M,N] = op(A) op(B), row-major, contiguous.
void sgemm(Lib lib, const Product& p, const float* a, const float* b, float* c) {
  const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
  if (lib == Lib::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                int(p.M), int(p.N), int(p.K), 1.0f, a, int(lda), b, int(ldb), 0.0f, c, int(p.N));
  } else if (dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, 1.0f, a, lda, b, ldb,
                        0.0f, c, p.N) != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed\n");
    std::exit(1);
  }
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds used by this process. With one thread and no helper threads it is the product's
// compute time, and unlike wall time it hardly moves when other processes share the cores.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

void set_threads(int n) {
  omp_set_num_threads(n);  // oneDNN (OpenMP runtime) and memo's kernels
  openblas_set_num_threads(n);
}

double load_average() {
  double load = -1.0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1.0;
    std::fclose(f);
  }
  return load;
}

struct Buffers {
  std::vector<float> a, b, c, c2;
  explicit Buffers(const Product& p) : a(p.M * p.K), b(p.K * p.N), c(p.M * p.N), c2(p.M * p.N) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 17) - 8) / 8.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 13) - 6) / 6.0f;
  }
};

// Best time of each library over `reps` alternating calls, so that load from other processes
// hits both alike: wall seconds with kThreads threads, or CPU seconds with one thread. Also
// whether each library repeats its own bits.
struct Timing {
  double best_s[2] = {1e300, 1e300};
  bool same_bits[2] = {true, true};
};

Timing time_libs(const Product& p, Buffers& buf, int reps, bool cpu_time) {
  Timing timing;
  for (int rep = 0; rep < reps; ++rep) {
    for (Lib lib : {Lib::kOpenBlas, Lib::kDnnl}) {
      const int l = int(lib);
      sgemm(lib, p, buf.a.data(), buf.b.data(), buf.c2.data());  // reference bits for this lib
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      sgemm(lib, p, buf.a.data(), buf.b.data(), buf.c.data());
      const double s = cpu_time ? process_cpu_seconds() - cpu0 : seconds_since(t0);
      timing.best_s[l] = std::min(timing.best_s[l], s);
      timing.same_bits[l] &=
          std::memcmp(buf.c.data(), buf.c2.data(), buf.c.size() * sizeof(float)) == 0;
    }
  }
  return timing;
}

void time_product(const Product& p) {
  Buffers buf(p);
  const double gflop = 2.0 * double(p.M) * double(p.N) * double(p.K) * 1e-9;
  double first_s = 0.0;
  for (Lib lib : {Lib::kOpenBlas, Lib::kDnnl}) {  // warm-up: thread pools, JIT, page faults
    const auto t0 = Clock::now();
    sgemm(lib, p, buf.a.data(), buf.b.data(), buf.c.data());
    first_s = std::max(first_s, seconds_since(t0));
  }
  const int reps = std::clamp(int(kMinSeconds / first_s), kMinReps, kMaxReps);
  const Timing two = time_libs(p, buf, reps, false);
  set_threads(1);
  const Timing one = time_libs(p, buf, std::max(kMinReps, reps / 2), true);
  set_threads(kThreads);
  std::printf("%-22s %5ld %5ld %5ld  %c%c  %7.1f %7.1f %6.2f  %7.1f %7.1f %6.2f  %s/%s\n", p.what,
              long(p.M), long(p.N), long(p.K), p.ta ? 'T' : 'N', p.tb ? 'T' : 'N',
              gflop / two.best_s[0], gflop / two.best_s[1], two.best_s[0] / two.best_s[1],
              gflop / one.best_s[0], gflop / one.best_s[1], one.best_s[0] / one.best_s[1],
              two.same_bits[0] ? "same" : "DIFF", two.same_bits[1] ? "same" : "DIFF");
  std::fflush(stdout);
}

// An OpenMP kernel (rmsnorm over [M, K]) then the product, repeated, as a training step
// alternates them. A BLAS with its own thread pool (OpenBLAS pthreads) can contend with OpenMP's
// spinning workers on 2 cores, and each pool's idle spinning shows as extra CPU time. Prints wall
// and process CPU milliseconds per pair against the sum of the parts run alone.
void time_after_openmp(const Product& p) {
  Buffers buf(p);
  std::vector<float> y(p.M * p.K), r(p.M), w(p.K, 1.0f);
  memo::View<float> yv(y.data(), {p.M, p.K}), rv(r.data(), {p.M});
  memo::View<const float> xv(buf.a.data(), {p.M, p.K}), wv(w.data(), {p.K});
  auto norm = [&] { memo::cpu::rmsnorm_forward(yv, rv, xv, wv, 1e-5f); };
  struct Best {
    double wall_ms = 1e300, cpu_ms = 1e300;
  };
  constexpr int kInner = 8;  // calls per timed repetition
  auto best_of = [](auto&& f) {
    Best best;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      for (int i = 0; i < kInner; ++i) f();
      best.cpu_ms = std::min(best.cpu_ms, (process_cpu_seconds() - cpu0) * 1e3 / kInner);
      best.wall_ms = std::min(best.wall_ms, seconds_since(t0) * 1e3 / kInner);
    }
    return best;
  };
  norm();
  const Best b_norm = best_of(norm);
  std::printf(
      "after OpenMP: rmsnorm [%ld, %ld] then sgemm %ldx%ldx%ld: wall ms | CPU ms (both "
      "threads) per call\n  rmsnorm alone %7.2f | %7.2f\n",
      long(p.M), long(p.K), long(p.M), long(p.N), long(p.K), b_norm.wall_ms, b_norm.cpu_ms);
  for (Lib lib : {Lib::kOpenBlas, Lib::kDnnl}) {
    auto mm = [&] { sgemm(lib, p, buf.a.data(), buf.b.data(), buf.c.data()); };
    mm();
    const Best b_mm = best_of(mm);
    const Best b_pair = best_of([&] {
      norm();
      mm();
    });
    std::printf(
        "  %-8s sgemm alone %7.2f | %7.2f, rmsnorm + sgemm %7.2f | %7.2f (parts sum "
        "%7.2f | %7.2f)\n",
        lib == Lib::kOpenBlas ? "OpenBLAS" : "oneDNN", b_mm.wall_ms, b_mm.cpu_ms, b_pair.wall_ms,
        b_pair.cpu_ms, b_mm.wall_ms + b_norm.wall_ms, b_mm.cpu_ms + b_norm.cpu_ms);
  }
}

}  // namespace

// n bf16 values in a small repeating pattern (period `period`), exact in bf16.
std::vector<memo::bf16> bf16_pattern(int64_t n, int period) {
  std::vector<memo::bf16> v(static_cast<size_t>(n));
  const int half = period / 2;
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = memo::float_to_bf16(float(int(i % size_t(period)) - half) / float(half));
  return v;
}

// The best wall time of each of `ways` ways of making one product, after a warm-up call of each
// (primitives, thread pools), over kMaxReps rounds that alternate them.
template <class Calls>
std::vector<double> best_of_alternating(int ways, const Calls& calls) {
  std::vector<double> best(static_cast<size_t>(ways), 1e300);
  for (int way = 0; way < ways; ++way) calls(way);
  for (int rep = 0; rep < kMaxReps; ++rep)
    for (int way = 0; way < ways; ++way) {
      const auto t0 = Clock::now();
      calls(way);
      best[size_t(way)] = std::min(best[size_t(way)], seconds_since(t0));
    }
  return best;
}

// memo's bf16 token panels on weights laid out once (matmul_bf16_token_panels) against a
// matmul_bf16 call per 128-row panel (oneDNN lays the weights out in every call) and one call
// over all T rows, alternating, best wall time of each. GFLOP/s and the ratios to the per-panel
// calls.
void time_bf16_panels(const char* what, int64_t T, int64_t N, int64_t K) {
  using memo::bf16;
  const std::vector<bf16> a = bf16_pattern(T * K, 17), b = bf16_pattern(N * K, 13);
  std::vector<float> c(size_t(T * N));
  const memo::ConstTensor av(memo::View<const bf16>(a.data(), {T, K})),
      bv(memo::View<const bf16>(b.data(), {N, K}));
  const memo::Tensor cv(memo::View<float>(c.data(), {T, N}));
  const auto calls = [&](int way) {
    if (way == 0) {
      memo::cpu::matmul_bf16_token_panels(cv, av, bv, true);
    } else if (way == 1) {
      for (int64_t r0 = 0; r0 < T; r0 += memo::cpu::kTokenPanelRows) {
        const int64_t r1 = std::min(T, r0 + memo::cpu::kTokenPanelRows);
        memo::cpu::matmul_bf16(cv.slice_rows(r0, r1), av.slice_rows(r0, r1), bv, false, true);
      }
    } else {
      memo::cpu::matmul_bf16(cv, av, bv, false, true);
    }
  };
  const std::vector<double> best = best_of_alternating(3, calls);
  const double gflop = 2.0 * double(T) * double(N) * double(K) * 1e-9;
  std::printf("%-18s %5ld %5ld %5ld  %8.1f %8.1f %8.1f  %6.2f %6.2f\n", what, long(T), long(N),
              long(K), gflop / best[0], gflop / best[1], gflop / best[2], best[1] / best[0],
              best[1] / best[2]);
  std::fflush(stdout);
}

int bf16_panels(const std::vector<int64_t>& tokens) {
  if (!memo::cpu::bf16_products_native()) {
    std::printf("%s\n", memo::cpu::bf16_products_name());
    return 0;
  }
  std::printf("%s; threads %d, best of %d alternating calls, GFLOP/s\n",
              memo::cpu::bf16_products_name(), kThreads, kMaxReps);
  std::printf("%-18s %5s %5s %5s  %8s %8s %8s  %6s %6s\n", "x W^T", "T", "N", "K", "panels",
              "per-call", "one call", "p/pc", "one/pc");
  for (auto [C, F] : {std::pair<int64_t, int64_t>{256, 688}, {1024, 2752}})
    for (int64_t T : tokens) {
      time_bf16_panels("q, o (C->C)", T, C, C);
      time_bf16_panels("k, v (C->C/2)", T, C / 2, C);
      time_bf16_panels("gate, up (C->F)", T, F, C);
    }
  return 0;
}

// A backward product of bf16 operands, c = op(a) b (a weight's gradient into f32 when trans_a),
// as memo::cpu::matmul_bf16 makes it: one call, and for a gradient also its sum over the tokens
// split in halves, one a thread, added in order (exploring). Best wall time of alternating calls.
void time_bf16_backward(const char* what, int64_t M, int64_t N, int64_t K, bool trans_a) {
  using memo::bf16;
  const std::vector<bf16> a = bf16_pattern(M * K, 17), b = bf16_pattern(K * N, 13);
  std::vector<float> c(size_t(M * N)), part(size_t(2 * M * N));
  const memo::ConstTensor av = trans_a
                                   ? memo::ConstTensor(memo::View<const bf16>(a.data(), {K, M}))
                                   : memo::ConstTensor(memo::View<const bf16>(a.data(), {M, K}));
  const memo::ConstTensor bv(memo::View<const bf16>(b.data(), {K, N}));
  const memo::Tensor cv(memo::View<float>(c.data(), {M, N}));
  const auto calls = [&](int way) {
    if (way == 0) return memo::cpu::matmul_bf16(cv, av, bv, trans_a, false);
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      const int64_t k0 = t * (K / 2), k1 = t == 0 ? K / 2 : K;
      memo::cpu::matmul_bf16(memo::View<float>(part.data() + t * M * N, {M, N}),
                             av.slice_rows(k0, k1), bv.slice_rows(k0, k1), true, false);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t i = 0; i < M * N; ++i) c[size_t(i)] = part[size_t(i)] + part[size_t(M * N + i)];
    }
  };
  const std::vector<double> best = best_of_alternating(trans_a ? 2 : 1, calls);
  const double gflop = 2.0 * double(M) * double(N) * double(K) * 1e-9;
  std::printf("%-24s %5ld %5ld %5ld  %8.1f", what, long(M), long(N), long(K), gflop / best[0]);
  if (trans_a) std::printf(" %8.1f  %6.2f", gflop / best[1], best[0] / best[1]);
  std::printf("\n");
  std::fflush(stdout);
}

int bf16_backward(const std::vector<int64_t>& tokens) {
  if (!memo::cpu::bf16_products_native()) {
    std::printf("%s\n", memo::cpu::bf16_products_name());
    return 0;
  }
  std::printf("%s; threads %d, best of %d alternating calls, GFLOP/s\n",
              memo::cpu::bf16_products_name(), kThreads, kMaxReps);
  std::printf("%-24s %5s %5s %5s  %8s %8s  %6s\n", "product", "M", "N", "K", "one call", "halves",
              "h/one");
  for (auto [C, F] : {std::pair<int64_t, int64_t>{256, 688}, {1024, 2752}})
    for (int64_t T : tokens) {
      time_bf16_backward("dx = dy W (C->F)", T, F, C, false);
      time_bf16_backward("dx = dy W (F->C)", T, C, F, false);
      time_bf16_backward("dx = dy W (C->C)", T, C, C, false);
      time_bf16_backward("dW = dy^T x (CxF)", C, F, T, true);
      time_bf16_backward("dW = dy^T x (FxC)", F, C, T, true);
      time_bf16_backward("dW = dy^T x (CxC)", C, C, T, true);
    }
  return 0;
}

int main(int argc, char** argv) {
  const bool peak_only = argc > 1 && std::strcmp(argv[1], "--peak") == 0;
  const bool panels = argc > 1 && std::strcmp(argv[1], "--bf16-panels") == 0;
  const bool backward = argc > 1 && std::strcmp(argv[1], "--bf16-backward") == 0;
  std::vector<int64_t> tokens;
  for (int i = peak_only || panels || backward ? 2 : 1; i < argc; ++i)
    tokens.push_back(std::atol(argv[i]));
  if (tokens.empty()) tokens = {1024, 8192};
  set_threads(kThreads);
  if (panels) return bf16_panels(tokens);
  if (backward) return bf16_backward(tokens);
  std::printf("load average at start: %.2f\n", load_average());
  const dnnl_version_t* v = dnnl_version();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf(
      "threads %d, best of %d to %d interleaved calls\nOpenBLAS: %s, core %s "
      "(OPENBLAS_CORETYPE=%s)\n"
      "oneDNN %d.%d.%d (max ISA: ONEDNN_MAX_CPU_ISA=%s)\nmemo::cpu::matmul: %s\n",
      kThreads, kMinReps, kMaxReps, openblas_get_config(), openblas_get_corename(),
      coretype ? coretype : "unset", v->major, v->minor, v->patch,
      std::getenv("ONEDNN_MAX_CPU_ISA") ? std::getenv("ONEDNN_MAX_CPU_ISA") : "unset",
      memo::cpu::blas_name());
  const std::string warning = memo::cpu::blas_warning();
  std::printf("blas_warning: %s\n\n", warning.empty() ? "(none)" : warning.c_str());
  std::printf("GFLOP/s: %d threads by wall time | 1 thread by CPU time; ratio: oneDNN / OpenBLAS\n",
              kThreads);
  std::printf("%-22s %5s %5s %5s  op  %7s %7s %6s  %7s %7s %6s  bits\n", "product", "M", "N", "K",
              "OpenBLS", "oneDNN", "ratio", "OpenBLS", "oneDNN", "ratio");
  if (tokens.size() == 1 && tokens[0] < 0) {  // matmul_bench -1: the OpenMP interplay only
    time_after_openmp({"", 1024, 688, 256, false, true});
    time_after_openmp({"", 8192, 1024, 1024, false, true});
    return 0;
  }
  time_product({"peak: square", 2048, 2048, 2048, false, false});
  std::printf("memo::cpu::measure_matmul_peak_flops(2.0): %.1f GFLOP/s\n",
              memo::cpu::measure_matmul_peak_flops(2.0) * 1e-9);
  if (peak_only) return 0;
  time_product({"peak: square", 4096, 4096, 4096, false, false});
  // (C, F) = (256, 688) and (1024, 2752): the widths of memo's small and 1024-wide configs.
  for (auto [C, F] : {std::pair<int64_t, int64_t>{256, 688}, {1024, 2752}}) {
    for (int64_t T : tokens) {
      time_product({"fwd x W^T (C->F)", T, F, C, false, true});
      time_product({"fwd x W^T (F->C)", T, C, F, false, true});
      time_product({"fwd x W^T (C->C)", T, C, C, false, true});
      time_product({"bwd dx = dy W (F->C)", T, C, F, false, false});
      time_product({"bwd dx = dy W (C->F)", T, F, C, false, false});
      time_product({"bwd dW = dy^T x (FxC)", F, C, T, true, false});
      time_product({"bwd dW = dy^T x (CxF)", C, F, T, true, false});
    }
  }
  std::printf("\n");
  time_after_openmp({"", tokens.front(), 688, 256, false, true});
  time_after_openmp({"", tokens.back(), 1024, 1024, false, true});
  std::printf("load average at end: %.2f\n", load_average());
  return 0;
}
