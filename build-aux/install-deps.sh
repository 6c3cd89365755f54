#!/bin/sh
# install-deps.sh [build|test]: installs the Debian packages burstengine needs.
# As root it runs apt-get itself; otherwise it prints the exact command to run.
# Safe to re-run: it installs only what is missing.
set -e
profile=${1:-build}
packages="build-essential autoconf automake libtool pkg-config libucx-dev libhdf5-dev \
libinih-dev check libsubunit-dev libpmix-dev libopenblas-openmp-dev"
case "$profile" in
build) ;;
test) packages="$packages ucx-utils hdf5-tools slurm-wlm munge" ;;
*) echo "install-deps.sh: unknown profile '$profile' (build or test)" >&2; exit 2 ;;
esac

missing=
for p in $packages; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "burstengine needs these Debian packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y$missing" >&2
    exit 1
fi
echo "installing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
