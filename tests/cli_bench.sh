#!/bin/bash
# attn bench: runs small cases, prints JSON with the keys of issues 3 and 4
# (forward and backward lines), checks each case against the reference, and
# rejects bad options.
set -u
ATTN="$1"
fail=0
out=$("$ATTN" bench --json --threads 2 --cases 128:16,129:7:causal:f16,300:40:bf16:h2 --ref-max 200 2>&1)
rc=$?
if [ $rc -ne 0 ]; then echo "bench exited $rc: $out"; fail=1; fi
for key in impl B H Lq Lk D causal dtype threads ms gflops ceiling_gflops extra_bytes; do
  n=$(printf '%s\n' "$out" | grep -c "\"$key\": ")
  # the 3 sgemm lines lack most keys; 2 ref + 3 flash case lines have all
  if [ "$n" -lt 5 ]; then echo "key $key in $n lines"; fail=1; fi
done
[ "$(printf '%s\n' "$out" | grep -c '"impl": "flash"')" -eq 3 ] || { echo "want 3 flash lines"; fail=1; }
[ "$(printf '%s\n' "$out" | grep -c '"impl": "ref"')" -eq 2 ] || { echo "want 2 ref lines (L <= 200)"; fail=1; }
[ "$(printf '%s\n' "$out" | grep -c '"impl": "sgemm"')" -eq 3 ] || { echo "want 3 sgemm lines"; fail=1; }
# the backward of each case (L <= --backward-max, default 4096), checked;
# a bf16 case on a CPU with AVX512_BF16 adds the bf16 products' forward
# and backward (flash_bf16, flash_bf16_bwd)
n16=$(printf '%s\n' "$out" | grep -c '"impl": "flash_bf16"')
n16b=$(printf '%s\n' "$out" | grep -c '"impl": "flash_bf16_bwd"')
[ "$n16" -eq "$n16b" ] || { echo "want a bf16 backward line per bf16 forward line ($n16, $n16b)"; fail=1; }
if grep -qw avx512_bf16 /proc/cpuinfo && [ "$n16b" -ne 1 ]; then echo "AVX512_BF16 CPU: want 1 flash_bf16_bwd line"; fail=1; fi
[ "$(printf '%s\n' "$out" | grep -c '"impl": "flash_bwd"')" -eq 3 ] || { echo "want 3 flash_bwd lines"; fail=1; }
for key in '"bwd_fwd_ratio": ' '"max_rel_err": '; do
  [ "$(printf '%s\n' "$out" | grep -c "$key")" -eq $((3 + n16b)) ] || { echo "want $((3 + n16b)) backward lines with $key"; fail=1; }
done
fwd_only=$("$ATTN" bench --json --threads 1 --cases 40:8,100:8 --backward-max 64 2>&1)
[ "$(printf '%s\n' "$fwd_only" | grep -c '"impl": "flash_bwd"')" -eq 1 ] || { echo "--backward-max 64: want 1 backward line"; fail=1; }
"$ATTN" bench --cases 33:5:causal --threads 2 | grep -Eq "^ +33 +5 causal f32  bwd .* [0-9.]+$" || { echo "no bwd row with a bwd/fwd ratio"; fail=1; }
"$ATTN" bench --backward-max -1 2>/dev/null; [ $? -eq 2 ] || { echo "bad --backward-max not a usage error"; fail=1; }
# the table form names the ceiling
"$ATTN" bench --cases 64:8 --threads 1 | grep -q "sgemm 1024^3 (the ceiling)" || { echo "no ceiling line"; fail=1; }
"$ATTN" bench --help | grep -q "usage: attn bench" || { echo "no help"; fail=1; }
# the score-modifier cases: every row, and the packed output checked
sm=$("$ATTN" bench --score-mods --lengths 64,96 --reps 1 --threads 2 2>&1) || { echo "bench --score-mods failed: $sm"; fail=1; }
for row in "| plain |" "| softcap 30 |" "| ALiBi |" "| sinks |" "| user score_mod (ALiBi) |" "| user mask_mod (causal) + block mask |" "| packed / sum |" "max |diff| of the output"; do
  printf '%s\n' "$sm" | grep -qF "$row" || { echo "bench --score-mods: no '$row'"; fail=1; }
done
"$ATTN" bench --score-mods --lengths 64,8 2>/dev/null; [ $? -eq 2 ] || { echo "bad --lengths not a usage error"; fail=1; }
"$ATTN" bench --cases 12x 2>/dev/null; [ $? -eq 2 ] || { echo "bad case not a usage error"; fail=1; }
"$ATTN" bench --bogus 2>/dev/null; [ $? -eq 2 ] || { echo "bad option not a usage error"; fail=1; }
"$ATTN" bench --tiles 0x4 2>/dev/null; [ $? -eq 2 ] || { echo "bad tiles not a usage error"; fail=1; }
"$ATTN" bench --tiles 16x8/3 --cases 50:9:causal --threads 2 | grep -q "flash tiles 16x8 (bands of 3" || { echo "--tiles BQxBK/RC not applied"; fail=1; }
[ $fail -eq 0 ] && echo "cli_bench: ok"
exit $fail
