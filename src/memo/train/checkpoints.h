// The checkpoint manager of `memo train`: what a checkpoint pins and holds (Note [Resume]), where
// a run starts from (a resumed checkpoint, --init-from, or fresh weights), and writing one:
// collective over the job (tensor-parallel parts and ZeRO-1 shards gathered), written by rank 0
// alone, atomically (io/checkpoint.h), the --keep-last newest kept (and --save-best's), in the
// background under --async-save (Note [Asynchronous checkpoints]).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
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
  int64_t run_steps = 0;  // the steps the run was started (or last resumed) with
  std::optional<scaling::BatchSchedule> noise;  // the batch schedule, if the run had one
};
// Null without --resume; else the checkpoint, its pinned options restored into o (Note [Resume]).
std::optional<ResumePoint> resume_point(TrainOptions& o);

// Note [One run a directory]
// A run's --out holds its checkpoints (step-NNNNNNNN, `latest`, `best`), pruned by --keep-last
// and found by --resume through `latest`. A new run written into a folder that holds another's
// would mix the two: `latest` would name the new run's first checkpoint while the other's newer
// steps stay, --keep-last would later remove the other run's checkpoints as the new one passes
// their step numbers, and a kill before the new run's first save would leave `latest` naming
// the other run, which --resume would then continue. So a run writes checkpoints only into a
// folder that holds none, or the run it resumes; else ConfigError naming the newest checkpoint
// found and the ways out, before any output. --overwrite instead removes the other run's
// checkpoints (remove_other_runs_checkpoints, once the run's weights are loaded, so that
// --init-from may name the same folder). A folder that is itself a checkpoint or model (it holds
// model tensors) is refused whatever --overwrite says: its `latest` would make it load the new run.
void check_out_dir(const TrainOptions& o);
// --overwrite: removes out_dir's checkpoints, `latest` and `best` when check_out_dir found
// another run's there (rank 0 only; no-op otherwise). Returns how many checkpoints it removed.
int remove_other_runs_checkpoints(const TrainOptions& o);

// The weights: a resumed checkpoint's (its fp32 master weights where model.safetensors is not
// f32: Note [Master weights beside bf16]; DataError when they are missing), another run's
// (--init-from: its model.safetensors), or a fresh initialisation. Returns the dtype they were
// stored in (LoadedCheckpoint::model_dtype; kF32 for a fresh initialisation). run_config: the
// run's model config before --stage-rope (which `model` may already carry), against which
// --init-from's is checked.
DType start_weights(Model& model, const ModelConfig& run_config, const TrainOptions& o,
                    const std::optional<ResumePoint>& resume);
// The optimiser state, its step count and the noise-scale EMAs of a resumed run.
void restore_training_state(Optimizer& opt, Backend& backend, GradNoiseProbe* probe,
                            const ResumePoint& resume, const TrainOptions& o,
                            const ParamLayout& layout);

// --save-best: the step whose validation loss is the lowest so far, and that loss.
struct BestCheckpoint {
  int64_t step = 0;
  double val_loss = 0.0;
};
// The best of trainer_state.json ("best"), if the run had one.
std::optional<BestCheckpoint> best_checkpoint_from_state(const nlohmann::json& trainer_state);

// What the trainer adds to a checkpoint's trainer_state.json beside the writer's own fields.
struct RunState {
  nlohmann::json bad_steps;  // Note [Bad steps]: BadSteps::state()
  std::optional<BestCheckpoint> best;
  bool is_best = false;  // this checkpoint is the best: <out>/best names it
};

// Host copies of checkpoint tensors that stay allocated from one checkpoint to the next (the same
// sizes in the same order each time): pinned host memory where the backend has it, so that the
// copies at the step boundary run at the link's speed.
class StagingPool {
 public:
  explicit StagingPool(Backend& backend) : backend_(backend) {}
  void rewind() { next_ = 0; }
  float* next(int64_t numel);  // the next block, of numel floats

 private:
  Backend& backend_;
  std::vector<RawBuffer> blocks_;
  size_t next_ = 0;
};

// Note [Asynchronous checkpoints]
// Under --async-save a checkpoint costs the run only its copies: at the step boundary every rank
// takes part in the collective gathers as before and rank 0 copies the weights and optimiser
// state into host memory of its own (a StagingPool, kept from one checkpoint to the next), then a
// background thread serialises and writes the same files as a synchronous save, commits them
// atomically, moves `latest` and removes old ones, while the training steps go on; it runs at
// SCHED_IDLE, so that it takes only the CPU the steps leave. The next save, a stop and the end of
// the run wait for it first (wait(), which gives it the run's own priority back where the system
// lets it), and so does the writer's destructor;
// at most one write is in flight, so the host memory it needs is one copy of the state. A write
// that fails (a full disk, a read-only directory) is found at that wait, on rank 0, and stops
// every rank with rank 0's reason: the committed checkpoints, `latest`'s included, are untouched.
// A process killed during a background write leaves what a kill during a synchronous one leaves:
// the previous checkpoint, which `latest` still names.

// Writes the run's checkpoints. Everything is borrowed and must outlive it.
class CheckpointWriter {
 public:
  // shards: the ZeRO-1 shards of the optimiser state over data_parallel (o.zero == 1); probe:
  // null without a noise scale; job: every rank of the run; pipeline: the pipeline's ranks in
  // stage order under --pp (Note [Pipeline checkpoints]), else null.
  CheckpointWriter(const TrainOptions& o, Model& model, Optimizer& opt,
                   const std::vector<ZeroShard>& shards, Communicator& data_parallel,
                   Communicator& job, const GradNoiseProbe* probe,
                   Communicator* pipeline = nullptr);
  ~CheckpointWriter();  // waits for a background write (its error, if any, is dropped)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The checkpoint after `step`: collective over the job, every rank calls it; rank 0 writes
  // the whole tensors (every data-parallel rank holds the same weights and optimiser state; a
  // tensor-parallel group's parts are gathered on every rank) and returns its directory, the
  // others return an empty string. Synchronous: once it returns the checkpoint is committed on
  // every rank, so a job stopped after this step resumes from it. Under --async-save it returns
  // once the tensors are copied (Note [Asynchronous checkpoints]). A failed write throws
  // DataError on every rank.
  std::string save(const StepSchedule& plan, int64_t step, const RunState& run);
  // Collective: returns once the background write (if any) is committed; throws DataError on
  // every rank if it failed.
  void wait();

 private:
  void finish(int64_t step, const std::string& error);  // collective: every rank learns the outcome
  // The host views of the whole tensors (collective: gathers); under --async-save rank 0's are
  // copies in pool_. Returns what holds the other copies, to keep while they are written.
  std::shared_ptr<void> stage(std::vector<NamedTensor>& weights,
                              std::vector<NamedTensor>& optimizer_state);

  const TrainOptions& o_;
  Model& model_;
  Optimizer& opt_;
  const std::vector<ZeroShard>& shards_;
  Communicator& data_parallel_;
  Communicator& job_;
  const GradNoiseProbe* probe_;
  Communicator* pipeline_;
  StagingPool pool_;                     // --async-save: the host copies
  std::thread background_;               // rank 0's write in flight
  std::string background_error_;         // its failure, read after the join
  std::optional<int64_t> pending_step_;  // every rank: the step whose write is in flight
  // rank 0: the start folder's tokenizer and generation files (side_files_of_origin)
  std::vector<std::pair<std::string, std::string>> origin_files_;
};

// The tokenizer and generation files of the folder a run starts from (--resume's checkpoint or
// --init-from's folder), as (name, contents), for each checkpoint it writes; empty for a fresh
// run. CheckpointWriter reads them once, when it is made.
std::vector<std::pair<std::string, std::string>> side_files_of_origin(const TrainOptions& o);

}  // namespace memo
