#!/bin/sh
# test_build_tools.sh: README's two commands in either order, and again.
# build-aux/build.sh configures again when a program configure looks for
# appears after a build (cuobjdump, installed by install-deps.sh test into
# $BURST_CUDA_TOOLS/bin after the quickstart configured; the cuDNN frontend's
# header in $BURST_CUDNN_FRONTEND/include, where configure looks for it), and
# not otherwise; configure and tests/kernels/test_cuda_sass.sh find cuobjdump
# in that folder.
# Fake tools in a scratch folder, a scratch source tree with a configure that
# counts its runs; no network, nothing installed.
set -u
src=${BURST_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passes=0
check() { # check WHAT CONDITION...
    what=$1
    shift
    if "$@"; then
        echo "PASS: $what"
        passes=$((passes + 1))
    else
        echo "FAIL: $what"
        failures=$((failures + 1))
    fi
}

# A source tree whose configure counts its runs and writes an empty Makefile.
tree=$work/src
mkdir -p "$tree/build-aux"
cp "$src/build-aux/build.sh" "$src/build-aux/tool-paths.sh" "$tree/build-aux/"
touch -d '2000-01-01' "$tree/configure.ac" "$tree/Makefile.am"
printf '#!/bin/sh\necho "autogen must not run" >&2\nexit 1\n' >"$tree/autogen.sh"
cat >"$tree/configure" <<EOF
#!/bin/sh
echo "configure \$*" >>"$work/configure.runs"
printf 'all:\n\t@:\n' >Makefile
EOF
chmod +x "$tree/autogen.sh" "$tree/configure"
touch "$tree/Makefile.in"
tools=$work/cuda-tools
export BURST_CUDA_TOOLS="$tools" BURST_BUILD_DIR="$work/build" BURST_CONFIGURE_FLAGS=--fake
runs() { [ -f "$work/configure.runs" ] && wc -l <"$work/configure.runs" || echo 0; }
build() { sh "$tree/build-aux/build.sh" >"$work/build.out" 2>&1; }
# fake_tool NAME: an executable NAME in the installer's folder
fake_tool() {
    mkdir -p "$tools/bin"
    printf '#!/bin/sh\necho "fake %s $*" >>"%s/tool.runs"\n' "$1" "$work" >"$tools/bin/$1"
    chmod +x "$tools/bin/$1"
}

build
check "the first build configures" [ "$(runs)" -eq 1 ]
build
check "a second build with nothing changed does not configure" [ "$(runs)" -eq 1 ]
fake_tool cuobjdump
build
check "cuobjdump appearing in \$BURST_CUDA_TOOLS/bin configures again" [ "$(runs)" -eq 2 ]
check "build.sh says why it configures again" grep -q "the programs it looks for changed" \
    "$work/build.out"
build
check "and once only" [ "$(runs)" -eq 2 ]
rm "$tools/bin/cuobjdump"
build
check "cuobjdump going configures again" [ "$(runs)" -eq 3 ]
BURST_CONFIGURE_FLAGS=--other build
check "other flags configure again" [ "$(runs)" -eq 4 ]
mkdir -p "$work/cudnn-frontend/include"
: >"$work/cudnn-frontend/include/cudnn_frontend.h"
BURST_CUDNN_FRONTEND="$work/cudnn-frontend" BURST_CONFIGURE_FLAGS=--other build
check "the cuDNN frontend's header appearing in \$BURST_CUDNN_FRONTEND/include configures again" \
    [ "$(runs)" -eq 5 ]

# Where the real configure and the SASS test look, when the fake cuobjdump in
# the installer's folder is the only one (no toolkit's, none in PATH).
fake_tool cuobjdump
# shellcheck source=build-aux/tool-paths.sh
. "$src/build-aux/tool-paths.sh"
first=$(burst_tool_find cuobjdump | head -n 1)
if [ "$first" != "$tools/bin/cuobjdump" ]; then
    echo "SKIP: this machine's cuobjdump ($first) comes first: the searches not checked"
elif ! (mkdir "$work/configured" && cd "$work/configured" &&
    "$src/configure" --with-cuda >"$work/configure.out" 2>&1); then
    echo "SKIP: configure --with-cuda fails here (no CUDA toolkit): the searches not checked"
else
    found=$(sed -n 's/^CUOBJDUMP = //p' "$work/configured/Makefile")
    check "configure finds cuobjdump in \$BURST_CUDA_TOOLS/bin (found '$found')" \
        [ "$found" = "$tools/bin/cuobjdump" ]
    # The SASS test in a CUDA build configured before cuobjdump was installed:
    # a fake build whose Makefile names none, a fake cuobjdump that prints
    # HMMA in every attention kernel instance.
    fake=$work/build-fake
    mkdir -p "$fake/kernels/cuda"
    echo '#define HAVE_CUDA 1' >"$fake/config.h"
    echo 'CUOBJDUMP = ' >"$fake/Makefile"
    : >"$fake/kernels/cuda/attention_fwd.o"
    : >"$fake/kernels/cuda/attention_bwd.o"
    cat >"$tools/bin/cuobjdump" <<'EOF'
#!/bin/sh
case "$2" in *attention_fwd.o) kernels=fwd ;; *) kernels="bwd_dkdv bwd_dq" ;; esac
for arch in sm_80 sm_90; do
    echo "arch = $arch"
    for k in $kernels; do
        for i in 1 2 3 4; do
            echo "    Function : _Z${i}bk_attn_${k}_kernel"
            echo "        HMMA.16816.F32.BF16 R0, R4, R8, R0 ;"
        done
    done
done
EOF
    out=$(env -u CUOBJDUMP BURST_TEST_BUILDDIR="$fake" BURST_TEST_SRCDIR="$src" \
        sh "$src/tests/kernels/test_cuda_sass.sh" 2>&1)
    code=$?
    check "the SASS test finds cuobjdump in \$BURST_CUDA_TOOLS/bin" [ $code -eq 0 ]
    [ $code -eq 0 ] || printf '%s\n' "$out" | tail -3 | sed 's/^/    /'
fi

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
