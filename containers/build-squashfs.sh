#!/usr/bin/env bash
# Makes an Enroot/Pyxis image (a squashfs file) of ax without Docker, from binaries built on
# this machine (scripts/build.sh, or an install prefix):
#
#   containers/build-squashfs.sh [--minimal] [--from DIR] [--rootfs DIR] OUTPUT.sqsh
#
#   (default)   Debian 12 (debootstrap --variant=minbase) with the packages that own the binaries'
#               run-time libraries, brought up to date from bookworm-updates and -security. The
#               binaries must come from a Debian 12 machine (the libraries are then the same).
#   --minimal   no distribution: the binaries, the libraries ldd finds for them (copied from this
#               machine), /bin/sh and a few /etc files. Seconds instead of minutes; what the CI
#               test uses (tests/containers). Not for users: no shell tools, no apt.
#   --from DIR  a build tree (DIR/trainer/ax-train ...) or an install prefix (DIR/bin/ax-train);
#               default build/cpu
#   --rootfs DIR  assemble the root file system in DIR (new or empty) and keep it
#
# Both images hold /opt/ax/bin/{ax-train,ax-data,ax-launch,ax-topo} (not spank_ax.so: the SPANK
# plugin runs in slurmstepd on the host) and Enroot's image configuration: /etc/environment,
# /etc/rc, /etc/rc.local, /etc/fstab (NVIDIA/enroot doc/image-format.md). Libraries no package
# owns (a CUDA toolkit from a runfile or wheels) are copied into /opt/ax/lib. The mirror is the
# Debian one apt uses here (/etc/apt/sources.list*); AX_DEBIAN_MIRROR overrides it. mksquashfs
# takes ENROOT_SQUASH_OPTIONS as enroot import does (default "-comp lzo -noD").
# Needs root, debootstrap and squashfs-tools (scripts/setup.sh --with container).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
binaries=(ax-train ax-data ax-launch ax-topo)
suite=bookworm

die() {
  echo "build-squashfs: $*" >&2
  exit 1
}
usage="usage: containers/build-squashfs.sh [--minimal] [--from DIR] [--rootfs DIR] OUTPUT.sqsh"

minimal=0 from="$repo/build/cpu" rootfs="" output=""
while (($# > 0)); do
  case "$1" in
    --minimal) minimal=1 ;;
    --from) from="${2:?$usage}"; shift ;;
    --rootfs) rootfs="${2:?$usage}"; shift ;;
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0
      ;;
    -*) die "unknown option '$1' ($usage)" ;;
    *) [[ -z $output ]] || die "$usage"; output=$1 ;;
  esac
  shift
done
[[ -n $output ]] || die "$usage"
[[ $(id -u) == 0 ]] || die "needs root (chroot, debootstrap, files owned by root in the image)"
need=(mksquashfs ldconfig)
((minimal)) || need+=(debootstrap chroot)
for tool in "${need[@]}"; do
  command -v "$tool" >/dev/null || die "'$tool' not found: bash scripts/setup.sh --with container"
done

# The four binaries, from an install prefix or a build tree.
declare -A where=([ax-train]=trainer [ax-data]=datasets [ax-launch]=launcher [ax-topo]=topology)
bins=()
for b in "${binaries[@]}"; do
  if [[ -x $from/bin/$b ]]; then
    bins+=("$from/bin/$b")
  elif [[ -x $from/${where[$b]}/$b ]]; then
    bins+=("$from/${where[$b]}/$b")
  else
    die "$b not found in $from/bin or $from/${where[$b]} (build it: bash scripts/build.sh)"
  fi
done

if [[ -z $rootfs ]]; then
  rootfs=$(mktemp -d /tmp/ax-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  chmod 755 "$rootfs"  # it becomes the image's /; apt's _apt user must be able to enter it
else
  mkdir -p "$rootfs"
  [[ -z $(ls -A "$rootfs") ]] || die "--rootfs $rootfs is not empty"
  rootfs=$(cd "$rootfs" && pwd)
fi

# The binaries' libraries: copied (--minimal), or installed from their packages and copied only
# where no package owns them.
deps() {  # MODE [EXTRA_BINARY...]
  local out
  out=$(bash "$here/runtime-deps.sh" "$1" "${bins[@]}" "${@:2}") || die "runtime-deps.sh $1 failed"
  [[ -z $out ]] || echo "$out"
}
libs=() packaged=() unpackaged=()
sh=$(readlink -f /bin/sh)  # runs /etc/rc in the minimal image, as enroot start does
if ((minimal)); then
  mapfile -t libs < <(deps --libs "$sh")
  ((${#libs[@]} > 0)) || die "runtime-deps.sh found no libraries"
else
  mapfile -t packaged < <(deps --packages)
  mapfile -t unpackaged < <(deps --unpackaged)
  ((${#packaged[@]} > 0)) || die "runtime-deps.sh found no packages"
fi

# The first "deb"/"URIs" entry of apt's sources that ends in /debian (or /debian-security).
apt_mirror() {
  local suffix=$1
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -oE "https?://[^ ]+/${suffix}/?( |$)" | head -n 1 | tr -d ' ' || true
}

copy_into_rootfs() {  # PATH...: each file at the same path, symlinks followed
  local f
  for f in "$@"; do
    mkdir -p "$rootfs$(dirname "$f")"
    cp -L "$f" "$rootfs$f"
  done
}

start=$SECONDS
if ((minimal)); then
  # The same top-level layout as this machine (merged /usr: /lib -> usr/lib, ...).
  for d in bin sbin lib lib32 lib64 libx32; do
    if [[ -L /$d ]]; then
      target=$(readlink "/$d")
      ln -s "$target" "$rootfs/$d"
      [[ $target == /* ]] || mkdir -p "$rootfs/$target"
    fi
  done
  mkdir -p "$rootfs"/{etc,tmp,proc,sys,dev,root,usr/bin,usr/lib,var/tmp}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  copy_into_rootfs "${libs[@]}"
  # Directories outside the loader's defaults (/usr/local/cuda/lib64, ...) go to the ld.so cache.
  mkdir -p "$rootfs/etc/ld.so.conf.d"
  printf '%s\n' "${libs[@]%/*}" | sort -u >"$rootfs/etc/ld.so.conf.d/ax.conf"
  copy_into_rootfs "$sh"
  mkdir -p "$rootfs/bin"
  [[ -e $rootfs/bin/sh ]] || ln -s "$sh" "$rootfs/bin/sh"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' \
    >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$rootfs/etc/hosts"
  echo "build-squashfs: minimal root file system: $((SECONDS - start)) s"
else
  # shellcheck source=/dev/null
  [[ $(. /etc/os-release && echo "${VERSION_CODENAME:-}") == "$suite" ]] ||
    die "the binaries must be built on Debian 12 ($suite) for a Debian 12 image; use --minimal"
  mirror=${AX_DEBIAN_MIRROR:-$(apt_mirror debian)}
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(apt_mirror debian-security)
  security=${security:-http://deb.debian.org/debian-security}
  include=$(IFS=,; echo "${packaged[*]}")
  echo "build-squashfs: debootstrap $suite from $mirror with $include"
  debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" \
    >"$rootfs.debootstrap.log" 2>&1 ||
    die "debootstrap failed: $(tail -n 5 "$rootfs.debootstrap.log")"
  rm -f "$rootfs.debootstrap.log"
  echo "build-squashfs: debootstrap: $((SECONDS - start)) s"
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
    "$mirror" "$suite" "$mirror" "$suite" "$security" "$suite" >"$rootfs/etc/apt/sources.list"
  # Updates in a private mount namespace, so /proc and /dev leave with it.
  update_start=$SECONDS
  # shellcheck disable=SC2016 # the inner shell expands $1
  unshare --mount --propagation private bash -euc '
    mount -t proc proc "$1/proc"
    mount --rbind /dev "$1/dev"
    chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
      sh -c "apt-get update -qq && apt-get dist-upgrade -y -qq >/dev/null && apt-get clean"
  ' _ "$rootfs" || die "apt-get in the image failed"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  echo "build-squashfs: updates: $((SECONDS - update_start)) s"
fi

# ax itself, and the libraries no package provides.
install -d "$rootfs/opt/ax/bin"
install -m 755 "${bins[@]}" "$rootfs/opt/ax/bin/"
mkdir -p "$rootfs/etc/ld.so.conf.d"
[[ -e $rootfs/etc/ld.so.conf ]] || echo 'include /etc/ld.so.conf.d/*.conf' >"$rootfs/etc/ld.so.conf"
if ((!minimal && ${#unpackaged[@]} > 0)); then
  install -d "$rootfs/opt/ax/lib"
  cp -L "${unpackaged[@]}" "$rootfs/opt/ax/lib/"
  echo /opt/ax/lib >"$rootfs/etc/ld.so.conf.d/ax.conf"
fi
ldconfig -r "$rootfs"

# Enroot's image configuration, as enroot import writes it from a Docker image's config.
# /etc/environment: the image's values win over the host's under Pyxis, so nothing here names a
# variable Slurm, Pyxis, the SPANK plugin or the user sets (SLURM_*, PMIX_*, AX_*, NCCL_*, CUDA_*).
cat >"$rootfs/etc/environment" <<'EOF'
PATH=/opt/ax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
NVIDIA_VISIBLE_DEVICES=all
NVIDIA_DRIVER_CAPABILITIES=compute,utility
EOF
revision=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)
cat >"$rootfs/etc/rc" <<EOF
# ax image (containers/build-squashfs.sh$( ((minimal)) && echo ' --minimal'), ax $revision)
cd / && unset OLDPWD || exit 1

if [ -s /etc/rc.local ]; then
    . /etc/rc.local
fi

if [ \$# -gt 0 ]; then
    exec "\$@"
else
    exec /bin/sh
fi
EOF
cat >"$rootfs/etc/rc.local" <<'EOF'
# This file is sourced by /etc/rc when the container starts.
EOF
: >"$rootfs/etc/fstab"

squash_start=$SECONDS
rm -f "$output"
read -ra squash_options <<<"${ENROOT_SQUASH_OPTIONS:--comp lzo -noD}"
mksquashfs "$rootfs" "$output" -all-root -no-progress -quiet "${squash_options[@]}" >/dev/null ||
  die "mksquashfs failed"
echo "build-squashfs: mksquashfs: $((SECONDS - squash_start)) s"
echo "build-squashfs: $output: $(du -h "$output" | cut -f1), $((SECONDS - start)) s in all"
