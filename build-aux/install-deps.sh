#!/bin/sh
# install-deps.sh [build|test]: installs the Debian packages burstengine needs.
# As root it runs apt-get itself; otherwise it prints the exact command to run.
# Safe to re-run: it installs only what is missing.
# With the test profile on a machine with the CUDA toolkit, it also installs
# cuobjdump and nvdisasm (the SASS checks of the kernels) from their PyPI
# wheels into $BURST_CUDA_TOOLS (default /opt/burst/cuda-tools), with links in
# its bin/, where configure looks for them, when the toolkit lacks them. The
# test profile also makes the oracle of the Hugging Face tests: a venv in
# $BURST_HF_ORACLE (default /opt/burst/hf-oracle) over Debian's python3-torch
# (CPU only, about 250 MB, where PyPI's torch brings several GB of CUDA wheels)
# with transformers from PyPI, pinned to the last release that supports
# Debian 12's torch 1.13.
set -e
# shellcheck source=build-aux/tool-paths.sh
. "$(cd "$(dirname "$0")" && pwd)/tool-paths.sh"
profile=${1:-build}
packages="build-essential autoconf automake libtool pkg-config libucx-dev libhdf5-dev \
libinih-dev libjansson-dev check libsubunit-dev libpmix-dev libopenblas-openmp-dev"
case "$profile" in
build) ;;
test) packages="$packages ucx-utils hdf5-tools slurm-wlm munge python3-pip python3-torch python3-venv" ;;
*) echo "install-deps.sh: unknown profile '$profile' (build or test)" >&2; exit 2 ;;
esac

# cuobjdump and nvdisasm of the toolkit's major version, when the toolkit has
# nvcc but not them (its minimal installs): PyPI's wheels of the same major.
install_cuda_tools() {
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [ -x "$nvcc" ] || return 0
    cuda_bin=$(dirname "$nvcc")
    [ -x "$cuda_bin/cuobjdump" ] && [ -x "$cuda_bin/nvdisasm" ] && return 0
    tools=$burst_cuda_tools
    [ -x "$tools/bin/cuobjdump" ] && return 0
    major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    if [ "$(id -u)" -ne 0 ] && [ -z "${BURST_CUDA_TOOLS:-}" ]; then
        echo "the SASS checks need cuobjdump; run as root, or set BURST_CUDA_TOOLS to a writable folder" >&2
        return 1
    fi
    echo "installing cuobjdump and nvdisasm $major.x into $tools"
    python3 -m pip install -q --disable-pip-version-check --target "$tools/wheels" \
        "nvidia-cuda-cuobjdump~=$major.0" "nvidia-cuda-nvdisasm~=$major.0" 2>&1 |
        grep -v 'Running pip as the .root. user' >&2 || true
    mkdir -p "$tools/bin"
    for t in cuobjdump nvdisasm; do
        found=$(find "$tools/wheels" -path "*/bin/$t" -type f | head -n 1)
        [ -n "$found" ] || { echo "install-deps.sh: no $t in the $t wheel" >&2; return 1; }
        ln -sf "$found" "$tools/bin/$t"
    done
}

# The transformers oracle: a venv over the system Python (whose site-packages
# hold Debian's torch), with transformers added.
install_hf_oracle() {
    venv=$burst_hf_oracle
    "$venv/bin/python" -c "import torch, transformers" 2>/dev/null && return 0
    if [ "$(id -u)" -ne 0 ] && [ -z "${BURST_HF_ORACLE:-}" ]; then
        echo "the Hugging Face tests need transformers; run as root, or set BURST_HF_ORACLE to a writable folder" >&2
        return 1
    fi
    echo "installing transformers 4.46.3 into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "transformers==4.46.3" 2>&1 |
        grep -v 'Running pip as the .root. user' >&2 || true
    "$venv/bin/python" -c "import torch, transformers" ||
        { echo "install-deps.sh: transformers does not import in $venv" >&2; return 1; }
}

test_tools() {
    install_cuda_tools && install_hf_oracle
}

missing=
for p in $packages; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
if [ -z "$missing" ]; then
    [ "$profile" = test ] && test_tools
    exit 0
fi

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
[ "$profile" = test ] && test_tools
exit 0
