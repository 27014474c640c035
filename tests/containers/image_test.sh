#!/usr/bin/env bash
# Runs ax inside the image containers/build-squashfs.sh makes, the way Enroot and Pyxis would:
# the squashfs is unpacked (what `enroot create` does), then, in a private mount namespace,
# /proc, /sys, /dev, a tmpfs /tmp and the Pax job scripts' mounts (workspace, data, vocab) are
# mounted into it and the image's /etc/rc runs the command under the image's /etc/environment
# (chroot standing in for enroot-switchroot).
#
#   bash tests/containers/image_test.sh minimal|debootstrap BUILD_DIR REPO_DIR
#
#   minimal      the binaries, their libraries copied from this machine and /bin/sh (about 1 s on
#                2 cores; scripts/test.sh runs it, ctest label container-minimal)
#   debootstrap  the Debian 12 image users get: debootstrap, apt updates, mksquashfs (1 to 2
#                minutes and the Debian mirror; ctest label container)
#
# Checks: every binary answers --help; ax-data trains a tokenizer and writes shards inside the
# image; `ax-train --experiment tiny-gpt --max-steps 5 --device cpu` with the data and the
# vocabulary mounted read-only where the Pax scripts put them exits 0, prints the loss of step 5,
# and its metrics land in the host's workspace directory.
# Exit 0 pass, 77 skip (not root, tools missing, no mount namespaces), anything else fail.
set -uo pipefail

mode="${1:?usage: image_test.sh minimal|debootstrap BUILD_DIR REPO_DIR}"
build="${2:?usage: image_test.sh minimal|debootstrap BUILD_DIR REPO_DIR}"
repo="${3:?usage: image_test.sh minimal|debootstrap BUILD_DIR REPO_DIR}"

skip() {
  echo "SKIPPED: $*"
  exit 77
}
failures=0
ok() { echo "ok   $*"; }
bad() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

case "$mode" in
  minimal) build_args=(--minimal) ;;
  debootstrap) build_args=() ;;
  *) echo "image_test.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
[[ $(id -u) == 0 ]] || skip "needs root (chroot, mount namespaces), running as $(id -un)"
tools=(unshare chroot mount mksquashfs unsquashfs)
[[ $mode == minimal ]] || tools+=(debootstrap)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || skip "'$tool' not found (bash scripts/setup.sh --with container)"
done
unshare --mount --propagation private true 2>/dev/null ||
  skip "cannot create a mount namespace here (unshare --mount needs CAP_SYS_ADMIN)"
for b in trainer/ax-train datasets/ax-data launcher/ax-launch topology/ax-topo; do
  [[ -x $build/$b ]] || skip "$build/$b not built (cmake --build $build --target ${b#*/})"
done

work=$(mktemp -d /tmp/ax-container-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
root="$work/root"

# The image, then the root file system enroot create would make of it.
start=$SECONDS
if ! bash "$repo/containers/build-squashfs.sh" "${build_args[@]}" --from "$build" "$work/ax.sqsh" \
  >"$work/build.log" 2>&1; then
  cat "$work/build.log"
  bad "build-squashfs.sh $mode failed"
  exit 1
fi
build_s=$((SECONDS - start))
ok "image built ($mode): $(du -h "$work/ax.sqsh" | cut -f1), $build_s s"
sed 's/^/     /' "$work/build.log"
start=$SECONDS
unsquashfs -no-progress -d "$root" "$work/ax.sqsh" >/dev/null || {
  bad "unsquashfs failed"
  exit 1
}
ok "unpacked with unsquashfs: $((SECONDS - start)) s"

# in_image "SRC:DST[:ro] ..." CMD...: CMD through /etc/rc, in the image, with those mounts.
in_image() {
  local mounts="$1"
  shift
  # shellcheck disable=SC2016 # the inner shell expands its own variables
  unshare --mount --propagation private bash -euc '
    root=$1 mounts=$2
    shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs tmpfs "$root/tmp"
    for m in $mounts; do
      IFS=: read -r src dst flags <<<"$m"
      # Like Pyxis (x-create=auto): a directory for a directory, an empty file for a file.
      if [[ -d $src ]]; then
        mkdir -p "$root$dst"
      else
        mkdir -p "$(dirname "$root$dst")"
        touch "$root$dst"
      fi
      mount --bind "$src" "$root$dst"
      [[ $flags != ro ]] || mount -o remount,bind,ro "$root$dst"
    done
    env_args=()
    while IFS= read -r line; do
      [[ -z $line || $line == "#"* ]] || env_args+=("$line")
    done <"$root/etc/environment"
    exec env -i "${env_args[@]}" "$(command -v chroot)" "$root" /bin/sh /etc/rc "$@"
  ' _ "$root" "$mounts" "$@"
}

# 1. Every binary runs (its libraries are all in the image) and prints its usage.
for b in ax-train ax-data ax-launch ax-topo; do
  if out=$(in_image "" "$b" --help 2>&1) && grep -q "^usage: $b" <<<"$out"; then
    ok "$b --help in the image"
  else
    bad "$b --help in the image: $(head -n 3 <<<"$out")"
  fi
done

# 2. A tokenizer and shards, made inside the image from text mounted read-only.
mkdir -p "$work/text" "$work/workspace"
cat "$repo"/docs/*.md "$repo/README.md" >"$work/text/text.txt"
start=$SECONDS
if in_image "$work/text:/mnt/text:ro $work/workspace:/opt/paxml/workspace" sh -c '
    ax-data train-tokenizer --input /mnt/text/text.txt --vocab-size 500 \
      --output /opt/paxml/workspace/spm.model &&
    ax-data tokenize --tokenizer /opt/paxml/workspace/spm.model --input /mnt/text/text.txt \
      --output /opt/paxml/workspace/shards --threads 1' >"$work/data.log" 2>&1 &&
  [[ -s $work/workspace/spm.model && -s $work/workspace/shards/index.json ]]; then
  ok "ax-data train-tokenizer + tokenize in the image: $((SECONDS - start)) s"
else
  sed 's/^/     /' "$work/data.log" | tail -n 20
  bad "ax-data in the image"
  exit 1
fi

# 3. A short CPU training with the mounts of the Pax job scripts: workspace read-write, the
#    shards at /mnt/datasets and the SentencePiece model at /mnt/vocab, both read-only.
pax_mounts="$work/workspace:/opt/paxml/workspace $work/workspace/shards:/mnt/datasets:ro"
pax_mounts+=" $work/workspace/spm.model:/mnt/vocab:ro"
start=$SECONDS
in_image "$pax_mounts" ax-train --experiment tiny-gpt --data /mnt/datasets --tokenizer /mnt/vocab \
  --run-dir /opt/paxml/workspace/run --max-steps 5 --device cpu --set train.eval_every=0 \
  --set train.log_every=1 >"$work/train.log" 2>&1
rc=$?
train_s=$((SECONDS - start))
loss_line=$(grep -E "step +5/5 \| loss [0-9]+\.[0-9]+" "$work/train.log" | tail -n 1)
if ((rc == 0)) && [[ -n $loss_line ]]; then
  ok "ax-train tiny-gpt, 5 steps on the CPU in the image: $train_s s; ${loss_line%%| lr*}"
else
  sed 's/^/     /' "$work/train.log" | tail -n 20
  bad "ax-train in the image: exit $rc, loss of step 5 ${loss_line:+printed}${loss_line:-missing}"
fi
# OpenBLAS is loaded with dlopen, so ldd does not show it: the image must carry it all the same.
if grep -q "cannot load libopenblas" "$work/train.log"; then
  bad "OpenBLAS missing from the image: $(grep "cannot load libopenblas" "$work/train.log")"
else
  blas=$(grep -o "OpenBLAS [0-9.]* core [A-Za-z0-9]*" "$work/train.log" | head -n 1)
  ok "OpenBLAS in the image: ${blas:-not used by this build}"
fi
if grep -q '"step": *5[,}]' "$work/workspace/run/metrics.jsonl" 2>/dev/null; then
  ok "metrics.jsonl of step 5 in the host's workspace ($work/workspace/run)"
else
  bad "no step 5 in $work/workspace/run/metrics.jsonl on the host"
fi

echo "container test ($mode): image $build_s s, training $train_s s, $failures failure(s)"
((failures == 0))
