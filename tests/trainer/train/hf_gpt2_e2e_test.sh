#!/usr/bin/env bash
# Issue 28's end to end with GPT-2's real tokenizer.json: a random-weight GPT-2-shaped Hugging Face
# directory (config.json, model.safetensors, tokenizer.json) -> ax-data tokenize with the
# directory -> ax-train --init-from the directory (its tokenizer, no --tokenizer) -> sample ->
# export -> --init-from the export. Checked: the shards decode back to the input text, a greedy
# sample starts with its prompt, the export holds the same tokenizer.json and all 50257 rows with
# vocab_size 50257, and a new run starts from the export with its tokenizer.
#
# GPT-2's tokenizer.json (1.3 MB, 50257 ids) is not checked in: give its path as the third
# argument or AX_GPT2_TOKENIZER (bench/tokenizer_bench.sh writes one from the npm registry:
# node bench/tiktoken_peer.js write-gpt2 gpt2/tokenizer.json). Without it the test is skipped
# (exit 77). Needs Debian's python3 with NumPy to write the random weights.
#
# usage: hf_gpt2_e2e_test.sh AX_TRAIN AX_DATA [GPT2_TOKENIZER_JSON]
set -uo pipefail

axtrain=$1
axdata=$2
tokenizer=${3:-${AX_GPT2_TOKENIZER:-}}
if [[ -z $tokenizer || ! -s $tokenizer ]]; then
  echo "SKIP: no GPT-2 tokenizer.json (pass it as the third argument or AX_GPT2_TOKENIZER)"
  exit 77
fi
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 cannot import numpy (bash scripts/setup.sh --with oracle)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/ax-hf-gpt2-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
run() {  # run DESCRIPTION COMMAND...: output in $work/out, a failure counted and shown
  local what=$1
  shift
  "$@" >"$work/out" 2>&1 || { fail "$what: exit $?"; tail -n 5 "$work/out" >&2; return 1; }
}

# GPT-2's shapes, small: 2 layers of width 64, 4 heads, 128 positions, GPT-2's 50257 ids.
mkdir -p "$work/gpt2"
cp "$tokenizer" "$work/gpt2/tokenizer.json"
/usr/bin/python3 - "$work/gpt2" <<'EOF' || fail "writing the random GPT-2 directory"
import json, sys
import numpy as np
d = sys.argv[1]
c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
     "n_positions": 128, "n_ctx": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None,
     "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
     "bos_token_id": 50256, "eos_token_id": 50256}
V, C, P = c["vocab_size"], c["n_embd"], c["n_positions"]
shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (P, C),
          "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
for i in range(c["n_layer"]):
    b = f"transformer.h.{i}."
    for n in ("ln_1", "ln_2"):
        shapes[b + n + ".weight"] = shapes[b + n + ".bias"] = (C,)
    shapes[b + "attn.c_attn.weight"], shapes[b + "attn.c_attn.bias"] = (C, 3 * C), (3 * C,)
    shapes[b + "attn.c_proj.weight"], shapes[b + "attn.c_proj.bias"] = (C, C), (C,)
    shapes[b + "mlp.c_fc.weight"], shapes[b + "mlp.c_fc.bias"] = (C, 4 * C), (4 * C,)
    shapes[b + "mlp.c_proj.weight"], shapes[b + "mlp.c_proj.bias"] = (4 * C, C), (C,)
rng = np.random.default_rng(28)
header, blobs, offset = {}, [], 0
for name, shape in shapes.items():
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        w = np.ones(shape)
    elif len(shape) == 1:
        w = np.zeros(shape)
    else:
        w = 0.02 * rng.standard_normal(shape)
    raw = np.ascontiguousarray(w, "<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
text = json.dumps(header).encode()
text += b" " * (-(8 + len(text)) % 8)
with open(f"{d}/model.safetensors", "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
with open(f"{d}/config.json", "w") as f:
    json.dump(c, f, indent=2)
EOF

# Text with what byte-level BPE must keep: punctuation, numbers, white-space runs, accents, CJK,
# emoji, right-to-left text; one document per line.
docs=("Hello world, this is GPT-2's tokenizer." "Numbers 1234567 and   three spaces, tabs	too."
  "Accents: café, naïve, Ærøskøbing; CJK: 日本語のテキスト; emoji: 👩‍💻🚀." "Right to left: שלום עולם, مرحبا بالعالم."
  "def f(x):  return x ** 2  # code")
text=""
for i in $(seq 1 40); do
  for d in "${docs[@]}"; do text+="$d ($i)"$'\n'; done
done
printf '%s' "$text" >"$work/train.txt"

run "ax-data tokenize with the Hugging Face directory" "$axdata" tokenize --tokenizer "$work/gpt2" \
  --input "$work/train.txt" --output "$work/shards"
run "ax-data inspect" "$axdata" inspect "$work/shards" --tokenizer "$work/gpt2" --samples 5
grep -q "tokenizer .*(tokenizer.json).* vocab 50257, eos 50256" "$work/out" ||
  fail "index.json: not GPT-2's tokenizer.json"
for i in 0 1 2 3 4; do
  want="${docs[$i]} (1)"
  want=${want//$'\t'/ }  # inspect shows a tab as a space
  grep -F -- "[$i] " "$work/out" | grep -qF -- "$want" ||
    fail "document $i does not decode back to its text: $want"
done

run "ax-train --init-from the directory" "$axtrain" --experiment tiny-gpt --data "$work/shards" \
  --init-from "$work/gpt2" --run-dir "$work/run" --max-steps 4 \
  --set train.eval_every=0 --set train.checkpoint_every=4 --set train.seq_len=32
grep -q "initialised from Hugging Face gpt $work/gpt2" "$work/out" || fail "not initialised"
grep -q "\"tokenizer\": \"$work/gpt2\"" "$work/run/config.json" ||
  fail "the run's data.tokenizer is not the directory"
last=$(grep -o '"loss": *[0-9.e+-]*' "$work/run/metrics.jsonl" | tail -n 1 | grep -o '[0-9.e+-]*$')

# The prompt's ids decode back to it byte for byte (a tab and a run of spaces included).
prompt=$'Hello world,\tcafé  日本 👩‍💻'
run "sample" "$axtrain" sample --run-dir "$work/run" --prompt "$prompt" --tokens 6 --temperature 0
grep -qF -- "$prompt" "$work/out" || fail "the sample does not start with its prompt"
echo "sample: $(grep -F -- "$prompt" "$work/out" | head -n 1)"

run "export" "$axtrain" export --run-dir "$work/run" --output "$work/export"
grep -q "^tokenizer: tokenizer.json" "$work/out" || fail "export: no tokenizer line"
cmp -s "$tokenizer" "$work/export/tokenizer.json" || fail "export: tokenizer.json differs"
grep -q '"vocab_size": 50257' "$work/export/config.json" || fail "export: vocab_size is not 50257"

run "ax-train --init-from the export" "$axtrain" --experiment tiny-gpt --data "$work/shards" \
  --init-from "$work/export" --run-dir "$work/again" --max-steps 3 --set train.eval_every=0 \
  --set train.seq_len=32
grep -q "\"tokenizer\": \"$work/export\"" "$work/again/config.json" ||
  fail "the run from the export does not take its tokenizer"
first=$(grep -o '"loss": *[0-9.e+-]*' "$work/again/metrics.jsonl" | head -n 1 | grep -o '[0-9.e+-]*$')
echo "first run's last loss $last, the export's first loss $first"

if ((failures > 0)); then
  echo "hf_gpt2_e2e: $failures failure(s)" >&2
  exit 1
fi
echo "hf_gpt2_e2e: all checks passed"
