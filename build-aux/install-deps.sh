#!/bin/sh
# install-deps.sh [build|test]: installs the Debian packages burstengine needs.
# As root it runs apt-get itself; otherwise it prints the exact command to run.
# Safe to re-run: it installs only what is missing.
# On a machine with the CUDA toolkit (nvcc), either profile also installs the
# cuDNN frontend's headers (header-only C++, for cuDNN's fused attention,
# kernels/cuda/cudnn_sdpa.cc) from the include/ of its PyPI wheel, pinned to
# 1.32.0, into $BURST_CUDNN_FRONTEND/include (default /opt/burst/cudnn-frontend),
# where configure looks for them (with pip, python3-pip when there is none).
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
cudnn_frontend_version=1.32.0

# The CUDA toolkit's nvcc, where configure finds it; nothing without a toolkit.
toolkit_nvcc() {
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [ -x "$nvcc" ] && echo "$nvcc"
}
# pip fetches the frontend's wheel (install_cudnn_frontend), where it is needed.
if toolkit_nvcc >/dev/null && [ ! -f "$burst_cudnn_frontend/include/cudnn_frontend.h" ] &&
    ! python3 -m pip --version >/dev/null 2>&1; then
    packages="$packages python3-pip"
fi

# cuobjdump and nvdisasm of the toolkit's major version, when the toolkit has
# nvcc but not them (its minimal installs): PyPI's wheels of the same major.
install_cuda_tools() {
    nvcc=$(toolkit_nvcc) || return 0
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

# The cuDNN frontend's headers, from the wheel's include/ (the same in every
# wheel of a release: the wheel named by the tags below is fetched whatever the
# local Python and machine, and only include/ is unpacked).
install_cudnn_frontend() {
    toolkit_nvcc >/dev/null || return 0
    dest=$burst_cudnn_frontend
    [ -f "$dest/include/cudnn_frontend.h" ] && return 0
    if [ "$(id -u)" -ne 0 ] && [ -z "${BURST_CUDNN_FRONTEND:-}" ]; then
        echo "cuDNN's attention needs the cuDNN frontend's headers; run as root, or set BURST_CUDNN_FRONTEND to a writable folder" >&2
        return 1
    fi
    echo "installing the cuDNN frontend $cudnn_frontend_version headers into $dest/include"
    tmp=$(mktemp -d)
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
        -d "$tmp" "nvidia-cudnn-frontend==$cudnn_frontend_version" 2>&1 |
        grep -v 'Running pip as the .root. user' >&2 || true
    wheel=$(find "$tmp" -name 'nvidia_cudnn_frontend-*.whl' | head -n 1)
    if [ -n "$wheel" ]; then
        python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' "$wheel" "$tmp/wheel"
    fi
    if [ ! -f "$tmp/wheel/include/cudnn_frontend.h" ]; then
        echo "install-deps.sh: no include/cudnn_frontend.h from the nvidia-cudnn-frontend $cudnn_frontend_version wheel" >&2
        rm -rf "$tmp"
        return 1
    fi
    mkdir -p "$dest"
    rm -rf "$dest/include"
    mv "$tmp/wheel/include" "$dest/include"
    rm -rf "$tmp"
}

# What either profile installs beside the Debian packages, then the test
# profile's tools.
extra_tools() {
    install_cudnn_frontend || return 1
    [ "$profile" = test ] || return 0
    install_cuda_tools && install_hf_oracle
}

missing=
for p in $packages; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
if [ -z "$missing" ]; then
    extra_tools
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
extra_tools
exit 0
