#!/usr/bin/env bash
# Installs every Debian package ax needs to build, test and run its demo. Idempotent: a package
# already installed is left alone, and nothing is downloaded when everything is present.
# Used by the README's commands, .ci/run and containers/Dockerfile. The names are Debian 12's;
# Ubuntu 24.04 (the NVIDIA CUDA images that containers/Dockerfile builds on) has them all too.
#
#   scripts/setup.sh                 build + test + demo packages
#   scripts/setup.sh --with oracle   those plus an optional group (repeatable)
#   scripts/setup.sh --print         print the package list and exit
#
# Optional groups:
#   oracle   PyTorch for Debian's /usr/bin/python3: the PyTorch oracle test
#            (tests/trainer/oracle) and the training benchmark's peer (bench/torch_peer.py)
#   slurm    Slurm daemons, client and munge for the local cluster (scripts/slurm-cluster.sh)
#   container  debootstrap and squashfs-tools: an Enroot/Pyxis image without Docker
#            (containers/build-squashfs.sh) and its tests (tests/containers)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-dev               # libFuzzer and sanitizer runtimes (clang's default version)
  clang-format                        # the layout check of scripts/test.sh
  # libraries (one line per CMake dependency; see cmake/AxDependencies.cmake)
  libzstd-dev zstd                    # shard compression
  libsentencepiece-dev sentencepiece  # tokenizer (and spm_encode, the benchmark's peer)
  libpcre2-dev                        # tokenizer.json: pre-tokenizer regexes (\p{L}, lookahead)
  libutf8proc-dev                     # tokenizer.json: NFC/NFKC normalization, grapheme clusters
  time                                # peak memory of each program the data benchmark runs
  libxxhash-dev                       # frame checksums
  libssl-dev                          # libcrypto: HMAC-SHA256 of the TCP store's handshake
  nlohmann-json3-dev                  # index.json, jsonl input
  libcli11-dev                        # command lines of every program (header-only)
  libgtest-dev                        # unit tests
  protobuf-compiler libprotobuf-dev   # TensorBoard event decoder in the trainer's config tests
  libhwloc-dev                        # topology discovery
  libpmix-dev                         # PMIx bootstrap
  libslurm-dev                        # SPANK plugin header
  libgloo-dev                         # CPU communicator
  libopenblas-dev                     # CPU GEMMs
  # real English text for the demo and the tests (no downloads at run time)
  bible-kjv fortunes
)

declare -A groups=(
  [oracle]="python3-torch python3-numpy"
  [slurm]="slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libslurm-dev libpmix-dev libhwloc-dev hwloc"
  [container]="debootstrap squashfs-tools"
)

print=0
while (($# > 0)); do
  case "$1" in
    --print) print=1 ;;
    --with)
      group="${2:-}"
      if [[ -z "$group" || -z "${groups[$group]+set}" ]]; then
        echo "setup: --with needs a group, one of: ${!groups[*]}" >&2
        exit 2
      fi
      read -ra extra <<<"${groups[$group]}"
      packages+=("${extra[@]}")
      shift
      ;;
    *)
      echo "setup: unknown argument '$1' (usage: setup.sh [--with GROUP]... [--print])" >&2
      exit 2
      ;;
  esac
  shift
done

if ((print)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
