#!/usr/bin/env bash
# scripts/demo.sh (what scripts/main.sh runs after building) on BUILD_DIR's binaries: 60 steps,
# then to step 80 from the same directory. Checks that every stage ran (tokenizer, shards verified,
# training, sample), that the loss fell, and that the second run resumed from the first run's
# checkpoint instead of starting again.
#   tests/e2e/demo_test.sh BUILD_DIR REPO_DIR
set -uo pipefail
build="${1:?usage: demo_test.sh BUILD_DIR REPO_DIR}"
repo="${2:?usage: demo_test.sh BUILD_DIR REPO_DIR}"
for b in datasets/ax-data trainer/ax-train; do
  [[ -x "$build/$b" ]] || { echo "FAIL $build/$b is not built"; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/ax-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failures=$((failures + 1)); }

if AX_DEMO_STEPS=60 bash "$repo/scripts/demo.sh" "$build" "$work/out" >"$work/first.log" 2>&1; then
  ok "first run (60 steps) exits 0"
else
  bad "first run failed:"; tail -20 "$work/first.log"
fi
[[ -f "$work/out/spm.model" ]] && ok "tokenizer trained" || bad "no spm.model"
for split in train val; do
  [[ -f "$work/out/shards/$split/index.json" ]] && ok "$split shards written" ||
    bad "no $split shards"
done
metrics="$work/out/run/metrics.jsonl"
first_loss=$(python3 -c 'import json,sys; r=[j for j in map(json.loads, open(sys.argv[1])) if "loss" in j]; print(r[0]["loss"])' "$metrics" 2>/dev/null)
last=$(python3 -c 'import json,sys; r=[j for j in map(json.loads, open(sys.argv[1])) if "loss" in j]; print(r[-1]["step"], r[-1]["loss"])' "$metrics" 2>/dev/null)
read -r last_step last_loss <<<"$last"
if [[ "$last_step" == 60 ]] && python3 -c "import sys; sys.exit(not float('$last_loss') < float('$first_loss') - 0.5)"; then
  ok "loss fell from $first_loss to $last_loss over 60 steps"
else
  bad "metrics.jsonl: first loss '$first_loss', last step '$last_step' loss '$last_loss'"
fi
sample=$(sed -n '/^== sample/,$p' "$work/first.log" | grep -m1 '^And God said')
[[ "$sample" == "And God said"* && ${#sample} -gt 20 ]] && ok "sample: ${sample:0:60}..." ||
  bad "no sample after '== sample': '$sample'"

if AX_DEMO_STEPS=80 bash "$repo/scripts/demo.sh" "$build" "$work/out" >"$work/second.log" 2>&1; then
  ok "second run (to step 80) exits 0"
else
  bad "second run failed:"; tail -20 "$work/second.log"
fi
if grep -qi "resum" "$work/second.log" && ! grep -q "^step  *1/" "$work/second.log" &&
  grep -q "^step  *80/80" "$work/second.log"; then
  ok "second run resumed from step 60 and reached 80"
else
  bad "second run did not resume: $(grep -i -m3 'resum\|^step' "$work/second.log" | tr '\n' ' ')"
fi
((failures == 0)) && echo "demo_e2e: passed" || echo "demo_e2e: $failures failure(s)"
((failures == 0))
