#!/usr/bin/env bash
# The main job on a fresh machine: installs what ax needs, builds the two programs it runs
# (ax-data, ax-train), then scripts/demo.sh: real English text, a SentencePiece tokenizer and
# zstd token shards, a small GPT trained with ax-train and a text sample from it. Outputs land in
# $AX_OUT (default: ./out); a second run resumes or reuses what is there.
#   AX_DEMO_STEPS=N changes the number of training steps (default: the demo-gpt experiment's).
#   AX_CUDA=1 builds the CUDA backend (preset cuda) even when no GPU answers; AX_CUDA=0 never.
#   By default it is built only when the CUDA toolkit is installed and a GPU answers.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${AX_OUT:-$PWD/out}"

bash scripts/setup.sh
preset=cpu
case "${AX_CUDA:-auto}" in
  1) preset=cuda ;;
  0) ;;
  auto)
    if [[ -x /usr/local/cuda/bin/nvcc ]] && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      preset=cuda
    fi
    ;;
  *) echo "main: AX_CUDA='$AX_CUDA': expected 1, 0 or auto" >&2; exit 2 ;;
esac
echo "== build ($preset): ax-data"
build=$(bash scripts/build.sh "$preset" ax-data | tail -n 1)
# The data (corpus, tokenizer, shards) needs only ax-data: it is prepared while ax-train builds,
# and its output is printed once the build is done.
mkdir -p "$out"
data_log="$out/demo-data.log"
bash scripts/demo.sh "$build" "$out" data >"$data_log" 2>&1 &
data_pid=$!
echo "== build ($preset): ax-train (the demo's data is prepared meanwhile: $data_log)"
bash scripts/build.sh "$preset" ax-train >/dev/null
data_rc=0
wait "$data_pid" || data_rc=$?
cat "$data_log"
if ((data_rc != 0)); then
  echo "main: preparing the demo's data failed (exit $data_rc; $data_log)" >&2
  exit "$data_rc"
fi
bash scripts/demo.sh "$build" "$out" train
