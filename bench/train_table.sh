#!/usr/bin/env bash
# Measures the training targets with the attn CLI:
#   1. the plain `attn train reverse` (its defaults): time, fresh accuracy and
#      the best head's mean weight on the mirrored position;
#   2. the plain `attn train add`: time and whole-sum accuracy;
#   3. dot vs additive attention on reverse: steps and training seconds to
#      99% token accuracy on 1000 fresh sequences (checked every 25 steps),
#      for seeds 1..3, as a Markdown table.
# usage: bench/train_table.sh [path/to/attn] [threads]
set -euo pipefail
ATTN=${1:-build/attn}
T=${2:-1}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), threads $T"
echo
echo "== attn train reverse (defaults)"
$ATTN train reverse --threads "$T" --save "$OUT/rev.bin" 2>/dev/null
$ATTN eval "$OUT/rev.bin" reverse --threads "$T" | grep -E "accuracy|best"
echo
echo "== attn train add (defaults: 3-digit numbers)"
$ATTN train add --threads "$T" --save "$OUT/add.bin" 2>/dev/null
echo
echo "== reverse: dot vs additive, steps and seconds to 99% token accuracy"
echo
echo "| attention | seed | steps to 99% | training time (s) | tokens/s |"
echo "| --- | --- | --- | --- | --- |"
for att in dot additive; do
  for seed in 1 2 3; do
    log="$OUT/$att$seed.log"
    $ATTN train reverse --attention "$att" --seed "$seed" --threads "$T" \
      --eval-every 25 --stop-at 0.99 --eval 0 --save "$OUT/x.bin" \
      >"$log" 2>&1
    steps=$(sed -n 's/^reached .* at step \([0-9]*\)$/\1/p' "$log")
    secs=$(sed -n 's/^trained [0-9]* steps in \([0-9.]*\) s (\([0-9]*\) tokens.*/\1/p' "$log")
    tps=$(sed -n 's/^trained [0-9]* steps in [0-9.]* s (\([0-9]*\) tokens.*/\1/p' "$log")
    echo "| $att | $seed | ${steps:-not reached} | $secs | $tps |"
  done
done
