// memo::cpu::matmul: a thin wrapper over the BLAS chosen at build time (MEMO_BLAS in
// CMakeLists.txt, measured in bench/matmul_bench.cc). The only place memo calls sgemm; it checks
// shapes and strides on entry and passes row-major views straight through (no copies). Also names
// the library in use and warns when it runs a kernel slower than this CPU allows.

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "memo/backend/checks.h"
#include "memo/backend/view_checks.h"
#include "memo/cpu/kernels.h"

#if defined(MEMO_BLAS_OPENBLAS)
#include <cblas.h>
#elif defined(MEMO_BLAS_DNNL)
#include <dnnl.h>
#else
#error "define MEMO_BLAS_OPENBLAS or MEMO_BLAS_DNNL (CMake option MEMO_BLAS)"
#endif

namespace memo::cpu {
namespace {

// BLAS wants a leading dimension >= max(1, cols) even for one-row views, whose ld() may be
// anything.
template <class T>
int64_t blas_ld(const View<T>& v) {
  return v.rows() <= 1 ? std::max<int64_t>(v.cols(), 1) : v.ld();
}

// The SIMD level of this CPU and of a BLAS kernel: 0 below AVX2, 1 AVX2 + FMA, 2 AVX-512.
int cpu_simd_level() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
  return 0;
}

#if defined(MEMO_BLAS_OPENBLAS)
// OpenBLAS kernels ("corename") by the SIMD level their sgemm uses; anything else (Prescott,
// Nehalem, Sandybridge, Bulldozer, ...) is below AVX2 + FMA.
int openblas_core_level(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == name) return 2;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (core == name) return 1;
  return 0;
}
#else
// dnnl_cpu_isa_t values are bit sets: a level is reached when all its bits are present.
int dnnl_isa_level(dnnl_cpu_isa_t isa) {
  auto has = [isa](dnnl_cpu_isa_t level) { return (int(isa) & int(level)) == int(level); };
  return has(dnnl_cpu_isa_avx512_core) ? 2 : has(dnnl_cpu_isa_avx2) ? 1 : 0;
}
#endif

constexpr const char* kLevelName[] = {"below AVX2", "AVX2+FMA", "AVX-512"};

}  // namespace

void matmul(Tensor c, ConstTensor a, ConstTensor b, bool trans_a, bool trans_b, float alpha,
            float beta) {
  check_matmul(c, a, b, trans_a, trans_b, alpha, beta);
  const int64_t M = c.rows(), N = c.cols();
  const int64_t K = trans_a ? a.rows() : a.cols();
  MEMO_CHECK(std::max({M, N, K, blas_ld(a), blas_ld(b), blas_ld(c)}) <= INT_MAX,
             "matmul: dimensions beyond the 32-bit BLAS interface: c ", c.shape(), " a ", a.shape(),
             " b ", b.shape());
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: c = beta c (dnnl_sgemm rejects K = 0); beta = 0 clears NaNs too
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c(i, j) = beta == 0.0f ? 0.0f : beta * c(i, j);
    return;
  }
#if defined(MEMO_BLAS_OPENBLAS)
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, a.data(),
              int(blas_ld(a)), b.data(), int(blas_ld(b)), beta, c.data(), int(blas_ld(c)));
#else
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, a.data(), blas_ld(a),
                 b.data(), blas_ld(b), beta, c.data(), blas_ld(c));
  MEMO_CHECK(status == dnnl_success, "matmul: dnnl_sgemm failed with status ", int(status),
             " for c ", c.shape(), " a ", a.shape(), " b ", b.shape());
#endif
}

// Note [Token panels]
// The BLAS does not promise that a row of c = a @ b^T has the same bits whatever other rows share
// the call: OpenBLAS 0.3.21 (Zen kernel, 1 or 2 threads) gives a different last bit for about half
// of the rows of a [T - r0, 688] product against the same rows of the [T, 688] product, for every
// r0 tried, 64 and 128 included (its thread split and edge kernels depend on the call's shape).
// The memo strategy rebuilds a token range of q, k, v, h, gate and up before the backward and must
// reproduce the forward bit for bit (DESIGN.md section 6), so those products are always computed
// one panel of kTokenPanelRows rows at a time, panels counted from row 0. A rebuilt range that
// starts on a panel boundary then makes exactly the calls the forward made for those rows. 128
// rows: smaller panels (16 to 64) ran the small model's products 2 to 10x slower on this 2-core
// machine (thread start-up per call); 128 was within noise of one call (bench numbers are noisy).
void matmul_token_panels(Tensor c, ConstTensor a, ConstTensor b, float beta) {
  MEMO_CHECK(c.ndim() == 2 && a.ndim() == 2 && c.rows() == a.rows(), "matmul_token_panels: c ",
             c.shape(), " a ", a.shape(), " (need the same token rows)");
  for (int64_t r0 = 0; r0 < c.rows(); r0 += kTokenPanelRows) {
    const int64_t r1 = std::min(c.rows(), r0 + kTokenPanelRows);
    matmul(c.slice_rows(r0, r1), a.slice_rows(r0, r1), b, false, true, 1.0f, beta);
  }
}

const char* blas_name() {
  static const std::string name = [] {
#if defined(MEMO_BLAS_OPENBLAS)
    return str("OpenBLAS ", openblas_get_corename(), ", ", openblas_get_num_threads(), " threads (",
               openblas_get_config(), ")");
#else
    const dnnl_version_t* v = dnnl_version();
    return str("oneDNN ", v->major, ".", v->minor, ".", v->patch, " sgemm, ",
               kLevelName[dnnl_isa_level(dnnl_get_effective_cpu_isa())], " kernels, ",
               omp_get_max_threads(), " OpenMP threads");
#endif
  }();
  return name.c_str();
}

std::string blas_warning() {
  const int cpu_level = cpu_simd_level();
#if defined(MEMO_BLAS_OPENBLAS)
  const std::string core = openblas_get_corename();
  const int core_level = openblas_core_level(core);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const std::string remedy = forced ? str(" (OPENBLAS_CORETYPE=", forced, " is set: unset it)")
                                    : std::string(" (set OPENBLAS_CORETYPE=Haswell or newer)");
  // A kernel above the CPU's level (only possible when forced) dies with SIGILL in its first
  // sgemm, so this must be printed before any matmul runs.
  if (core_level > cpu_level)
    return str("OpenBLAS runs its ", core, " kernel (", kLevelName[core_level], ") on a CPU with ",
               kLevelName[cpu_level], ": the first matmul will die of an illegal instruction",
               remedy);
  if (core_level < cpu_level)
    return str("OpenBLAS runs its ", core, " kernel (", kLevelName[core_level], ") on a CPU with ",
               kLevelName[cpu_level], "; matmul runs 1.3x to 5x slower (bench/RESULTS.md)", remedy);
  // The pthread build of OpenBLAS keeps its own pool, sized by OPENBLAS_NUM_THREADS, apart from
  // the OpenMP threads of the other kernels.
  if (openblas_get_num_threads() < omp_get_max_threads())
    return str("OpenBLAS uses ", openblas_get_num_threads(),
               " thread(s) but the other kernels use ", omp_get_max_threads(),
               "; matmul is slower than it could be (unset or raise "
               "OPENBLAS_NUM_THREADS)");
#else
  const int isa_level = dnnl_isa_level(dnnl_get_effective_cpu_isa());
  if (isa_level < cpu_level)
    return str("oneDNN runs ", kLevelName[isa_level], " kernels on a CPU with ",
               kLevelName[cpu_level],
               "; matmul may be several times slower (is ONEDNN_MAX_CPU_ISA set? unset it)");
#endif
  return "";
}

}  // namespace memo::cpu
