#!/usr/bin/env bash
# What the ax binaries need at run time: the shared libraries ldd lists, plus the one ax loads
# itself with dlopen (OpenBLAS, trainer/backend/src/cpu_blas.cc) and that library's own
# dependencies, plus (--packages) the verbs providers NCCL and Gloo load. NVML
# (libnvidia-ml.so.1) is not listed: it belongs to the driver, and the container runtime's hook
# (enroot's 98-nvidia.sh, the NVIDIA container toolkit) mounts it.
#
#   containers/runtime-deps.sh --libs BINARY...      library paths, one a line, as the loader
#                                                    finds them (symlinks not resolved)
#   containers/runtime-deps.sh --packages BINARY...  the dpkg packages that own them, one a line
#   containers/runtime-deps.sh --unpackaged BINARY...  the libraries no package owns (a CUDA
#                                                    toolkit from NVIDIA's runfile or wheels)
#
# Used by containers/Dockerfile (the runtime stage installs the packages the build stage found)
# and containers/build-squashfs.sh; both copy the unpackaged libraries into /opt/ax/lib. Fails
# naming the library when one is missing.
set -euo pipefail

die() {
  echo "runtime-deps: $*" >&2
  exit 1
}

# Libraries ax opens with dlopen: a missing one only slows ax down, so ldd cannot see them.
dlopened=(libopenblas.so.0)

(($# >= 2)) || die "usage: runtime-deps.sh --libs|--packages|--unpackaged BINARY..."
mode=$1
shift
case $mode in
  --libs | --packages | --unpackaged) ;;
  *) die "unknown mode '$mode' (--libs, --packages or --unpackaged)" ;;
esac

# ldd's resolved paths of one object; a "not found" line is an error.
ldd_paths() {
  local out
  out=$(ldd "$1") || die "ldd $1 failed"
  if grep -q "not found" <<<"$out"; then
    die "$1 needs a library that is not installed: $(grep "not found" <<<"$out" | xargs)"
  fi
  # "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out"
}

# Where the loader finds a soname ax opens with dlopen, from the ld.so cache.
cache_path() {
  ldconfig -p | awk -v name="$1" '$1 == name && $NF ~ /^\// && !found { found = $NF }
                                  END { print found }'
}

libs=()
add_libs_of() {
  local found
  found=$(ldd_paths "$1")
  [[ -z $found ]] || mapfile -t -O "${#libs[@]}" libs <<<"$found"
}
for bin in "$@"; do
  [[ -f $bin ]] || die "no such file: $bin"
  add_libs_of "$bin"
done
for name in "${dlopened[@]}"; do
  path=$(cache_path "$name")
  [[ -n $path ]] || die "$name is not installed (Debian: libopenblas0-pthread)"
  libs+=("$path")
  add_libs_of "$path"
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)

if [[ $mode == --libs ]]; then
  printf '%s\n' "${libs[@]}"
  exit 0
fi

# dpkg records a file under the path its package ships; with merged /usr (Debian 12, Ubuntu
# 24.04) the loader may report /lib/... for a file recorded as /usr/lib/..., or the other way
# round, and a soname may be a symlink (update-alternatives) to the file the package owns.
owner() {
  local path=$1 candidate real found
  real=$(readlink -f "$path")
  for candidate in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
    [[ $candidate == /* ]] || continue
    # "libzstd1:amd64: /usr/lib/x86_64-linux-gnu/libzstd.so.1"
    if found=$(dpkg-query -S "$candidate" 2>/dev/null); then
      echo "${found%%[:,]*}"
      return 0
    fi
  done
  return 1
}

# NCCL (and Gloo through libibverbs) open the InfiniBand/RoCE verbs library and its device
# providers (mlx5, efa, ...) with dlopen; Debian and Ubuntu only recommend the providers.
verbs=()
if printf '%s\n' "${libs[@]##*/}" | grep -qE '^lib(nccl|ibverbs)\.so'; then
  verbs=(libibverbs1 ibverbs-providers)
fi

for lib in "${libs[@]}"; do
  if pkg=$(owner "$lib"); then
    [[ $mode != --packages ]] || echo "$pkg"
  else
    [[ $mode != --unpackaged ]] || echo "$lib"
  fi
done | {
  cat
  if [[ $mode == --packages ]] && ((${#verbs[@]} > 0)); then printf '%s\n' "${verbs[@]}"; fi
} | sort -u
