#!/usr/bin/env bash
# Runs a command in a Debian root that mmdebstrap makes with setup.sh's packages for that release,
# with this checkout mounted at /embcache. The root is kept and reused while its package list (and
# this script) is unchanged on this machine; a changed list makes a new root and removes the old.
# Usage: scripts/env/debian_root.sh SUITE [--cuda] -- COMMAND...
#   SUITE   trixie (Debian 13), bookworm (Debian 12) or forky (Debian testing, the future 14:
#           LibTorch 2.14, HDF5 2.2, GCC 16; not a CI leg, see docs/install.md)
#   --cuda  the root gets setup.sh --cuda's packages (contrib's CUDA LibTorch) instead
# Environment: EMBCACHE_ROOTS (where roots are kept: /var/cache/embcache-roots), DEBIAN_MIRROR
#   (http://deb.debian.org/debian); JOBS and BUILD_DIR pass through to the command.
# Needs root, mmdebstrap (installed when missing) and unshare: the mounts live in a private mount
# namespace, so they go when the command ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=${1:?usage: scripts/env/debian_root.sh SUITE [--cuda] -- COMMAND...}
shift
flags=()
[[ ${1:-} == --cuda ]] && { flags+=(--cuda); shift; }
[[ ${1:-} == -- ]] && shift
(($#)) || { echo "debian_root.sh: no command (scripts/env/debian_root.sh SUITE -- COMMAND...)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "debian_root.sh: needs root (mmdebstrap, mount, chroot)" >&2; exit 2; }
case $suite in
  bookworm) release=12 ;;
  trixie) release=13 ;;
  forky) release=14 ;;
  *) echo "debian_root.sh: unknown suite $suite (use trixie, bookworm or forky)" >&2; exit 2 ;;
esac

if [[ -z ${EMBCACHE_ROOT_NS:-} ]]; then
  command -v mmdebstrap >/dev/null || {
    echo "debian_root.sh: installing mmdebstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
  packages=$(EMBCACHE_DEBIAN_RELEASE=$release scripts/setup.sh "${flags[@]}" --print-packages)
  key=$( (echo "$suite ${flags[*]}"; echo "$packages"; cat scripts/env/debian_root.sh scripts/env/cudnn_stand_in.sh) |
    sha256sum | cut -c1-12)
  roots=${EMBCACHE_ROOTS:-/var/cache/embcache-roots}
  name=$suite${flags:+-cuda}
  root=$roots/$name.$key
  mkdir -p "$roots"
  # A lock per name: exclusive while a root is made or removed, shared while a command runs in
  # one (fd 9 is inherited by the command), so no run removes a root in use.
  exec 9>"$roots/.$name.lock"
  flock -x 9
  if [[ ! -f $root/.embcache-root-complete ]]; then
    # Only this name's roots ("trixie.<key>", not "trixie-cuda.<key>"), never while mounted: our
    # mounts live in the command's private namespace, mmdebstrap's in its own run.
    for old in "$roots/$name".*; do
      [[ -e $old ]] || continue
      echo "debian_root.sh: removing $old (another package list, or unfinished)"
      rm -rf --one-file-system "$old"
    done
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    echo "debian_root.sh: making $root with mmdebstrap (once per package list)"
    start=$SECONDS
    opts=()
    if ((${#flags[@]})); then
      # The CUDA LibTorch goes in after the rest, with a stand-in for cuDNN: its Debian package
      # downloads cuDNN from NVIDIA, which a machine without internet access cannot reach (scripts/env/cudnn_stand_in.sh).
      packages=$(grep -vx -e libtorch-cuda-dev -e python3-torch-cuda <<<"$packages")
      opts=(--customize-hook="copy-in scripts/env/cudnn_stand_in.sh /tmp"
        --customize-hook='chroot "$1" bash /tmp/cudnn_stand_in.sh')
    fi
    # Testing's Release file expires a week after it is signed, so a mirror that is a snapshot
    # would be refused; its signature is still checked.
    [[ $suite == forky ]] && opts+=(--aptopt='Acquire::Check-Valid-Until "false"')
    # shellcheck disable=SC2086 # the package list is one name per line
    mmdebstrap --quiet --variant=apt --include="ca-certificates,$(echo $packages | tr ' ' ',')" "${opts[@]}" \
      "$suite" "$root.partial" "deb $mirror $suite main contrib non-free" >&2
    mv "$root.partial" "$root"
    touch "$root/.embcache-root-complete"
    echo "debian_root.sh: $root made in $((SECONDS - start)) s ($(du -sh "$root" | cut -f1))"
  fi
  flock -s 9
  exec unshare --mount --propagation private env EMBCACHE_ROOT_NS="$root" "$PWD/scripts/env/debian_root.sh" "$suite" "${flags[@]}" -- "$@"
fi

root=$EMBCACHE_ROOT_NS
mkdir -p "$root/embcache"
mount --bind /proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind "$PWD" "$root/embcache"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  ${JOBS:+JOBS=$JOBS} ${BUILD_DIR:+BUILD_DIR=$BUILD_DIR} /bin/bash -c 'cd /embcache && exec "$@"' debian_root "$@"
