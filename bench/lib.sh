# shellcheck shell=bash
# Sourced by the bench scripts.

# bench_need BUILD_DIR REL_PATH...: exits 2, naming the cmake command that builds them all, when
# one of the binaries (paths inside BUILD_DIR) is missing.
bench_need() {
  local build="$1" rel targets=()
  shift
  for rel in "$@"; do targets+=("$(basename "$rel")"); done
  for rel in "$@"; do
    if [[ ! -x "$build/$rel" ]]; then
      echo "no $build/$rel: cmake --build $build --target ${targets[*]}" >&2
      exit 2
    fi
  done
}
