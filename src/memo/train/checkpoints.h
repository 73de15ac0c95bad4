// The checkpoint manager of `memo train`: what a checkpoint pins and holds (Note [Resume]), where
// a run starts from (a resumed checkpoint, --init-from, or fresh weights), and writing one:
// collective over the job (tensor-parallel parts and ZeRO-1 shards gathered), written by rank 0
// alone, atomically (io/checkpoint.h), the two newest kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memo/io/checkpoint.h"
#include "memo/io/safetensors_set.h"
#include "memo/model/model.h"
#include "memo/optim/optimizer.h"
#include "memo/parallel/communicator.h"
#include "memo/scaling/batch_schedule.h"
#include "memo/train/grad_noise.h"
#include "memo/train/step_schedule.h"
#include "memo/train/train_options.h"
#include "memo/train/zero.h"

namespace memo {

// Copies a checkpoint's model tensors (one file or shards) into `model` (GPT-2 names with or
// without "transformer."). Every parameter must be there with its exact shape, and every tensor of
// the checkpoint must be a parameter or a known Hugging Face buffer (rotary inv_freq, GPT-2's
// attention masks): DataError naming the file and the tensor otherwise, before anything is read.
void load_model_tensors(Model& model, const SafetensorsSet& file);

// The precision a run trains in, as its checkpoint records it: "bf16" where the backend's
// activations are bf16 (mixed precision), else "fp32".
const char* precision_name(const Backend& backend);

// The checkpoint a resumed run continues, with the options it pins restored into o.
struct ResumePoint {
  LoadedCheckpoint checkpoint;
  int64_t step = 0;
  std::optional<scaling::BatchSchedule> noise;  // the batch schedule, if the run had one
};
// Null without --resume; else the checkpoint, its pinned options restored into o (Note [Resume]).
std::optional<ResumePoint> resume_point(TrainOptions& o);

// The weights: a resumed checkpoint's (its fp32 master weights where model.safetensors is not
// f32: Note [Master weights beside bf16]; DataError when they are missing), another run's
// (--init-from: its model.safetensors), or a fresh initialisation. Returns the dtype they were
// stored in (LoadedCheckpoint::model_dtype; kF32 for a fresh initialisation).
DType start_weights(Model& model, const TrainOptions& o, const std::optional<ResumePoint>& resume);
// The optimiser state, its step count and the noise-scale EMAs of a resumed run.
void restore_training_state(Optimizer& opt, Backend& backend, GradNoiseProbe* probe,
                            const ResumePoint& resume, const TrainOptions& o,
                            const ParamLayout& layout);

// Writes the run's checkpoints. Everything is borrowed and must outlive it.
class CheckpointWriter {
 public:
  // shards: the ZeRO-1 shards of the optimiser state over data_parallel (o.zero == 1); probe:
  // null without a noise scale; job: every rank of the run.
  CheckpointWriter(const TrainOptions& o, Model& model, Optimizer& opt,
                   const std::vector<ZeroShard>& shards, Communicator& data_parallel,
                   Communicator& job, const GradNoiseProbe* probe);
  // The checkpoint after `step`: collective over the job, every rank calls it; rank 0 writes
  // the whole tensors (every data-parallel rank holds the same weights and optimiser state; a
  // tensor-parallel group's parts are gathered on every rank) and returns its directory, the
  // others return an empty string once it is committed, so a job stopped after this step
  // resumes from it on every rank.
  std::string save(const StepSchedule& plan, int64_t step);

 private:
  const TrainOptions& o_;
  Model& model_;
  Optimizer& opt_;
  const std::vector<ZeroShard>& shards_;
  Communicator& data_parallel_;
  Communicator& job_;
  const GradNoiseProbe* probe_;
};

}  // namespace memo
