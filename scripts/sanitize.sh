#!/usr/bin/env bash
# The sanitizer runs of the test command: the whole suite (but 59 long runs, below) once
# under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), and the tests of the copy
# streams, the activation strategies, the one training step and the communicator under
# ThreadSanitizer (build-tsan/, the memo_thread_tests binary), each build at -O1 without debug information.
# OpenMP runs one thread under TSan: libgomp is not instrumented, so its barriers would be
# reported as races; the copy streams' worker threads and the compute thread are what it checks.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
san_build() {  # dir, flags, linker flags, targets...
  local dir=$1 flags=$2 link=$3
  shift 3
  # Warnings are the Release build's job: under the sanitizers GCC 12 warns about its own
  # libstdc++ (<regex>: "may be used uninitialized"), so these builds do not make them errors.
  # The CUDA backend stays out (nvcc takes no -fsanitize; its host code is GPU-only anyway).
  # -g0: a report names each frame's function from the symbol table, without file:line; -g1's
  # line tables cost 9% of the compile (46.3 s against 42.2 s for the heaviest test batch under
  # ASan, 2026-12-05). Rebuild a directory with -g to read a report's lines.
  # The test files of memo_tests compile at -O0 (MEMO_TESTS_CXX_FLAGS), the library at -O1:
  # instrumented alike, the 14 test batches in half the time (2m54s against 5m16s of the ASan
  # build's 13 minutes) for 5% more test time (618 s against 586 s: the tests' own reference
  # loops run unoptimised), on a 2-core EPYC, 2026-12-05. tests/cuda/flash_attention_test.cc keeps
  # -O1 (CMakeLists.txt): its emulated GPU blocks are the test, 13.9 s there against 26.6 s at -O0.
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMO_WERROR=OFF -DMEMO_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g0" -DMEMO_SANITIZE="$flags" -DMEMO_TESTS_CXX_FLAGS=-O0 \
    -DCMAKE_EXE_LINKER_FLAGS="$link" > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$dir" -j"$jobs" "${targets[@]}"
}

# Every test but 59 (ctest's regular expressions take at most 10 groups: list names whole).
# Six long end-to-end runs: the two MPI fault drills, which stop or kill a rank mid-run and resume
# (their code is what the other MPI jobs run, the killed rank's memory is never checked; 78 s
# under the sanitizers, 54 + 23 s), the two end-to-end runs of the shipped GPT-2 config
# (`memo train` processes of 37 and 30 s there; the GPT-2 layers run under the sanitizers in
# GptVsTorch and the GPT-2 kernel tests, a killed run's resume in Cli's), and two more kill-and-
# resume drills, of `memo tokenize` and of a batch schedule (30 and 18 s there; tokenizing and the
# schedule run under the sanitizers in their other tests, a killed training run in Cli's). Then
# eight multi-process runs whose code the sanitizers see in other tests: tensor parallelism over
# Mistral's window, Qwen2, Llama's biases and GPT-2's document masks, context parallelism with
# scaled RoPE (each architecture's layers run under them in one process, against PyTorch, and
# the tensor and context splits in TensorParallel's and ContextParallel's other runs, Qwen3's
# biases and norms split included), and the signal drills of the DP, TP and CP layouts
# (Preemption's run the handler and RunSurvival's the background checkpoints; the stop's
# reduction is the DP group's). 93 s under the sanitizers on a 2-core EPYC before the TP and CP
# drills were added. And four more of the tensor- and context-parallel layouts, 72 s under the
# sanitizers: their activation strategies bit for bit (the strategies run under the sanitizers in
# one process, Strategies' and MixedPrecision's, the splits in the layouts' matches-one-process
# runs) and memo plan's prediction of each rank's arena (the traces of the splits run in
# ShapeOnlyTrace's tests). And four of the pipeline's (issue 26): its 1F1B, interleaved and
# data-parallel layouts against one process, GPT-2's tied embedding with masks, the noise batch
# schedule, and its refusals; its step, tagged sends, noise probe and checkpoint gather run under
# the sanitizers in the activation strategies' and the resume's runs, every schedule's chunks in
# one process in PipelineModel's. And six more, 98 s under the sanitizers, cut when the whole
# CI run reached 44 minutes on a 2-core EPYC (stop 42): the four strategies' bf16 bits (the
# strategies run under the sanitizers in Strategies' tests, bf16 storage in MixedPrecision's
# others), ZeRO-1 against ZeRO-0 and the noise schedule over data-parallel ranks (ZeRO-1's shards
# and the schedule run there in DataParallel's budget test and BatchScheduleCli's), GPT with
# rotary positions under each strategy (the learned-positions case stays), a killed run saving
# bf16 shards (the bf16 files in CheckpointsOut's others, a killed run's resume in Cli's), and
# memo against keep from the command line (Strategies'). And `memo plan --layouts` from the command
# line (10 s there, two plans of 30 layouts; plan_layouts runs under the sanitizers in ClusterPlan's
# test, the table's printing is the run's only other code). And 25 more, 285 s under the
# sanitizers, cut when the whole CI run took 39m59s on a 2-core EPYC (stop 45), each of whose
# code runs under them in another test: a pipeline with tensor and context parallelism in each
# stage (each split in TensorParallel's, ContextParallel's and PipelineParallel's runs), the
# cl100k BPE against tiktoken (the byte-level BPE in Gpt2Reference's), GPT-2 under tensor
# parallelism (GPT-2 split in ContextParallel.gpt2's), a pipeline's document masks (DocumentMask's,
# and the chunks in PipelineModel.one_f_one_b's), length stages as spans of tokens under the noise
# schedule (StepSchedule's, and length stages in PipelineParallel's and DataParallel's runs),
# sharded training data (TextCli's validation shards), the spike rule's resume (RunSurvival's
# poisoned batch), bf16 checkpoints by default (Checkpoints' bf16 shards), --keep-last (Cli's
# folder of another run), a tensor-parallel resume on another layout (the context-parallel and
# pipeline ones), a pipeline's parked micro-batches and its strategies in one process
# (PipelineParallel.activation_strategies'), every strategy in a planned arena (Strategies'), a
# loaded model's position flags (RopeScaling's and KvDecoder's scaled positions), length stages
# in memo plan's arenas (PipelineParallel's and DataParallel's length stages), a prompt-completion
# loss mask (DataParallel's loss mask), SIGUSR1 (Preemption's SIGTERM), several scaling targets
# (ScalingCli's others) and a kill during a background write (RunSurvival's failed write and
# background saves); then, when that run still took 39 minutes, six more: long documents cut into
# segments (the tokenizers' other tests), scaled RoPE in the decoder for Qwen2 and Mistral
# (KvDecoder's others), the overlapped reduction (DataParallel.repeats_bit_for_bit), a context
# group of three (of two and four), a padded vocabulary under tensor parallelism (TensorParallel's
# others) and the model folder's files carried into checkpoints (Cli's sharded folder). Then, when
# stop 49's CI run took 2400 s, five more (31 s in the release suite): Qwen3 under tensor
# parallelism (Qwen3's layers in ModelVsTorch's, the split in TensorParallel's first run), the
# tensor- and context-parallel layouts refused before any rank computes (flag checks, in release),
# and two resumes of Preemption's (a length-stage resume in PipelineParallel's, the signal handler
# in its SIGTERM run). The release suite runs all 59.
echo "memo: AddressSanitizer + UndefinedBehaviorSanitizer: every test but 59 long runs"
# The executables are linked at a fixed address (-no-pie): as position-independent executables
# each start spent 0.2 of its 0.5 s applying 2 million relocations (AddressSanitizer's records of
# the globals point into the binary), and the suite starts memo_tests 750 times and memo hundreds.
san_build build-asan "address,undefined" "-no-pie" memo memo_tests memo_mpi_tests
skip='^(ContextParallel\.a_hung_or_killed_rank_ends_the_job_and_the_run_resumes|DataParallel\.a_killed_rank_stops_the_job_and_the_run_resumes_where_it_was|GptCli\.shipped_gpt2_tiny_config_trains_and_the_loss_falls|GptCli\.killed_run_resumes_with_identical_losses|TextCli\.killed_tokenize_resumes_to_the_files_of_an_uninterrupted_run|BatchScheduleCli\.killed_run_resumes_mid_schedule_with_identical_steps|TensorParallel\.((qwen2_with_yarn|gpt2_with_document_masks)_matches|llama_biases_match|sliding_windows_match)_one_process|ContextParallel\.scaled_rope_matches_one_process|(TensorParallel|ContextParallel)\.(activation_strategies_are_bit_identical|memo_plan_predicts_each_ranks_arena_and_bytes)|DataParallel\.a_signal_(to_one_rank_stops_every_rank_after_the_same_step|stops_a_tensor_parallel_job_with_a_background_checkpoint|stops_a_context_parallel_job_after_the_same_step)|PipelineParallel\.(one_f_one_b_interleaved_and_data_parallel_match_one_process|a_tied_embedding_sums_its_two_gradients_and_masks_hold|the_noise_batch_schedule_grows_as_in_one_process|what_a_pipeline_does_not_run_is_refused_by_name)|MixedPrecision\.the_four_strategies_give_the_same_bf16_losses_bit_for_bit|DataParallel\.(zero_one_equals_zero_zero_and_resumes_on_another_layout|the_noise_batch_schedule_grows_in_steps_that_split_over_the_ranks)|Positions/GptStrategies\.recompute_offload_and_memo_match_keep_bitwise/rope .*|CheckpointsOut\.killed_run_saving_bf16_shards_resumes_with_identical_losses|Cli\.memo_and_keep_activations_give_identical_log_losses|PlanCluster\.layouts_list_every_split_of_the_gpus|PipelineParallel\.tensor_and_context_parallelism_inside_each_stage_match_one_process|Cl100kReference\.ids_equal_tiktoken_on_varied_text|TensorParallel\.gpt2_matches_one_process|TensorParallel\.resumes_on_another_layout|PipelineModel\.document_masks_and_the_eod_loss_mask_give_one_processs_bits|PipelineModel\.parked_micro_batches_leave_one_micro_batchs_buffers_on_the_device|PipelineModel\.each_activation_strategy_gives_the_same_bits|BatchScheduleCli\.length_stages_are_spans_of_tokens_and_resume_bit_for_bit|TextCli\.sharded_training_equals_training_on_the_concatenated_file|RunSurvival\.spikes_are_skipped_by_the_median_rule_and_a_resumed_run_skips_the_same|CheckpointsOut\.bf16_is_the_default_for_a_bf16_model_and_eval_reads_its_bf16_weights|Cli\.position_flags_extend_a_loaded_models_context_and_are_saved|PlanCommand\.length_stages_run_in_memo_plans_arenas_and_resume_bit_for_bit|TextCli\.prompt_completion_data_counts_the_completions_only|Preemption\.usr1_stops_too_and_exit_signal_none_leaves_the_default_action|ScalingCli\.several_target_levels_record_what_single_target_runs_would|RunSurvival\.a_kill_during_a_background_write_leaves_latest_on_a_complete_checkpoint|Tokenizer\.long_documents_cut_into_segments_give_the_ids_of_the_whole|KvDecoder\.scaled_rope_qwen2_and_mistral_steps_match_pytorch_float64|DataParallel\.the_reduction_overlapped_with_the_backward_keeps_the_bits|ContextParallel\.an_odd_group_of_three_matches_one_process|TensorParallel\.a_vocabulary_that_does_not_split_is_padded|Cli\.a_model_folders_tokenizer_and_generation_files_are_carried_into_each_checkpoint|Cli\.keep_last_keeps_the_newest_checkpoints|Cli\.every_strategy_in_a_planned_arena_gives_the_losses_of_keep_with_a_lower_peak|TensorParallel\.qwen3_with_biases_and_yarn_matches_one_process|TensorParallel\.layouts_that_do_not_split_are_refused|ContextParallel\.layouts_that_do_not_split_are_refused|Preemption\.a_run_of_length_stages_resumes_past_step_100_with_its_own_steps|Preemption\.a_resumed_run_refuses_other_values_of_the_options_it_keeps)$'
# The tests of memo_tests run in $jobs processes, not one each as ctest runs them: a process takes
# 0.3 s to start under AddressSanitizer (registering the globals, page faults, UBSan's vptr checks),
# which the suite paid ~780 times (2 of its 9 minutes), and LeakSanitizer's scan at exit 0.08 s
# more. scripts/gtest_shards.py deals them out by the release suite's times; the other tests (MPI
# jobs, scripts) run through ctest after them.
(cd build-asan &&
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 &&
  rm -rf shards &&
  ctest -N --show-only=json-v1 -E "$skip" |
    ../scripts/gtest_shards.py memo_tests "$jobs" ../build/Testing/Temporary/CTestCostData.txt shards &&
  while IFS= read -r kv; do [[ -z $kv ]] || export "${kv?}"; done < shards/env &&
  pids=() &&
  for ((shard = 0; shard < jobs; ++shard)); do
    timeout 3000 ./memo_tests --gtest_also_run_disabled_tests \
      --gtest_filter="$(cat "shards/shard-$shard.filter")" > "shards/shard-$shard.log" 2>&1 &
    pids+=($!)
  done &&
  failed=0 &&
  for ((shard = 0; shard < jobs; ++shard)); do
    if wait "${pids[$shard]}"; then
      grep -E '^\[  PASSED  \]|tests? ran' "shards/shard-$shard.log" | tail -n 2
    else
      cat "shards/shard-$shard.log"
      failed=1
    fi
  done &&
  if [[ -s shards/others ]]; then
    ctest --output-on-failure -j"$jobs" --timeout 600 -R "$(cat shards/others)" || failed=1
  fi &&
  exit $failed)

echo "memo: ThreadSanitizer: copy streams, strategies, the training step, the communicator"
san_build build-tsan "thread" "" memo_thread_tests
# The binary runs as $jobs shards at once (GoogleTest's sharding): each runs one compute thread.
pids=()
for ((shard = 0; shard < jobs; ++shard)); do
  OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 GTEST_TOTAL_SHARDS=$jobs \
    GTEST_SHARD_INDEX=$shard build-tsan/memo_thread_tests > "build-tsan/shard-$shard.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((shard = 0; shard < jobs; ++shard)); do
  if wait "${pids[$shard]}"; then
    tail -n 1 "build-tsan/shard-$shard.log"
  else
    cat "build-tsan/shard-$shard.log"
    failed=1
  fi
done
exit $failed
