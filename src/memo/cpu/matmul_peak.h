// The machine's peak fp32 matrix-product rate, measured through memo::cpu::matmul: memo's MFU
// denominator. Not a model of the hardware: it is what the BLAS in use reaches on a large square
// product with the threads it has.
#pragma once

namespace memo::cpu {

// Runs square sgemm calls (n = 2048) for about `seconds` (at least 3 calls, the first a warm-up
// not counted) and returns the best rate seen, in FLOP/s (2 n^3 per call). Allocates 48 MiB.
double measure_matmul_peak_flops(double seconds);
// The same for bf16 operands into f32 (cpu::matmul_bf16), where cpu::bf16_products_native().
double measure_bf16_matmul_peak_flops(double seconds);

}  // namespace memo::cpu
