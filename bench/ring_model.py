"""The performance model of ring attention (docs/ring-model.md): per-step
compute against per-step transfer, the shard length at which the transfer
hides, and the predicted efficiency for P = 8 .. 1024.

usage: /usr/bin/python3 bench/ring_model.py [--rate GFLOPS] [--markdown]

--rate is one rank's flash forward rate (GFLOP/s, 4 H D per visible pair),
e.g. from `attn bench --ring ... ` ("compute alone") or `attn bench`
(flash GFLOP/s / threads x cores per rank). Default 81 GFLOP/s: one core of
the development machine (docs/performance.md: 162.7 GFLOP/s on 2 threads, L = 16384).
"""
import argparse
import math

LINKS = [("10 Gb/s", 10e9 / 8, 20e-6), ("100 Gb/s", 100e9 / 8, 3e-6),
         ("400 Gb/s", 400e9 / 8, 2e-6)]  # bytes/s, latency per message


def step_times(n, H, Hkv, D, F, bw, lat, causal, s=4):
    """Compute and transfer of one ring step for a shard of n positions.

    Full mask: every step is an n x n block, 4 H D n^2 FLOPs. Causal with the
    zigzag layout: each step off the diagonal is half visible (two of the
    four chunk pairs), so compute halves while the transfer does not.
    The transfer is the K and V block: 2 Hkv n D s bytes."""
    tc = 4.0 * H * D * n * n / F * (0.5 if causal else 1.0)
    tx = 2.0 * Hkv * n * D * s / bw + lat
    return tc, tx


def hide_length(H, Hkv, D, F, bw, lat, causal, s=4):
    """Smallest n with compute >= transfer (a quadratic in n)."""
    a = 4.0 * H * D / F * (0.5 if causal else 1.0)
    b = 2.0 * Hkv * D * s / bw
    return (b + math.sqrt(b * b + 4 * a * lat)) / (2 * a)


def efficiency(L, P, H, Hkv, D, F, bw, lat, causal):
    """P T_c over the ring's time: the first step needs no block from the
    ring, each of the P - 1 others takes max(T_c, T_x) (compute overlapped
    with the next transfer)."""
    n = L / P
    tc, tx = step_times(n, H, Hkv, D, F, bw, lat, causal)
    return P * tc / (tc + (P - 1) * max(tc, tx)), tc, tx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=81.0)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    shapes = [("this machine's shape: L=16384 H=8 D=64, ranks of 1 core",
               16384, 8, 8, 64, a.rate * 1e9),
              ("an example: L=2^20 H=32 D=128, ranks of 64 such cores",
               1 << 20, 32, 32, 128, 64 * a.rate * 1e9)]
    for name, L, H, Hkv, D, F in shapes:
        print("\n%s (rank rate %.0f GFLOP/s)\n" % (name, F / 1e9))
        print("| link | hides from n = (full) | (causal zigzag) |")
        print("| --- | ---: | ---: |")
        for ln, bw, lat in LINKS:
            print("| %s | %d | %d |" % (ln, math.ceil(hide_length(H, Hkv, D, F, bw, lat, 0)),
                                         math.ceil(hide_length(H, Hkv, D, F, bw, lat, 1))))
        print()
        print("| P | n = L/P | T_c full (ms) | " +
              " | ".join("E %s full / causal" % ln for ln, _, _ in LINKS) + " |")
        print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in LINKS) + " |")
        for P in [8, 16, 32, 64, 128, 256, 512, 1024]:
            cells = []
            tc0 = None
            for ln, bw, lat in LINKS:
                ef, tc, _ = efficiency(L, P, H, Hkv, D, F, bw, lat, 0)
                ec, _, _ = efficiency(L, P, H, Hkv, D, F, bw, lat, 1)
                tc0 = tc
                cells.append("%.2f / %.2f" % (ef, ec))
            print("| %d | %d | %.3g | %s |" % (P, L // P, tc0 * 1e3, " | ".join(cells)))


if __name__ == "__main__":
    main()
