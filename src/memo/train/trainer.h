// The training loop: micro-batch accumulation, global-norm clipping, any optimiser of
// optim/factory.h (AdamW by default) with warm-up and cosine decay, the online gradient noise
// scale (train/grad_noise.h), optionally a batch that grows with it (--batch-schedule noise,
// train/step_schedule.h), progress lines, a JSON log, atomic checkpoints and bit-for-bit
// resume, and a validation loss at the end. Deterministic: the same options give the same losses,
// bit for bit, on the same machine and thread count (windows come from a counter-based sampler,
// kernels use static partitions).
#pragma once

#include "memo/train/checkpoints.h"
#include "memo/train/runtime.h"
#include "memo/train/train_options.h"

namespace memo {

// runtime: where the model runs and the job's processes, which train together, each running the
// same options: with T x C x D ranks, rank r is tensor-parallel rank r % T, context-parallel rank
// (r / T) % C and data-parallel rank r / (T C); data-parallel rank d takes micro-batches
// [d k, (d + 1) k) of every step's k D (the windows of a one-process run), the gradients and the
// loss are summed over the ranks, and rank 0 alone prints (runtime.log()), logs and writes
// checkpoints.
TrainResult train(const TrainOptions& options, Runtime& runtime);

}  // namespace memo
