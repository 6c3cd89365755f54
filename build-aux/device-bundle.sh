#!/bin/sh
# device-bundle.sh: packs what a run on a machine with a GPU needs into
# .device-bundle/ (ignored by git), for a machine that has the CUDA runtime
# but none of this project's build dependencies: bundle.tar.xz holds `burst`
# and the CUDA test programs of the CUDA build in ${BURST_BUILD_DIR:-_build}
# and the shared libraries they load (all but the C library's, the compiler
# runtime's and CUDA's own, which the machine's CUDA installation provides,
# matching its driver); beside it build-aux/device-run.sh, which unpacks it
# and runs there. Compressed, since OpenBLAS alone is 36 MB: about 15 MB.
#
#   sh build-aux/device-bundle.sh          # here, after sh tests/run.sh
#   sh .device-bundle/device-run.sh tests  # there; see device-run.sh
set -eu
cd "$(dirname "$0")/.."
build=${BURST_BUILD_DIR:-_build}
out=.device-bundle
programs="tests/kernels/test_dev_ops_cuda tests/kernels/test_dev_attention_cuda
          tests/kernels/test_dev_streams_cuda tests/attn/ring_worker"
if ! grep -q '^#define HAVE_CUDA 1' "$build/config.h" 2>/dev/null; then
    echo "device-bundle: $build is not a CUDA build (run sh tests/run.sh first)" >&2
    exit 1
fi
# cuDNN's attention, where configure found the frontend (device-run.sh cudnn)
if grep -q '^#define HAVE_CUDNN_FRONTEND 1' "$build/config.h"; then
    programs="$programs tests/kernels/test_cudnn_validate"
fi
# shellcheck disable=SC2086 # $programs is a list
make -s -C "$build" burst $programs
rm -rf "$out"
stage=$out/stage
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/burst" "$stage/bin/"
for p in $programs; do cp "$build/$p" "$stage/bin/"; done
ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | ld-linux*) ;;
    libstdc++.so* | libgcc_s.so*) ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libnccl.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
    esac
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
echo "$commit" > "$stage/commit"
cp -r profiles "$stage/" # burst plan time's device profiles (device-run.sh plan-time)
tar -C "$stage" -cJf "$out/bundle.tar.xz" bin lib commit profiles
rm -rf "$stage"
cp build-aux/device-run.sh "$out/"
echo "device-bundle: $(du -sh "$out" | cut -f1) in $out (commit $commit)"
