// The cuBLASLt loader and the CUDA error checks of the CUDA backend (backend_impl.cuh).
#include <dlfcn.h>

#include "memo/cuda/backend_impl.cuh"

namespace memo {
namespace cuda_impl {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(str("CUDA: ", what, ": ", cudaGetErrorString(e)));
}
void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(str("cuBLASLt: ", what, ": status ", int(s)));
}

// Note [Loading cuBLASLt]
// cuBLASLt is opened when the first CUDA backend starts, not when memo starts: loading it alone
// makes a process resident in ~210 MB (a program that only links it peaks at 212 MB RSS against
// 1.5 MB for libcudart), which every CPU run would otherwise pay. Its functions are called through
// this table, resolved once; a machine without it gets a one-line error for --device cuda only.
// (MEMO_LT_FUNCTIONS, in backend_impl.cuh, lists the functions.)
#define MEMO_STRINGIFY_(x) #x
#define MEMO_STRINGIFY(x) MEMO_STRINGIFY_(x)
const LtApi& lt() {
  static const LtApi api = [] {
    const char* const names[] = {"libcublasLt.so." MEMO_STRINGIFY(CUBLAS_VER_MAJOR),
                                 "libcublasLt.so"};
    void* lib = nullptr;
    for (const char* name : names)
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (!lib)
      throw ConfigError(str("--device cuda: cannot load cuBLASLt (", dlerror(),
                            "); put the CUDA toolkit's library folder on LD_LIBRARY_PATH"));
    LtApi a;
#define MEMO_LT_LOAD(f)                                  \
  a.f = reinterpret_cast<decltype(a.f)>(dlsym(lib, #f)); \
  if (!a.f) throw ConfigError(str("--device cuda: cuBLASLt has no ", #f, " (", dlerror(), ")"));
    MEMO_LT_FUNCTIONS(MEMO_LT_LOAD)
#undef MEMO_LT_LOAD
    return a;
  }();
  return api;
}

}  // namespace cuda_impl

int64_t cublaslt_version() { return int64_t(cuda_impl::lt().cublasLtGetVersion()); }

}  // namespace memo
