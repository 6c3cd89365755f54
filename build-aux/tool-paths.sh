# shellcheck shell=sh
# tool-paths.sh: sourced (not run) by build.sh, install-deps.sh and
# tests/kernels/test_cuda_sass.sh. The programs configure looks for
# (AC_PATH_PROG in configure.ac) and the folders it looks in, so that build.sh
# reconfigures when one of them appears (a package or install-deps.sh test
# installed it after the last configure) and the SASS test finds cuobjdump
# where install-deps.sh puts it; where the cuDNN frontend's headers go (their
# appearing reconfigures too: configure looks there by default); and where the
# transformers oracle lives.
#   BURST_CUDA_TOOLS  where install-deps.sh test installs cuobjdump and nvdisasm
#                     (default /opt/burst/cuda-tools; the tools in its bin/)
#   BURST_CUDNN_FRONTEND  where install-deps.sh installs the cuDNN frontend's
#                     headers on a machine with the CUDA toolkit (default
#                     /opt/burst/cudnn-frontend; cudnn_frontend.h in its include/)
#   BURST_HF_ORACLE   the Python venv install-deps.sh test makes for the tests
#                     oracle, Hugging Face transformers (default /opt/burst/hf-oracle)
burst_cuda_tools=${BURST_CUDA_TOOLS:-/opt/burst/cuda-tools}
burst_cudnn_frontend=${BURST_CUDNN_FRONTEND:-/opt/burst/cudnn-frontend}
burst_hf_oracle=${BURST_HF_ORACLE:-/opt/burst/hf-oracle}
burst_tool_names="nvcc cuobjdump srun ucx_perftest"
# PATH, the toolkit's default folder, the installer's folder: the union of the
# folders configure searches for these programs.
burst_tool_path="$PATH:/usr/local/cuda/bin:$burst_cuda_tools/bin"

# burst_tool_find NAME: every executable NAME in burst_tool_path, one a line,
# in search order (the first is the one a search finds).
burst_tool_find() {
    (
        IFS=:
        for dir in $burst_tool_path; do
            if [ -n "$dir" ] && [ -f "$dir/$1" ] && [ -x "$dir/$1" ]; then echo "$dir/$1"; fi
        done
    )
}

# burst_tool_state: every copy of every program of burst_tool_names, one a
# line, and the cuDNN frontend's header where install-deps.sh puts it; it
# differs from the last configure's when one appeared or went.
burst_tool_state() {
    for name in $burst_tool_names; do
        burst_tool_find "$name"
    done
    if [ -f "$burst_cudnn_frontend/include/cudnn_frontend.h" ]; then
        echo "$burst_cudnn_frontend/include/cudnn_frontend.h"
    fi
}
