# shellcheck shell=sh
# expect.sh: sourced by the shell tests. fail counts a failure in $fails;
# expect CODE NEEDLE CMD...: CMD exits CODE and its output contains NEEDLE.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() {
    code=$1 needle=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" -eq "$code" ] || fail "$* exited $rc, not $code: $out"
    case $out in *"$needle"*) ;; *) fail "$* does not print '$needle': $out" ;; esac
}
