// What `memo train` is asked to do: the options of a run (TrainOptions, one field per flag of
// cli/train_command.cc) and what it reports (TrainResult). The run itself: train/trainer.h.
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memo/core/dtype.h"
#include "memo/io/safetensors_set.h"
#include "memo/memory/strategy_factory.h"
#include "memo/model/config.h"
#include "memo/scaling/batch_schedule.h"
#include "memo/train/optimizer_setup.h"

namespace memo {

struct TrainOptions {
  std::string config_path;    // model config.json (ignored when resuming: the checkpoint's is used)
  std::string data_path;      // raw text (bytes) or llm.c token file
  std::string val_data_path;  // empty: the last val_fraction of data_path
  double val_fraction = 0.05;
  int64_t seq = 256;        // tokens per sequence
  int64_t batch = 8;        // sequences per optimiser step
  int64_t micro_batch = 0;  // sequences per forward/backward; 0: = batch
  int64_t steps = 100;
  // --seq-schedule (Note [Length stages] in train/step_schedule.h): "SEQ:STEPS,..."; empty: one
  // stage of seq for steps. With it, seq is the first stage's and steps their sum (the session
  // sets both).
  std::string seq_schedule;
  // --stage-batch: what each length stage keeps of the first's: "tokens" per step and per
  // micro-batch (fewer sequences as they grow), or "sequences" (--batch and --micro-batch as
  // given).
  std::string stage_batch = "tokens";
  // --stage-rope "K:JSON" (repeatable): from stage K (1-based) on, these config.json position
  // fields ("rope_theta", "rope_scaling", "max_position_embeddings"), e.g.
  // '2:{"rope_theta": 500000}'. Parsed by stage_positions (train/step_schedule.h).
  std::vector<std::string> stage_rope;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  int64_t warmup = 10;
  // Note [Document masks]: attention within each document of a packed window, positions from 0
  // at each; a document starts at each eot_id token (-1: the data's tokenizer's end-of-text).
  bool document_mask = false;
  int64_t eot_id = -1;
  // --eod-mask-loss: the loss does not count the predictions made from the eot_id tokens
  // (Model::set_eod_loss_mask); with or without document masks.
  bool eod_mask_loss = false;
  double clip = 1.0;          // global gradient norm; 0: off
  OptimizerChoice optimizer;  // name and hyperparameters; AdamW by default
  bool gns = true;            // gradient noise scale, when a step has >= 2 micro-batches
  double gns_decay = 0.99;    // EMA decay per step of the noise-scale estimator
  uint64_t seed = 1234;
  std::string out_dir = "runs/default";
  // --overwrite: a new run may write into an out_dir that holds another run's checkpoints, which
  // it removes first (Note [One run a directory] in train/checkpoints.h)
  bool overwrite = false;
  int64_t save_every = 0;   // 0: only at the end
  bool checkpoints = true;  // false (--no-checkpoint): none at all (benchmarks, dry runs)
  int64_t keep_last = 2;    // checkpoints kept in out_dir, the newest included (0: every one)
  // --save-best: a validation with a lower loss than every one before it writes that step's
  // checkpoint (when the schedule would not) and names it in out_dir/best; --keep-last never
  // removes it.
  bool save_best = false;
  // --async-save: a checkpoint's tensors are copied to pinned host memory at the step boundary
  // and written by a background thread while training goes on (Note [Asynchronous checkpoints]
  // in train/checkpoints.h); the files are the same bytes.
  bool async_save = false;
  // Note [Stopping a run] (train/stop_signals.h): the signals that stop the run after the step in
  // flight with a checkpoint (--exit-signal), and the wall-clock limit that does (--time-limit,
  // seconds; 0: none).
  std::vector<int> exit_signals = {SIGTERM, SIGINT, SIGUSR1};
  double time_limit_s = 0.0;
  // Note [Bad steps] (train/bad_steps.h): steps with a non-finite loss or gradient norm skipped
  // (no update, logged) at most this many in a row before the run stops (--skip-nonfinite; 0: the
  // first stops it), and steps whose gradient norm is above spike_skip times the running median
  // (--spike-skip; 0: off).
  int64_t skip_nonfinite = 0;
  double spike_skip = 0.0;
  std::string resume_dir;  // a run directory or checkpoint to continue from
  // With resume_dir: whether the command line gave --steps and --data. Left out, the run's own
  // are restored (its steps; its data, val_data and val_fraction); given, --steps moves the run's
  // end (the learning-rate schedule follows it) and --data names moved data (Note [Resume]).
  bool steps_given = true;
  bool data_given = true;
  // With resume_dir: the options the checkpoint pins (pinned_options' keys: "seq", "lr", ...) that
  // the command line gave, a value other than the checkpoint's refused, not ignored; and those of
  // run_options ("save_every", "log", ...) it gave, which replace the checkpoint's.
  std::vector<std::string> pinned_given;
  // With resume_dir: take the run_options the command line did not give (pinned_given) from the
  // checkpoint (Note [Resume]). memo train sets it; a library caller's options are all its own.
  bool restore_run_options = false;
  std::string init_from;  // a checkpoint to take the weights from (fresh optimiser)
  // --save-dtype: the checkpoints' model.safetensors in kF32 or kBF16 (with the fp32 master
  // weights beside: Note [Master weights beside bf16] in io/checkpoint.h). None: kBF16 when the
  // weights came from a bf16 checkpoint (--init-from or --resume), else kF32; the session sets it.
  std::optional<DType> save_dtype;
  // --max-shard-size: model tensors past it go into shards. None: a resumed run's, else
  // kDefaultMaxShardBytes (5GB).
  std::optional<int64_t> max_shard_bytes;
  PositionOverrides positions;  // --rope-theta, --rope-scaling, --max-position-embeddings
  std::string log_path;         // JSON lines, one per step
  // Note [Run files] (cli/run_file.h): the flags of this run as a TOML run file, written into
  // out_dir and each checkpoint as run.toml (empty: none, e.g. a run started from the library).
  std::string run_file;
  int64_t val_batches = 16;  // micro-batches of validation windows at the end
  int64_t eval_tokens = 0;   // --eval-tokens: validate on this many tokens instead (0: off)
  int64_t eval_every = 0;    // validation every N steps too (0: at the end only)
  int64_t log_every = 1;     // progress line period in steps
  // --tensorboard: a directory of TensorBoard event files (train/step_logger.h lists the tags);
  // empty: none. A resumed run adds a file beside the earlier ones.
  std::string tensorboard_dir;
  // The device's datasheet peak (dense bf16, FLOP/s; hardware/*.json) and its name: MFU is then
  // also logged against it ("mfu_peak"), beside the matrix-product ceiling measured at start
  // ("mfu"). 0: unknown (the CPU).
  double device_peak_flops = 0;
  std::string device_peak_name;
  // --device-memory: plan the activations into one arena and check the whole device need against
  // this many bytes before step 1 (train/device_plan.h); 0: no budget, the caching allocator.
  int64_t device_memory_bytes = 0;
  bool device_memory_given = false;  // by the flag, not the device's default (a resume keeps it)
  std::string device = "cpu";        // --device, as the run's run_options.json records it
  // --zero 1: shard the optimiser state and update over the data-parallel ranks (train/zero.h);
  // 0: every rank keeps all of it. Not pinned by a checkpoint: a resumed run keeps its own unless
  // given (run_options.json), and resumes on either.
  int zero = 0;
  // --cp C: context parallelism (model/context_parallel.h) over groups of C consecutive ranks; the
  // job's P ranks are P / C data-parallel groups of them. 1: every rank is data parallel.
  int cp = 1;
  // --tp T: tensor + sequence parallelism (Note [Tensor-parallel activations] in
  // model/parallel.h) over groups of T consecutive ranks, inside the context-parallel layout: rank
  // r is tensor-parallel rank r % T, context-parallel rank (r / T) % C, data-parallel rank
  // r / (T C). Checkpoints hold whole tensors, so a run resumes on any layout.
  int tp = 1;
  // --pp P, --virtual-stages V, --pp-layers: pipeline parallelism (Note [Pipeline step] in
  // train/pipeline_step.cc), the outermost split of the job: rank r is pipeline rank
  // r / (N / P) of its pipeline group. The layers split into P V chunks as pp_layers says
  // ("9,8,8,7"), else balanced (parallel/pipeline.h: balance_layers).
  int pp = 1;
  int virtual_stages = 1;
  std::string pp_layers;
  StrategyOptions activations;  // where skeletal activations live (--activations and its flags)
  // --batch-schedule noise (scaling/batch_schedule.h): the controller's own flags (max_batch, 0:
  // 16 x batch; noise_multiple, hysteresis, patience, min_observations, law, law_params); train()
  // fills in seq, micro_batch, batch and the token schedule from the fields above
  // (noise_schedule_options). None: a fixed batch. A resumed run continues the checkpoint's.
  std::optional<scaling::BatchScheduleOptions> batch_schedule;
};

struct TrainResult {
  int64_t steps_done = 0;
  double final_loss = 0.0;
  std::optional<double> val_loss;
  std::string checkpoint;  // the last checkpoint written
  std::string stopped_by;  // why the run stopped before its last step ("SIGTERM", "--time-limit")
};

}  // namespace memo
