#!/usr/bin/env bash
# scripts/layers.py against the build's targets (BUILD/ax-parts.json): every include of the tree
# follows the parts' links; an include added up the layers in a copy of the tree is caught and
# named; docs/architecture.md's picture is the one the targets give.
#   tests/scripts/layers_test.sh REPO_DIR BUILD_DIR
set -uo pipefail
repo="${1:?usage: layers_test.sh REPO_DIR BUILD_DIR}"
build="${2:?usage: layers_test.sh REPO_DIR BUILD_DIR}"
parts="$build/ax-parts.json"
layers=(python3 "$repo/scripts/layers.py")
failures=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; failures=$((failures + 1)); }

if out=$("${layers[@]}" check --parts "$parts" --root "$repo" 2>&1); then
  ok "the tree: $out"
else
  bad "the tree has includes against the layers:"; echo "$out"
fi

# A copy of the parts' folders with one include up the layers: the backend reaching for a model.
work=$(mktemp -d "${TMPDIR:-/tmp}/ax-layers.XXXXXX")
trap 'rm -rf "$work"' EXIT
for d in common topology job_context datasets launcher spank_plugin trainer; do
  cp -r "$repo/$d" "$work/$d"
done
victim=trainer/backend/src/tensor.cc
line=$(($(wc -l <"$work/$victim") + 1))
echo '#include "ax/trainer/models/model.h"' >>"$work/$victim"
want="$victim:$line: includes ax/trainer/models/model.h of ax_trainer_models, but"
want+=" ax_trainer_backend does not link ax_trainer_models"
out=$("${layers[@]}" check --parts "$parts" --root "$work" 2>&1)
rc=$?
if ((rc == 1)) && grep -qF "$want" <<<"$out"; then
  ok "an upward include is refused: $(head -1 <<<"$out")"
else
  bad "an upward include was not refused as expected (exit $rc): $out"
fi
# A private header of another part through a relative path.
echo '#include "../../models/src/layers.h"' >"$work/trainer/optim/src/sneak.cc"
out=$("${layers[@]}" check --parts "$parts" --root "$work" 2>&1)
if grep -qF "trainer/optim/src/sneak.cc:1: includes ../../models/src/layers.h, a private header of ax_trainer_models" <<<"$out"; then
  ok "a relative include of another part's private header is refused"
else
  bad "a relative include of another part's private header was not refused: $out"
fi

if grep -q '"spank_ax"' "$parts"; then
  if out=$("${layers[@]}" graph --parts "$parts" --check "$repo/docs/architecture.md" 2>&1); then
    ok "$out"
  else
    bad "docs/architecture.md's picture differs from the targets:"; echo "$out"
  fi
else
  echo "skip the picture: this build has no SPANK plugin (Slurm headers), so not every part"
fi
((failures == 0))
