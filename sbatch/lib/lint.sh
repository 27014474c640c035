# shellcheck shell=bash
# Part of sbatch/ax_job.sh (which sources it): the variables each job script reads and
# ax_warn_unknown_vars, which warns (never fails) about an exported variable that looks meant for
# the script but that it does not read. AX_KNOWN_ENV, the AX_* names ax reads, is at the end.

# The variables each script reads (users set them in the environment sbatch exports).
AX_PILE_VARS="BASE_WORKSPACE_DIR BASE_TFDS_DATA_DIR BASE_VOCAB_PATH LOG_DIR_LOCAL OUTPUT_DIR PREC
  GPUS_PER_NODE PERCORE_BATCH_SIZE CONFIG ICI_MESH_SHAPE DCN_MESH_SHAPE NUM_STAGES MAX_STEPS
  MAX_STEP ENABLE_FP8 ENABLE_TE BASE_SCRIPT CONTAINER CONTAINER_WORKDIR WORKSPACE_DIR TFDS_DATA_DIR
  GPT_VOCAB_PATH"
AX_FUJI_VARS="BASE_WORKSPACE_DIR BASE_TFDS_DATA_DIR BASE_VOCAB_PATH CONFIG GPUS_PER_NODE
  TRAINER_DIR OUTPUT_DIR ICI_DP ICI_FSDP ICI_TP DCN_DP DCN_FSDP DCN_TP ICI_PP ICI_SQP DCN_PP
  DCN_SQP GA GBS SEQ_LEN MAX_STEP MAX_STEPS SAVE_CHECKPOINT_STEPS WRITE_SUMMARY_STEPS CONTAINER
  CONTAINER_WORKDIR WORKSPACE_DIR TFDS_DATA_DIR GPT_VOCAB_PATH"
AX_SINGLENODE_VARS="CONFIG MAX_STEPS MAX_STEP ICI_MESH_SHAPE"
# example_slurm_pretrain_pile.sub (T5x's interface) and singlenode_pretrain_pile.sh.
AX_T5X_VARS="GPUS_PER_NODE T5_SIZE PREC BSIZE_PER_GPU TRAIN_STEPS NUM_MICROBATCHES ENABLE_FP8
  TP_SIZE TRANSPOSE_BS FUSE_QKV PACK ENC_SL DEC_SL BASE_TFDS_DATA_DIR DATASET_MAP
  BASE_T5X_OUTPUTS_DIR BASE_T5X_WORKSPACE_DIR MODEL_DIR BASE_VOCAB_PATH CONTAINER
  CONTAINER_WORKDIR CONFIG CHECKPOINT_DISABLE ADDITIONAL_CLI_ARGS T5X_DIR
  T5X_WORKSPACE_DIR TFDS_DATA_DIR T5X_VOCAB_PATH"
AX_T5X_SINGLENODE_VARS="CONFIG TFDS_DATA_DIR VOCAB_PATH TRAIN_STEPS ENC_SL DEC_SL"
# example_slurm_ft_frompile.sub (T5x's fine-tuning interface; singlenode_ft_frompile.sh reads
# the variables of singlenode_pretrain_pile.sh).
AX_T5X_FT_VARS="$AX_T5X_VARS FT_TASK BASE_CHECKPOINTS_DIR T5X_REFERENCE_CHECKPOINTS_DIR"
# tokenize.sub's own (its generic names, TASKS, FORMAT, ..., are not claimed for the others).
# shellcheck disable=SC2034 # read by tokenize.sub
AX_TOKENIZE_VARS="INPUT_GLOB BASE_VOCAB_PATH SHARDS_DIR LOG_DIR TASKS THREADS FORMAT FIELD
  TEXT_UNIT SHARD_TOKENS SPLIT_BYTES MAX_DOC_BYTES LONG_DOCS SKIP_BAD PROGRESS_SECONDS"

# ax_warn_unknown_vars SCRIPT VARS: one warning (never an error: the environment is the user's) for
# each exported variable that SCRIPT does not read (VARS) but that looks meant for it: an AX_*
# variable nothing in ax reads, another job script's variable, or a name within an edit or two of
# one SCRIPT reads (PERCORE_BATCH for PERCORE_BATCH_SIZE). Names of other software (SLURM_*,
# NCCL_*, ...) and short names are left alone.
ax_warn_unknown_vars() {
  local script="$1" known="$2" line
  while IFS= read -r line; do
    echo "ax-job: warning: $line" >&2
  done < <(compgen -e | awk -v script="$script" -v known="$known" -v ax="$AX_KNOWN_ENV" \
    -v pile="$AX_PILE_VARS" -v fuji="$AX_FUJI_VARS" -v single="$AX_SINGLENODE_VARS" \
    -v t5x="$AX_T5X_VARS" -v t5single="$AX_T5X_SINGLENODE_VARS" -v t5xft="$AX_T5X_FT_VARS" '
    function dist(a, b,   i, j, la, lb, d, c) {  # Levenshtein distance
      la = length(a); lb = length(b)
      for (i = 0; i <= la; i++) d[i, 0] = i
      for (j = 0; j <= lb; j++) d[0, j] = j
      for (i = 1; i <= la; i++)
        for (j = 1; j <= lb; j++) {
          c = d[i - 1, j - 1] + (substr(a, i, 1) != substr(b, j, 1))
          if (d[i - 1, j] + 1 < c) c = d[i - 1, j] + 1
          if (d[i, j - 1] + 1 < c) c = d[i, j - 1] + 1
          d[i, j] = c
        }
      return d[la, lb]
    }
    # A near miss of k: an edit or two away (one below 8 letters), k cut at an underscore
    # (PERCORE_BATCH), or k with more letters (SEQ_LENGTH) when k has an underscore.
    function near(name, k) {
      if (length(k) < 5) return 0
      if (index(name, "_") && index(k, name "_") == 1) return 1
      if (index(k, "_") && index(name, k) == 1) return 1
      return dist(name, k) <= (length(k) >= 8 ? 2 : 1)
    }
    function guess(name, list,   n, w, i) {
      n = split(list, w, /[ \n]+/)
      for (i = 1; i <= n; i++) if (w[i] != "" && near(name, w[i])) return w[i]
      return ""
    }
    function own(list, script,   n, w, i) {
      n = split(list, w, /[ \n]+/)
      for (i = 1; i <= n; i++) {
        if (w[i] == "") continue
        if (w[i] in owner) owner[w[i]] = owner[w[i]] " and " script
        else owner[w[i]] = script
      }
    }
    BEGIN {
      n = split(known " " ax, w, /[ \n]+/); for (i = 1; i <= n; i++) reads[w[i]] = 1
      own(pile, "example_pile.sub"); own(fuji, "example_fuji.sub")
      own(single, "run_pile_singlenode.sh"); own(t5x, "example_slurm_pretrain_pile.sub")
      own(t5single, "singlenode_pretrain_pile.sh")
      n = split(t5xft, w, /[ \n]+/) # fine-tuning adds FT_TASK and the checkpoints
      for (i = 1; i <= n; i++)
        if (w[i] != "" && !(w[i] in owner)) owner[w[i]] = "example_slurm_ft_frompile.sub"
    }
    $0 in reads { next }
    /^AX_/ {
      g = guess($0, ax)
      print $0 " is set but nothing in ax reads it" (g != "" ? "; did you mean " g "?" : "")
      next
    }
    $0 in owner { print $0 " is a variable of " owner[$0] "; " script " does not read it"; next }
    !/^[A-Z][A-Z0-9_]*$/ { next }
    /^(SLURM|SLURMD|SBATCH|SRUN|SALLOC|PMIX|PMI|OMPI|UCX|ENROOT|PYXIS)_/ { next }
    /^(CUDA|NCCL|NVIDIA|XLA|TF|LC|XDG|LMOD|MODULE)_/ { next }
    {
      g = guess($0, known)
      if (g != "") print $0 " is set but " script " does not read it; did you mean " g "?"
    }
  ')
}

# Every AX_* variable something in ax reads: these scripts, then ax-train's and ax-launch's knobs
# and the launch contract (docs/launch.md) that ax-launch and the plugin set for each rank.
# tests/sbatch/job_scripts_test.sh checks that it covers every AX_* name in the C++ sources.
# shellcheck disable=SC2034 # read by ax_warn_unknown_vars below
AX_KNOWN_ENV="AX_BIN AX_LAUNCH_MODE AX_TRAIN_ARGS AX_SRUN_ARGS AX_GRES AX_REQUEUE AX_DRY_RUN
  AX_COORDINATOR_PORT AX_SBATCH_DIR AX_FORWARD AX_DATA_ARGS AX_PLAN AX_PLAN_GPU
  AX_LOG_LEVEL AX_CPU_THREADS AX_CPU_GEMM AX_CUDA_ATTENTION AX_CUDA_GEMM_LOG AX_CUDA_GEMM_SPLIT_K
  AX_OPENBLAS_CORETYPE AX_TOPOLOGY_FILE
  AX_CHECKPOINT_FAIL_AFTER_BYTES AX_CHECKPOINT_WRITE_DELAY_MS AX_STORE_MAX_KEYS AX_STORE_MAX_BYTES
  AX_RANK AX_WORLD_SIZE AX_LOCAL_RANK AX_LOCAL_WORLD_SIZE AX_NODE_RANK AX_NNODES AX_ICI_MESH
  AX_DCN_MESH AX_MESH_SPEC AX_DEVICE AX_COORDINATOR AX_JOB_SECRET"
