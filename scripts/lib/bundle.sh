# shellcheck shell=bash disable=SC2034  # bundle_* are the results its callers read
# Carrying ax's binaries to a GPU machine that has no Debian -dev packages (sourced, not run):
# bench/gpu_bench.sh --bundle and scripts/gpu-check.sh bundle copy with bundle_copy here; on the
# GPU machine both find the libraries a binary still lacks with bundle_find_libraries.
#
# What never travels: the driver (libcuda, libnvidia-*: the machine's own), cuBLAS/cuBLASLt
# (0.6 GB) and NCCL (0.2 GB): the GPU machine has them in its CUDA toolkit or in the `nvidia`
# wheels beside PyTorch, where bundle_find_libraries looks.

# Prints the absolute paths of the shared libraries BIN loads (ldd's resolution), one per line,
# the dynamic loader included.
bundle_ldd_paths() {  # BIN
  ldd "$1" | awk '/=> \// {print $3} /^[[:space:]]*\/.*ld-linux/ {print $1}'
}

# bundle_copy DIR BIN...: BINs into DIR/bin, every library they load into DIR/lib except those
# above, and glibc with its loader into DIR/lib/glibc: used only when the GPU machine's glibc is
# older than the one the binaries were built against, and never put on another program's path.
bundle_copy() {
  local dir="$1" bin lib
  shift
  mkdir -p "$dir/bin" "$dir/lib/glibc"
  for bin in "$@"; do
    cp -f "$bin" "$dir/bin/"
    while read -r lib; do
      case "$(basename "$lib")" in
        libcuda.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | libnvidia-*) ;;
        ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so*)
          cp -fL "$lib" "$dir/lib/glibc/" ;;
        *) cp -fL "$lib" "$dir/lib/" ;;
      esac
    done < <(bundle_ldd_paths "$bin")
  done
}

# The libraries a bundle leaves to the GPU machine, as its binaries name them.
bundle_machine_libraries() {  # BIN...
  local bin
  for bin in "$@"; do ldd "$bin"; done |
    awk '$1 ~ /^(libcublas|libcublasLt|libcuda|libnccl)\./ {print $1}' | sort -u | tr '\n' ' '
}

# bundle_find_libraries PYTHON BIN...: on the machine that runs BINs, sets
#   bundle_libpath   the library path for them: the bundle's lib/ (BIN/../lib), then the
#                    directories holding what ldd still cannot find (the CUDA toolkit, the
#                    `nvidia` wheels beside PYTHON's PyTorch, conda), then $LD_LIBRARY_PATH;
#   bundle_loader    the command prefix: empty, or the bundle's glibc loader when this machine's
#                    glibc is older than the binaries' (ld-linux --library-path ...);
#   bundle_problem   empty, or why the binaries cannot run here (the libraries still missing).
# Only these programs get the path: Python and nvidia-smi keep the machine's own.
bundle_find_libraries() {
  local python="$1" bundle_lib missing name found d py_nvidia nvidia_dirs=()
  shift
  bundle_libpath="${LD_LIBRARY_PATH:-}"
  bundle_loader=()
  bundle_problem=""
  bundle_lib="$(cd "$(dirname "$1")/.." && pwd)/lib"
  [[ -d "$bundle_lib" ]] && bundle_libpath="$bundle_lib${bundle_libpath:+:$bundle_libpath}"
  py_nvidia="$("$python" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null || true)"
  read -r -a nvidia_dirs <<<"$py_nvidia"
  local search=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
    /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib /opt/conda/lib
    "${nvidia_dirs[@]}")
  local out
  out="$(bundle_ldd "$@")"
  missing="$(bundle_missing <<<"$out")"
  for name in $missing; do
    found=""
    for d in "${search[@]}"; do
      [[ -d "$d" ]] || continue
      found="$(find "$d" -maxdepth 3 -name "$name" -print -quit 2>/dev/null || true)"
      [[ -n "$found" ]] && break
    done
    [[ -n "$found" ]] && bundle_libpath="$(dirname "$found")${bundle_libpath:+:$bundle_libpath}"
  done
  if [[ -n "$missing" ]]; then
    out="$(bundle_ldd "$@")"
    missing="$(bundle_missing <<<"$out")"
  fi
  if [[ -n "$missing" ]]; then
    bundle_problem="$(basename "$1") needs libraries this machine lacks: $(echo "$missing" |
      tr '\n' ' ')"
    if echo "$missing" | grep -q 'libcublas'; then
      bundle_problem+="(the build's CUDA major version; cuBLASLt here: $(find /usr/local/cuda*/ \
        "${nvidia_dirs[@]}" -name 'libcublasLt.so.*' 2>/dev/null | tr '\n' ' '))"
    fi
  elif grep -q "GLIBC.*not found" <<<"$out"; then
    if [[ -x "$bundle_lib/glibc/ld-linux-x86-64.so.2" ]]; then
      bundle_loader=("$bundle_lib/glibc/ld-linux-x86-64.so.2" --library-path
        "$bundle_lib/glibc:$bundle_libpath")
    else
      bundle_problem="$(basename "$1") needs a newer glibc: $(grep -m1 GLIBC <<<"$out")"
    fi
  fi
}

bundle_ldd() {  # BIN...: ldd of each under the bundle's library path so far
  local bin
  for bin in "$@"; do LD_LIBRARY_PATH="$bundle_libpath" ldd "$bin" 2>&1 || true; done
}

bundle_missing() {  # ldd's output on stdin: the sonames it could not find, one per line
  awk '/not found/ && /=>/ {print $1}' | sort -u
}
