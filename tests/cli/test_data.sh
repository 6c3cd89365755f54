#!/bin/sh
# test_data.sh: `burst data` end to end: import from text, bin and npy round-trips
# (checked with h5dump, from hdf5-tools, which build-aux/install-deps.sh test
# installs: without it the test fails), synth passkey then validate and info, and
# bad inputs refused with exit 2 and the file named.
set -u
: "${BURST:?BURST is not set (run through make check)}"
: "${BURST_TEST_SRCDIR:?BURST_TEST_SRCDIR is not set (run through make check)}"
T=$(mktemp -d /tmp/burst-test-data-XXXXXX)
trap 'rm -rf "$T"' EXIT
# shellcheck source=tests/lib/expect.sh
. "$BURST_TEST_SRCDIR/tests/lib/expect.sh"
command -v h5dump >/dev/null 2>&1 ||
    { echo "FAIL: h5dump not found: it checks the corpora's contents (apt-get install hdf5-tools)"; exit 1; }
# tokens FILE: the tokens of a corpus, one per line (needs h5dump).
tokens() { h5dump -d /tokens -y -w 0 "$1" | sed -n '/DATA {/,/}/p' | tr -c '0-9\n' ' ' |
    tr -s ' ' '\n' | grep -v '^$'; }

expect 0 "usage: burst data" "$BURST" data --help
for sub in import synth info validate; do
    expect 0 "usage: burst data $sub" "$BURST" data $sub --help
done
expect 2 "unknown subcommand" "$BURST" data frobnicate
# info and validate: options from one table each; --help lists them, bad ones are refused
expect 0 "  --seq-len N " "$BURST" data validate --help
expect 2 "burst data validate: --seq-len: bad value '0'" "$BURST" data validate --seq-len 0 x.h5
expect 2 "burst data validate: --seq-len: bad value 'ten'" "$BURST" data validate --seq-len ten x.h5
expect 2 "burst data validate: unknown option '--deep'" "$BURST" data validate --deep x.h5
expect 2 "burst data info: unknown option '--seq-len'" "$BURST" data info --seq-len 4 x.h5
expect 2 "(\`burst data info --help\` lists the options)" "$BURST" data info -v x.h5
expect 2 "usage: burst data validate" "$BURST" data validate --seq-len 4

# Text: bytes in, bytes out, a document per line.
printf 'ab\ncd\n' >"$T/a.txt"
expect 0 "6 tokens" "$BURST" data import --from text "$T/a.txt" -o "$T/a.h5" --docs-per-line
expect 0 "tokenizer:   bytes" "$BURST" data info "$T/a.h5"
expect 0 "documents:   2" "$BURST" data info "$T/a.h5"
expect 0 "OK" "$BURST" data validate "$T/a.h5"
[ "$(tokens "$T/a.h5" | tr '\n' ' ')" = "97 98 10 99 100 10 " ] || fail "text tokens: $(tokens "$T/a.h5")"
h5dump "$T/a.h5" >/dev/null || fail "h5dump cannot read a.h5"

# Bin: little-endian uint16; vocab from max + 1.
printf '\001\000\002\001\377\000' >"$T/t.bin"
expect 0 "3 tokens, vocab 259" "$BURST" data import --from bin "$T/t.bin" -o "$T/b.h5"
[ "$(tokens "$T/b.h5" | tr '\n' ' ')" = "1 258 255 " ] || fail "bin tokens: $(tokens "$T/b.h5")"
expect 2 "t.bin" "$BURST" data import --from bin "$T/t.bin" --vocab 200 -o "$T/b2.h5"
[ -e "$T/b2.h5" ] && fail "a refused import left b2.h5"
printf '\001' >"$T/odd.bin"
expect 2 "odd.bin" "$BURST" data import --from bin "$T/odd.bin" -o "$T/b3.h5"

# Npy version 1, '<u4', shape (3,): the header is padded to 118 bytes (data at 128).
hdr="{'descr': '<u4', 'fortran_order': False, 'shape': (3,), }"
{ printf '\223NUMPY\001\000\166\000'; printf '%-117s\n' "$hdr"; \
  printf '\005\000\000\000\000\001\000\000\011\000\000\000'; } >"$T/x.npy"
expect 0 "3 tokens, vocab 1000" "$BURST" data import --from npy "$T/x.npy" --vocab 1000 \
    --tokenizer mytok -o "$T/n.h5"
expect 0 "tokenizer:   mytok" "$BURST" data info "$T/n.h5"
[ "$(tokens "$T/n.h5" | tr '\n' ' ')" = "5 256 9 " ] || fail "npy tokens: $(tokens "$T/n.h5")"
# --doc-sep: token 256 ends a document (5 256 | 9): two documents, the separator in the first
expect 0 "3 tokens" "$BURST" data import --from npy "$T/x.npy" --doc-sep 256 -o "$T/ds.h5"
expect 0 "documents:   2" "$BURST" data info "$T/ds.h5"
h5dump -d /doc_offsets -y -w 0 "$T/ds.h5" | grep -q '0, 2' || fail "--doc-sep offsets: $(h5dump -d /doc_offsets "$T/ds.h5")"
expect 2 "--doc-sep: bad value 'x'" "$BURST" data import --from npy "$T/x.npy" --doc-sep x -o "$T/bad.h5"
# bin of uint32 tokens: 70000, 1
for b in 160 021 001 000 001 000 000 000; do printf "\\$b"; done >"$T/w.bin"
expect 0 "2 tokens, vocab 70001, uint32" "$BURST" data import --from bin --dtype uint32 "$T/w.bin" -o "$T/w.h5"
[ "$(tokens "$T/w.h5" | tr '\n' ' ')" = "70000 1 " ] || fail "uint32 bin tokens: $(tokens "$T/w.h5")"
expect 2 "--dtype applies to --from bin only" "$BURST" data import --from npy "$T/x.npy" --dtype uint32 -o "$T/bad.h5"
expect 2 "whole number of uint32 tokens" "$BURST" data import --from bin --dtype uint32 "$T/t.bin" -o "$T/bad.h5"
# Npy refusals: Fortran order, 2-D, float, truncated.
for bad in "'fortran_order': True, 'shape': (3,)|Fortran" "'fortran_order': False, 'shape': (3, 1)|not 1-D"; do
    h="{'descr': '<u4', ${bad%|*}, }"
    { printf '\223NUMPY\001\000\166\000'; printf '%-117s\n' "$h"; printf '000011112222'; } >"$T/bad.npy"
    expect 2 "${bad#*|}" "$BURST" data import --from npy "$T/bad.npy" -o "$T/bad.h5"
done
h="{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
{ printf '\223NUMPY\001\000\166\000'; printf '%-117s\n' "$h"; printf '000011112222'; } >"$T/bad.npy"
expect 2 "'<f4' is not supported" "$BURST" data import --from npy "$T/bad.npy" -o "$T/bad.h5"
head -c 134 "$T/x.npy" >"$T/short.npy"
expect 2 "truncated" "$BURST" data import --from npy "$T/short.npy" -o "$T/bad.h5"
expect 2 "not a .npy" "$BURST" data import --from npy "$T/a.txt" -o "$T/bad.h5"

# Synth passkey: validate, info, and every answer is the sample's last token.
expect 0 "passkey, 5 samples" "$BURST" data synth --task passkey --seq-len 100 --samples 5 \
    --distance 60:90 --pairs 2 --seed 7 -o "$T/p.h5"
expect 0 "OK (505 tokens" "$BURST" data validate --seq-len 100 "$T/p.h5"
expect 0 "OK (505 tokens" "$BURST" data validate "$T/p.h5" --seq-len 100
expect 1 "fewer than one sequence" "$BURST" data validate --seq-len 1000 "$T/p.h5"
expect 0 "/answers int64 [5, 3]" "$BURST" data info "$T/p.h5"
expect 0 "copy, 3 samples" "$BURST" data synth --task copy --seq-len 64 --samples 3 -o "$T/c.h5"
expect 0 "OK" "$BURST" data validate "$T/c.h5"
expect 2 "--distance" "$BURST" data synth --task passkey --seq-len 100 --samples 5 \
    --distance 5:200 -o "$T/p2.h5"
h5dump "$T/p.h5" >/dev/null || fail "h5dump cannot read p.h5"
all=$(tokens "$T/p.h5" | tr '\n' ' ')
ans=$(h5dump -d /answers -y -w 0 "$T/p.h5" | sed -n '/DATA {/,/}/p' | tr -c '0-9\n' ' ' |
    tr -s ' ' '\n' | grep -v '^$' | tr '\n' ' ')
set -- $ans
[ $# -ge 3 ] || fail "no answers read from p.h5"
while [ $# -ge 3 ]; do
    want=$(echo "$all" | tr ' ' '\n' | sed -n "$(($1 + $2 + 1))p")
    [ "$want" = "$3" ] || fail "answer at $1+$2 is $3 but the token there is $want"
    key=$(echo "$all" | tr ' ' '\n' | sed -n "$(($1 + $2))p")
    query=$(echo "$all" | tr ' ' '\n' | sed -n "$(($1 + $2 - 1))p")
    [ "$query" = 2 ] || fail "no QUERY marker before the answer of sample at $1"
    shift 3
done

# Bad corpora: garbage, truncated, missing; info exits 2, validate exits 1; both name the file.
head -c 3000 /dev/urandom >"$T/garbage.h5"
expect 2 "garbage.h5: not an HDF5 file" "$BURST" data info "$T/garbage.h5"
expect 1 "garbage.h5" "$BURST" data validate "$T/garbage.h5"
# a bad corpus first: the good one after it is still described
expect 2 "documents:   2" "$BURST" data info "$T/garbage.h5" "$T/a.h5"
"$BURST" data synth --task passkey --seq-len 4000 --samples 50 -o "$T/big.h5" >/dev/null
size=$(wc -c <"$T/big.h5")
head -c $((size / 2)) "$T/big.h5" >"$T/cut.h5"
expect 1 "cut.h5" "$BURST" data validate "$T/cut.h5"
expect 2 "nope.h5: cannot read" "$BURST" data info "$T/nope.h5"
expect 2 "a.txt" "$BURST" data info "$T/a.txt"
expect 2 "missing.txt" "$BURST" data import --from text "$T/missing.txt" -o "$T/m.h5"
expect 2 "usage" "$BURST" data import --from text -o "$T/m.h5"

[ "$fails" -eq 0 ] && echo "test_data: all passed"
[ "$fails" -eq 0 ]
