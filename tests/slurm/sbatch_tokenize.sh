#!/usr/bin/env bash
# shellcheck disable=SC2034  # `vars` is read by submit_sub (sbatch_lib.sh)
# sbatch/tokenize.sub on a synthetic Pile-layout corpus (jsonl.zst with text and meta, made from
# the real text of scripts/corpus.sh): 1, 2 and 3 tasks on 1, 2 and 3 nodes give the same dataset
# file for file, with the job's progress in the batch output; USR1 mid-job stops the tasks, the
# job requeues itself, and the restart keeps the finished files (the same inodes end up in the
# dataset) and ends with the same dataset; a re-run after a failed task keeps what was finished;
# bad variables stop the job before any step.
#   sbatch_tokenize.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
source "$(dirname "$0")/sbatch_lib.sh"
require_cluster
dir="$(scratch)"
AX_DATA="$BUILD/datasets/ax-data"

# Six files of unequal sizes (1:2:3:1:2:3), the sample twice over (once reversed): ~15 MB of text.
if ! bash "$REPO/scripts/corpus.sh" "$dir/corpus" >"$dir/corpus.log" 2>&1 ||
  ! "$AX_DATA" train-tokenizer --input "$dir/corpus/kjv-train.txt" --vocab-size 1000 \
    --output "$dir/spm.model" >>"$dir/corpus.log" 2>&1; then
  bad "making the corpus and the tokenizer"
  show_tail "$dir/corpus.log"
  finish
  exit
fi
mkdir -p "$dir/pile"
zstd -q -dc "$dir/corpus/pile-sample.jsonl.zst" >"$dir/sample.jsonl"
{ cat "$dir/sample.jsonl"; tac "$dir/sample.jsonl"; } | awk -v out="$dir/pile" '
  BEGIN { split("0 1 1 2 2 2 3 4 4 5 5 5", file, " ") }
  { print > sprintf("%s/%02d.jsonl", out, file[NR % 12 + 1]) }'
for f in "$dir"/pile/*.jsonl; do zstd -q --rm "$f"; done
docs=$(($(wc -l <"$dir/sample.jsonl") * 2))

# tok_vars NAME [VAR=VALUE...]: a job writing $dir/NAME from $dir/pile, 1 thread per task.
tok_vars() {
  local name="$1"
  shift
  printf '%s\n' "INPUT_GLOB=$dir/pile/*.jsonl.zst" "BASE_VOCAB_PATH=$dir/spm.model" \
    "SHARDS_DIR=$dir/$name" "AX_BIN=$BUILD" "THREADS=1" "PROGRESS_SECONDS=1" \
    "SHARD_TOKENS=200000" "$@"
}

# same_dataset WHAT A B: the same shard files and index.json, byte for byte.
same_dataset() {
  local what="$1" a="$2" b="$3" f differ=()
  for f in "$a"/index.json "$a"/*.axs; do
    cmp -s "$f" "$b/$(basename "$f")" || differ+=("$(basename "$f")")
  done
  local na nb
  na="$(find "$a" -maxdepth 1 -type f | wc -l)"
  nb="$(find "$b" -maxdepth 1 -type f | wc -l)"
  if ((${#differ[@]} == 0 && na == nb && na > 2)); then
    ok "$what: the same $((na - 1)) shard(s) and index.json, byte for byte"
  else
    bad "$what: $na vs $nb files; differ: ${differ[*]:-none}"
  fi
}

# --- 1, 2 and 3 tasks --------------------------------------------------------------------------
ids=()
for n in 1 2 3; do
  mapfile -t vars < <(tok_vars "t$n")
  ids+=("$(submit_sub "$dir/t$n.out" -N "$n" "$SUB_DIR/tokenize.sub")")
done
for n in 1 2 3; do
  id="${ids[n - 1]}"
  end_job "$id" 180
  job_completed "$n task(s) on $n node(s)" "$id" "$dir/t$n.out" "$dir/t$n/logs/tokenize-$id-0.txt" ||
    continue
  logs="$(find "$dir/t$n/logs" -name "tokenize-$id-*.txt" | wc -l)"
  if [[ -f "$dir/t$n/index.json" && ! -e "$dir/t$n/parts" ]] && ((logs == n)); then
    ok "$n task(s): index.json written, parts merged away, $n task output file(s)"
  else
    bad "$n task(s): index.json / parts / $logs task outputs not as expected"
    ls -la "$dir/t$n" | sed 's/^/  | /'
  fi
  if grep -Eq "^ax-data progress: $dir/t$n: .* / .* \([0-9.]+%\), [0-9]+ / 6 files, .* MB/s, ETA" \
    "$dir/t$n.out" && grep -q "ax-job: $dir/t$n: 6 input file(s), " "$dir/t$n.out"; then
    ok "$n task(s): progress lines (bytes, files, MB/s, ETA) and the merge in the batch output"
  else
    bad "$n task(s): no progress or merge lines in the batch output"
    show_tail "$dir/t$n.out"
  fi
done
if "$AX_DATA" verify "$dir/t1" --tokenizer "$dir/spm.model" >"$dir/verify.out" 2>&1 &&
  grep -q " $docs docs" "$dir/verify.out"; then
  ok "1 task: ax-data verify passes, $docs documents"
else
  bad "1 task: verify: $(cat "$dir/verify.out")"
fi
same_dataset "2 tasks on 2 nodes against 1" "$dir/t1" "$dir/t2"
same_dataset "3 tasks on 3 nodes against 1" "$dir/t1" "$dir/t3"

# --- preemption: USR1 after the first finished file, requeue, restart ----------------------------
mapfile -t vars < <(tok_vars p)
id="$(submit_sub "$dir/p.out" -N 2 "$SUB_DIR/tokenize.sub")"
start=$SECONDS
done_part=""
for ((i = 0; ; i++)); do
  done_part="$(compgen -G "$dir/p/parts/*/index.json" | head -n 1)"
  [[ -n "$done_part" ]] || ((SECONDS - start > 120)) && break
  # A job that ended already (too fast to be stopped) is reported below.
  if ((i % 10 == 9)); then
    case "$(job_field "$id" JobState)" in COMPLETED | FAILED | CANCELLED) break ;; esac
  fi
  sleep 0.05
done
kept_inode="$(stat -c %i "$(dirname "$done_part")/shard-00000.axs" 2>/dev/null)"
finished_before="$(compgen -G "$dir/p/parts/*/index.json" | wc -l)"
t scancel --batch --signal=USR1 "$id"
start_requeued "$id"
end_job "$id" 180
restarts="$(job_field "$id" Restarts)"
if [[ "$JOB_STATE" == COMPLETED && "$JOB_EXIT" == 0:0 && "$restarts" == 1 ]] &&
  ((finished_before < 6)); then
  ok "USR1 with $finished_before of 6 files finished -> requeued once -> job $id COMPLETED 0:0"
else
  bad "preemption: job $id ended $JOB_STATE $JOB_EXIT, restarts '$restarts'," \
    "$finished_before of 6 files finished at the signal"
  show_tail "$dir/p.out"
  daemon_log_lines "$id"
fi
if grep -q 'caught SIGUSR1' "$dir/p.out" && grep -q "requeueing job $id" "$dir/p.out" &&
  grep -q 'restart 1 (SLURM_RESTART_COUNT)' "$dir/p.out" &&
  grep -qh "was finished before, kept" "$dir"/p/logs/tokenize-"$id"-*.txt; then
  ok "preemption: signal, requeue and restart in the batch output; the restart kept finished files"
else
  bad "preemption: the batch or task outputs lack the signal/requeue/kept lines"
  show_tail "$dir/p.out"
fi
# The restart's watcher met the stopped run's progress files (the bytes done then go down as the
# tasks start those files again): every rate in the batch output stays sane (issue 27: it printed
# 9203433304781.98 MB/s).
rates="$(grep -o '[-0-9.e+]* MB/s' "$dir/p.out" | cut -d' ' -f1 | sort -g)"
lo="$(head -n 1 <<<"$rates")" hi="$(tail -n 1 <<<"$rates")"
if [[ -n "$rates" ]] && awk -v lo="$lo" -v hi="$hi" 'BEGIN { exit !(lo >= 0 && hi < 10000) }'; then
  ok "preemption: every progress rate in the batch output is sane ($lo to $hi MB/s)"
else
  bad "preemption: a progress rate out of bounds ($lo to $hi MB/s)"
  grep 'ax-data progress' "$dir/p.out" | sed 's/^/  | /' | tail -n 12
fi
if [[ -n "$kept_inode" ]] && [[ -n "$(find "$dir/p" -maxdepth 1 -inum "$kept_inode")" ]]; then
  ok "preemption: a file finished before the signal is in the dataset as it was (inode $kept_inode)"
else
  bad "preemption: the finished part's shard (inode '${kept_inode}') is not in the dataset"
fi
same_dataset "the preempted job against 1 task" "$dir/t1" "$dir/p"

# --- a failed task, then the same job again ------------------------------------------------------
cp -r "$dir/pile" "$dir/pile-r"
cp "$dir/pile/05.jsonl.zst" "$dir/good.zst"
size="$(stat -c %s "$dir/good.zst")"
printf 'broken!' | dd of="$dir/pile-r/05.jsonl.zst" bs=1 seek=$((size / 2)) conv=notrunc status=none
mapfile -t vars < <(tok_vars r "INPUT_GLOB=$dir/pile-r/*.jsonl.zst")
id="$(submit_sub "$dir/r1.out" -N 2 "$SUB_DIR/tokenize.sub")"
end_job "$id" 180
if [[ "$JOB_STATE" == FAILED ]] && grep -qh "05.jsonl.zst:[0-9]*: " "$dir"/r/logs/tokenize-"$id"-*.txt &&
  [[ ! -f "$dir/r/index.json" ]]; then
  ok "a corrupt input: job $id FAILED, the task output names the file and line, no index.json"
else
  bad "a corrupt input: job $id ended $JOB_STATE; index.json: $(ls "$dir/r/index.json" 2>&1)"
  show_tail "$dir/r1.out"
fi
cp "$dir/good.zst" "$dir/pile-r/05.jsonl.zst"
id="$(submit_sub "$dir/r2.out" -N 2 "$SUB_DIR/tokenize.sub")"
end_job "$id" 180
if job_completed "the same job again after the fix" "$id" "$dir/r2.out" \
  "$dir/r/logs/tokenize-$id-0.txt" &&
  grep -qh "was finished before, kept" "$dir"/r/logs/tokenize-"$id"-*.txt; then
  ok "the re-run kept the files finished before the failure"
else
  bad "the re-run did not keep finished files"
fi
differ=()
for f in "$dir"/t1/*.axs; do cmp -s "$f" "$dir/r/$(basename "$f")" || differ+=("$(basename "$f")"); done
if ((${#differ[@]} == 0)); then
  ok "the re-run's shards equal the 1-task job's (the inputs' paths differ in index.json)"
else
  bad "the re-run's shards differ: ${differ[*]}"
fi

# --- bad variables: every one named, no step --------------------------------------------------
vars=("INPUT_GLOB=pile/*.jsonl.zst" "SHARDS_DIR=$dir/v" "TASKS=zero" "AX_BIN=$BUILD")
id="$(submit_sub "$dir/v.out" "$SUB_DIR/tokenize.sub")"
end_job "$id" 60
missing=()
for want in "INPUT_GLOB: 'pile/*.jsonl.zst' is not absolute" "BASE_VOCAB_PATH is not set" \
  "TASKS='zero'" "3 problem(s) with the job's variables; nothing was launched"; do
  grep -qF -- "$want" "$dir/v.out" || missing+=("$want")
done
if [[ "$JOB_STATE" == FAILED && "$JOB_EXIT" == 2:0 && ${#missing[@]} == 0 && ! -e "$dir/v" ]]; then
  ok "bad variables: FAILED 2:0, each named, nothing created"
else
  bad "bad variables: $JOB_STATE $JOB_EXIT; missing: ${missing[*]:-none}"
  show_tail "$dir/v.out"
fi
finish
