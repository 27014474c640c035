#!/usr/bin/env bash
# Installs every Debian package ax needs to build, test and run its demo. Idempotent: a package
# already installed is left alone, and nothing is downloaded when everything is present.
# Used by the README's commands, .ci/run and containers/Dockerfile.
#
#   scripts/setup.sh            build + test + demo packages
#   scripts/setup.sh --print    print the package list and exit
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-14-dev            # libFuzzer and sanitizer runtimes
  # libraries (one line per CMake dependency; see cmake/AxDependencies.cmake)
  libzstd-dev zstd                    # shard compression
  libsentencepiece-dev sentencepiece  # tokenizer (and spm_encode, the benchmark's peer)
  libxxhash-dev                       # frame checksums
  nlohmann-json3-dev                  # index.json, jsonl input
  libgtest-dev                        # unit tests
  libhwloc-dev                        # topology discovery
  libpmix-dev                         # PMIx bootstrap
  libslurm-dev                        # SPANK plugin header
  libgloo-dev                         # CPU communicator
  libopenblas-dev                     # CPU GEMMs
  # real English text for the demo and the tests (no downloads at run time)
  bible-kjv fortunes
)

if [[ "${1:-}" == "--print" ]]; then
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
