#!/usr/bin/env bash
# PMIx key-value exchange through ax's own bootstrap (docs/bootstrap.md): ax-store-check under
# `srun --mpi=pmix -N 2 -n 4` publishes hostname:rank with PMIx_Put/Commit, fences, reads every
# rank's value, then finds rank 0's TCP store through PMIx and runs a barrier over TCP. Also the
# default store choice under PMIx, and the TCP store at the coordinator derived from the step.
#   pmix_exchange.sh BUILD_DIR REPO_DIR
source "$(dirname "$0")/lib.sh" "$@"
require_cluster
check="$BUILD/trainer/ax-store-check"
if [[ ! -x "$check" ]]; then
  bad "$check is missing: build the ax-store-check target first"
  finish
  exit
fi
mpis="$(t srun --mpi=list 2>&1)"
grep -qw pmix <<<"$mpis" || skip "srun --mpi=list offers no pmix plugin: $(tr '\n' ' ' <<<"$mpis")"

# check_ranks WHAT OUTPUT STORE: rank 0's report names 4 ranks on n1 and n2 and the store kind.
check_ranks() {
  local what="$1" out="$2" store="$3" errors=() hosts ranks
  ranks="$(grep -cE '^rank [0-3] n[12]$' <<<"$out")"
  hosts="$(grep -oE '^rank [0-3] n[12]$' <<<"$out" | awk '{print $3}' | sort -u | tr '\n' ' ')"
  ((ranks == 4)) || errors+=("$ranks 'rank R nX' lines, want 4")
  [[ "$(grep -oE '^rank [0-3] ' <<<"$out" | sort -u | wc -l)" == 4 ]] || errors+=("ranks repeat")
  [[ "$hosts" == "n1 n2 " ]] || errors+=("hosts '$hosts', want 'n1 n2 '")
  grep -qE "^ok 4 ranks \\($store " <<<"$out" || errors+=("no 'ok 4 ranks ($store ...)' line")
  if ((${#errors[@]} == 0)); then
    ok "$what: 4 ranks on $hosts($(grep -oE '^ok 4 ranks.*' <<<"$out"))"
  else
    bad "$what: ${errors[*]}"
    sed 's/^/  | /' <<<"$out" | head -n 20
  fi
}

# 1. PMIx store, and a TCP store found through it.
out="$(timeout -k 5 60 srun -J "$JOB" --mpi=pmix -N 2 -n 4 "$check" --store pmix --timeout 30 2>&1)"
rc=$?
if ((rc == 0)); then
  check_ranks "srun --mpi=pmix -N 2 -n 4 ax-store-check --store pmix" "$out" pmix
  if grep -qE '^tcp store at n1:[0-9]+ found through pmix: ok$' <<<"$out"; then
    ok "rank 0's TCP store (port 0 on n1) discovered through PMIx, barrier over TCP"
  else
    bad "no 'tcp store at n1:PORT found through pmix: ok' line"
    sed 's/^/  | /' <<<"$out" | head -n 20
  fi
else
  bad "srun --mpi=pmix ax-store-check --store pmix exited $rc"
  sed 's/^/  | /' <<<"$out" | head -n 20
fi

# 2. Without --store, a PMIx launch picks the PMIx store.
out="$(timeout -k 5 60 srun -J "$JOB" --mpi=pmix -N 2 -n 4 "$check" --timeout 30 2>&1)"
rc=$?
if ((rc == 0)); then
  check_ranks "srun --mpi=pmix ax-store-check (default store)" "$out" pmix
else
  bad "srun --mpi=pmix ax-store-check exited $rc"
  sed 's/^/  | /' <<<"$out" | head -n 20
fi

# 3. TCP store at the coordinator derived from the step (first node, port from job and step ids).
out="$(timeout -k 5 60 srun -J "$JOB" -N 2 -n 4 "$check" --store tcp --timeout 30 2>&1)"
rc=$?
if ((rc == 0)); then
  check_ranks "srun -N 2 -n 4 ax-store-check --store tcp" "$out" "tcp n1:[0-9]+"
else
  bad "srun ax-store-check --store tcp exited $rc"
  sed 's/^/  | /' <<<"$out" | head -n 20
fi
finish
