// A checkpoint is a directory, written atomically as a whole (see Note [Atomic directory commit]):
//   model.safetensors       caller-named tensors (Hugging Face Llama names) in f32 or bf16,
//                           metadata format=pt; or, past the shard size, Hugging Face shards plus
//                           model.safetensors.index.json (io/safetensors_set.h)
//   model.fp32.safetensors  the same tensors in f32 when model.safetensors is bf16 (Note [Master
//                           weights beside bf16])
//   config.json             the ModelConfig, torch_dtype naming the model tensors' dtype
//   optimizer.safetensors   caller-named optimizer tensors; only when there are any
//   trainer_state.json      caller JSON (step, data position, seed, ...); only when not null
//   tokenizer.json          the Hugging Face tokenizer of the training data; only when known
// A model-only directory (as on the Hugging Face Hub) loads with no optimizer and no trainer state.
// A run directory holds step-00000100/ style checkpoints and a `latest` file naming the newest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memo/io/safetensors.h"
#include "memo/io/safetensors_set.h"
#include "memo/model/config.h"

namespace memo {

inline constexpr const char* kMasterFile = "model.fp32.safetensors";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
inline constexpr const char* kTokenizerFile = "tokenizer.json";
// trainer_state.json's key for the data's tokenizer where no tokenizer.json says it: "bytes" for a
// run on raw bytes whose vocab_size is not 256 (a padded byte vocabulary).
inline constexpr const char* kDataTokenizerKey = "data_tokenizer";
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kBestFile = "best";     // memo train --save-best's checkpoint
inline constexpr const char* kRunFile = "run.toml";  // the run's flags (memo train --run)
// what a resumed run keeps of the flags that shape what it writes (Note [Resume])
inline constexpr const char* kRunOptionsFile = "run_options.json";

// Note [Master weights beside bf16]
// A checkpoint saved in bf16 (the dtype of a model downloaded in bf16, half the bytes) would
// lose the low half of every fp32 master weight the optimiser updates, so a run resumed from it
// would not continue bit for bit. Its model.safetensors (the files transformers, eval and
// generate read) holds the bf16 rounding; model.fp32.safetensors beside it holds the fp32
// weights, one file under the same names (the name transformers' variant="fp32" looks for), and
// --resume reads that one. An f32 checkpoint is its own master: no second file.

struct CheckpointData {
  ModelConfig config;
  std::vector<NamedTensor> model;      // non-owning views of the caller's buffers (fp32)
  std::vector<NamedTensor> optimizer;  // empty: no optimizer.safetensors
  nlohmann::json trainer_state;        // null: no trainer_state.json
  std::string tokenizer_json;          // empty: no tokenizer.json
  // Further files written as they are (name, bytes): a Hugging Face model's tokenizer and
  // generation files, carried from the folder a run started from (kModelSideFiles).
  std::vector<std::pair<std::string, std::string>> side_files;
  DType model_dtype = DType::kF32;  // of model.safetensors: kF32, or kBF16 with kMasterFile
  int64_t max_shard_bytes = kDefaultMaxShardBytes;  // model tensors over this go into shards
};

// The files of a Hugging Face model folder beside its weights and config.json that a checkpoint
// carries on, so that transformers loads a trained model with its tokenizer and generation
// defaults: tokenizer.json (when the training data names none), tokenizer_config.json,
// special_tokens_map.json, generation_config.json, and SentencePiece's or GPT-2's vocabulary files.
inline constexpr const char* kModelSideFiles[] = {kTokenizerFile,
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "generation_config.json",
                                                  "tokenizer.model",
                                                  "vocab.json",
                                                  "merges.txt"};

// Writes `dir` atomically: it afterwards holds either its old content or the whole new checkpoint.
// Throws DataError (bad tensor list, failed write); the previous `dir`, if any, is then untouched.
void save_checkpoint(const std::filesystem::path& dir, const CheckpointData& data);

struct LoadedCheckpoint {
  std::filesystem::path dir;
  ModelConfig config;
  SafetensorsSet model;  // model.safetensors, or the shards of its index
  // What the model tensors are stored in: config.json's torch_dtype, else the tensors' dtype when
  // they all share one, else kF32.
  DType model_dtype = DType::kF32;
  std::optional<SafetensorsSet> master;     // model.fp32.safetensors, if present
  std::optional<SafetensorsSet> optimizer;  // nullopt without optimizer.safetensors
  nlohmann::json trainer_state;             // null without trainer_state.json
};

// Whether `dir` holds model tensors: model.safetensors, or model.safetensors.index.json.
bool has_model_tensors(const std::filesystem::path& dir);

// Loads and validates every file of the checkpoint in `dir` (config, tensors, checksums). The
// model's tensors are model.safetensors, else the shards of model.safetensors.index.json (the
// order transformers looks for them in). Missing directory, config.json or model tensors (or a
// listed shard): DataError; corrupt files or an index that disagrees with its shards:
// FormatError or ConfigError naming the file. kWeights (eval, generate, --init-from): the model's
// tensors only; the master weights and optimiser state, which such a use never reads, are left
// unread (a checkpoint with damaged optimiser state still evaluates, and a large one is not read
// twice over for its checksums).
enum class CheckpointUse { kResume, kWeights };
LoadedCheckpoint load_checkpoint(const std::filesystem::path& dir,
                                 CheckpointUse use = CheckpointUse::kResume);

// Refuses (DataError naming config.json) a checkpoint whose config makes a model of more than
// twice the parameters its tensors hold, before a model is sized from it (Note [A config that
// does not describe its tensors]). For whoever builds a model from a loaded checkpoint.
void check_config_describes_tensors(const LoadedCheckpoint& ckpt);

// "step-00000100" for step 100: zero-padded so that names sort by step.
std::string checkpoint_dir_name(int64_t step);

// save_checkpoint into run_dir/checkpoint_dir_name(step) (creating run_dir), then points
// run_dir/latest at it (atomically). Returns the checkpoint directory.
std::filesystem::path save_run_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                          const CheckpointData& data);

// Removes the temporaries a killed writer left in run_dir: a checkpoint's `step-N.tmp-PID` or
// `step-N.old-PID` directory, `latest.tmp-PID` or `best.tmp-PID`, of a process that no longer
// runs (save_run_checkpoint does this before each save). A live process's are left alone.
void remove_stale_temporaries(const std::filesystem::path& run_dir);

// The checkpoint to resume from or load: the directory named by run_dir/latest; else run_dir
// itself if it holds model tensors (has_model_tensors: a Hugging Face folder, sharded or not);
// else the highest-step step-NNNNNNNN directory that holds them (a save that committed before
// `latest` was written). Temporary directories
// of interrupted saves (".tmp-<pid>") are never returned. Throws DataError if there is none.
std::filesystem::path find_latest_checkpoint(const std::filesystem::path& run_dir);

}  // namespace memo
