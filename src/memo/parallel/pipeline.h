// Pipeline parallelism's layout (issue #26): the model's layers cut into P x V chunks over P
// ranks (V virtual stages per rank, interleaved), which layers each chunk holds, and the order in
// which a rank runs its micro-batches' forwards and backwards (1F1B, and Megatron-LM's interleaved
// 1F1B). Pure and deterministic: no communication and no model, so the trainer, `memo plan` and
// the tests read the same schedule. simulate_pipeline replays the schedules of all ranks against
// their dependencies, to measure the bubble and to prove a schedule cannot deadlock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memo {

// Note [Pipeline chunks]
// The L layers are cut into P V contiguous chunks, in layer order; chunk g runs on rank g mod P
// as that rank's virtual stage g / P (Megatron-LM's assignment: rank r holds chunks r, r + P, ...,
// so a micro-batch visits every rank V times). Chunk 0 also holds the embedding (and learned
// positions), chunk P V - 1 the final norm, the head and the loss. A micro-batch's activation
// crosses from chunk g to g + 1 in its forward and its gradient from g + 1 to g in its backward:
// one [T, C] tensor each way per boundary.
struct PipelineShape {
  int stages = 1;          // P: ranks along the pipeline
  int virtual_stages = 1;  // V: chunks per rank (1: plain 1F1B; more: interleaved 1F1B)
  int chunks() const { return stages * virtual_stages; }
  int rank_of(int chunk) const { return chunk % stages; }
  int chunk_of(int rank, int virtual_stage) const { return virtual_stage * stages + rank; }
};

// Layers per chunk (P V entries) that make the costliest chunk as cheap as can be: a layer costs
// 1, and the last chunk's head with its loss `head_cost` more (the caller's ratio of the head's
// FLOPs to a layer's; the embedding's lookup costs nothing). Among the splits with that bottleneck
// it takes the most even (least sum of squared costs), then the one with the fewest layers on the
// earliest chunks (under 1F1B the first ranks hold the most micro-batches in flight). Every chunk
// gets at least one layer: ConfigError when there are fewer layers than chunks.
std::vector<int> balance_layers(int layers, int chunks, double head_cost);

// `--pp-layers 9,8,8,7`: one positive count per chunk, in chunk order, adding up to `layers`;
// ConfigError naming what is wrong otherwise.
std::vector<int> parse_pipeline_layers(const std::string& text, int layers, int chunks);

// The first layer of each chunk (chunks + 1 entries: the last is `layers`).
std::vector<int> chunk_first_layers(const std::vector<int>& counts);

// Note [Pipeline schedules]
// A rank runs its part of a step as a list of actions, each the forward or the backward of one
// micro-batch on one of its chunks. With m micro-batches:
// - 1F1B (V = 1; PipeDream-Flush, as Megatron-LM and DeepSpeed run it): rank r runs
//   w = min(P - r - 1, m) forwards (warm-up), then m - w pairs of one forward and one backward
//   (steady state), then the w backwards left (cool-down). Rank r holds at most min(P - r, m)
//   micro-batches' activations at once: the first rank P, the last one.
// - Interleaved 1F1B (V > 1; Megatron-LM's, m a multiple of P): the rank's m V (micro-batch,
//   chunk) forwards in groups of P micro-batches, each group through its chunks in order (forward
//   k: micro-batch (k / (P V)) P + k mod P on virtual stage (k mod P V) / P); the backwards in
//   the same order through the chunks in reverse. Warm-up w = min(2 (P - r - 1) + (V - 1) P, m V)
//   forwards, then 1F1B pairs, then the cool-down backwards.
// With forwards and backwards each of equal length on every chunk, the bubble (idle time over
// busy time) is (P - 1) / (V m): tests/parallel/pipeline_test.cc measures it on simulate_pipeline.
enum class PipeOp : uint8_t { kForward, kBackward };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // global chunk (Note [Pipeline chunks])
  bool operator==(const PipeAction&) const = default;
};

// ConfigError when the schedule cannot run the shape: P or V below 1, m below 1, more than
// kMaxPipelineChunks chunks (a model has no more layers: ModelConfig::check_sizes) or
// kMaxPipelineMicroBatches micro-batches, or interleaving (V > 1) with m not a multiple of P. The
// int64 form checks flags before they are narrowed into a PipelineShape.
inline constexpr int64_t kMaxPipelineChunks = int64_t(1) << 16;
inline constexpr int64_t kMaxPipelineMicroBatches = int64_t(1) << 24;
void validate_pipeline(int64_t stages, int64_t virtual_stages, int64_t micro_batches);
inline void validate_pipeline(PipelineShape shape, int64_t micro_batches) {
  validate_pipeline(shape.stages, shape.virtual_stages, micro_batches);
}

// Rank `rank`'s actions for one step (Note [Pipeline schedules]).
std::vector<PipeAction> pipeline_actions(PipelineShape shape, int micro_batches, int rank);

// The forwards rank `rank` runs before its first backward.
int warmup_forwards(PipelineShape shape, int micro_batches, int rank);

// The most (micro-batch, chunk) activations the actions hold at once: forwards run whose
// backward has not. In chunks, so under interleaving a chunk holds L / (P V) layers.
int peak_in_flight(const std::vector<PipeAction>& actions);

// What rank `rank` holds on the host at once when offload or memo parks its micro-batches in
// flight (Note [Parked micro-batches] in memory/swap_strategy.cc): up to `in_flight` passes
// (peak_in_flight of its actions for m micro-batches), each of at most `layers` layers (a chunk's
// count from `counts`; the model's last chunk less its top two, whose backward follows its
// forward at once). At most in_flight x layers: exactly that under 1F1B, one chunk per rank.
struct ParkedLayers {
  int in_flight = 0, layers = 0;
  int total() const { return in_flight * layers; }
};
ParkedLayers parked_layers(PipelineShape shape, const std::vector<int>& counts, int micro_batches,
                           int rank);

// Note [Pipeline send completion]
// An action first receives its input (a forward of chunk g > 0: the activation from chunk g - 1's
// rank; a backward below the last chunk: the gradient from chunk g + 1's rank) and last sends its
// result (the activation to chunk g + 1's rank, or the gradient of its input to chunk g - 1's).
// A posted send's buffer may be reused once the send completes, which MPI says only when asked;
// a rank that asks at run time (MPI_Test) reuses buffers at moments no plan can know. Instead, a
// rank knows from the schedules alone when a send has surely completed: once it has received a
// message that the peer sent after the action that received ours (an action's receive precedes
// its send), the peer's receive has returned, so the data has left our buffer and waiting on the
// send returns at once. sends_completed gives, for each of the rank's actions, its earlier
// actions whose sends are complete once its receive has returned; a send no later receive
// vouches for completes with the step (wait_sends). The buffers in use are then the same at the
// same action in every step, which a static plan needs, and few: under 1F1B a rank holds about
// two sent activations and, in the cool-down, its sent gradients (one per backward left).
struct PipeMessage {
  int peer = -1;  // the other rank; -1: the action has no such message
  int micro_batch = 0;
  int tag = 0;  // 2 g: the activation into chunk g; 2 g + 1: the gradient of chunk g's output
};
PipeMessage action_receive(PipelineShape shape, const PipeAction& action);
PipeMessage action_send(PipelineShape shape, const PipeAction& action);
std::vector<std::vector<int>> sends_completed(PipelineShape shape, int micro_batches, int rank);

// (P - 1) / (V m): the bubble of Note [Pipeline schedules].
double pipeline_bubble(PipelineShape shape, int micro_batches);

// Seconds of each chunk's forward and backward of one micro-batch ([P V] each), and of one
// activation's (or gradient's) passage from one rank to the next.
struct PipeTimes {
  std::vector<double> forward_s, backward_s;
  double transfer_s = 0.0;
  // Every chunk the same: forward f, backward b.
  static PipeTimes uniform(PipelineShape shape, double f, double b, double transfer = 0.0);
};

struct PipeSimulation {
  double step_s = 0.0;         // the last action's end
  std::vector<double> busy_s;  // per rank: the sum of its actions' times
  // Idle time over busy time on the busiest rank: (step - busy) / busy.
  double bubble() const;
};

// Runs each rank's actions in their order (P lists), each starting once its rank is free and its
// inputs exist: a forward after the previous chunk's forward of the same micro-batch, a backward
// after the next chunk's backward (the last chunk's after its own forward), plus transfer_s where
// the two run on different ranks. Sends do not wait for their receiver (the runtime posts them
// without blocking). Throws Error naming each rank's next action when no rank can go on (a
// deadlock), or when the lists do not run every chunk's forward and backward of every
// micro-batch exactly once on the chunk's rank.
PipeSimulation simulate_pipeline(PipelineShape shape, int micro_batches,
                                 const std::vector<std::vector<PipeAction>>& actions,
                                 const PipeTimes& times);

}  // namespace memo
