"""`attn sdpa` and `attn sdpa-backward` with --softcap, --alibi,
--alibi-slopes, --sinks, --doc-ids and --cu-seqlens (a list or a .npy;
--cu-seqlens-k for Lq != Lk) against NumPy (written here from the formulas
in include/attn.h), and their usage errors.

usage: cli_score_mods.py PATH/TO/attn SOURCE_DIR
"""
import os
import sys
import tempfile

import numpy as np

from clitest import check, run, summary


def numpy_sdpa(q, k, v, do, cap, slopes, mode, sinks, dq_ids, dk_ids, causal):
    """out, dq, dk, dv, dsinks in float64; q (B, H, L, D)."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(D)
    t = np.tanh(s / cap) if cap else None
    if cap:
        s = cap * t
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    if slopes is not None:
        d = (i - j).astype(float)
        s = s - slopes[None, :, None, None] * (np.abs(d) if mode == "symmetric" else d)
    vis = np.ones(s.shape, bool)
    if causal:
        vis &= j <= i
    if dq_ids is not None:
        vis &= dq_ids[:, None, :, None] == dk_ids[:, None, None, :]
    s = np.where(vis, s, -np.inf)
    sk = sinks if sinks is not None else np.full(H, -np.inf)
    m = np.maximum(s.max(-1), sk[None, :, None])
    e = np.exp(s - m[..., None])
    es = np.exp(sk[None, :, None] - m)
    den = e.sum(-1) + es
    p = e / den[..., None]
    out = p @ v
    dp = do @ v.transpose(0, 1, 3, 2)
    dsum = (p * dp).sum(-1)
    ds = p * (dp - dsum[..., None])
    if cap:
        ds = ds * (1 - t ** 2)
    dq = ds @ k / np.sqrt(D)
    dk = ds.transpose(0, 1, 3, 2) @ q / np.sqrt(D)
    dv = p.transpose(0, 1, 3, 2) @ do
    dsinks = -(es / den * dsum).sum((0, 2))
    return out, dq, dk, dv, dsinks


def main():
    rng = np.random.default_rng(17)
    with tempfile.TemporaryDirectory() as tmp:
        P = lambda n: os.path.join(tmp, n)  # noqa: E731
        B, H, L, D = 2, 3, 11, 4
        q = rng.standard_normal((B, H, L, D)) * 2
        k = rng.standard_normal((B, H, L, D)) * 2
        v = rng.standard_normal((B, H, L, D))
        do = rng.standard_normal((B, H, L, D))
        sinks = rng.standard_normal(H)
        slopes = np.array([0.5, 0.25, 0.1])
        ids = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 5, 5], np.int64)
        for n, a in (("q", q), ("k", k), ("v", v), ("do", do)):
            np.save(P(n + ".npy"), a)
        np.save(P("sinks.npy"), sinks)
        np.save(P("slopes.npy"), slopes)
        np.save(P("ids.npy"), ids)
        # the same documents as cumulative starts (documents 3 and 4 empty)
        cu = np.array([0, 3, 5, 9, 9, 9, 11], np.int64)
        np.save(P("cu.npy"), cu)
        cases = [
            (["--cu-seqlens", ",".join(map(str, cu)), "--softcap", "1.5",
              "--sinks", P("sinks.npy"), "--causal", "top-left"],
             dict(cap=1.5, sinks=sinks, docs=True, causal=True)),
            (["--cu-seqlens", P("cu.npy"), "--alibi", "symmetric",
              "--alibi-slopes", P("slopes.npy")],
             dict(slopes=slopes, mode="symmetric", docs=True)),
            (["--softcap", "2"], dict(cap=2.0)),
            (["--alibi", "causal", "--causal", "top-left"],
             # H = 3: 2^-4, 2^-8 (n = 2), then 2^-2 (every other of n = 4)
             dict(slopes=np.array([2.0 ** -4, 2.0 ** -8, 2.0 ** -2]), causal=True)),
            (["--alibi", "symmetric", "--alibi-slopes", P("slopes.npy")],
             dict(slopes=slopes, mode="symmetric")),
            (["--sinks", P("sinks.npy")], dict(sinks=sinks)),
            (["--doc-ids", P("ids.npy"), "--softcap", "1.5", "--sinks",
              P("sinks.npy"), "--causal", "top-left"],
             dict(cap=1.5, sinks=sinks, docs=True, causal=True)),
        ]
        for args, kw in cases:
            ids2 = np.stack([ids] * B) if kw.get("docs") else None
            want = numpy_sdpa(q, k, v, do, kw.get("cap"), kw.get("slopes"),
                              kw.get("mode", "causal"), kw.get("sinks"), ids2,
                              ids2, kw.get("causal", False))
            for impl in ("ref", "flash"):
                r = run(["sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v",
                         P("v.npy"), "--out", P("o.npy"), "--impl", impl] + args)
                if not check(r.returncode == 0, "sdpa %s %s: %s" % (impl, args, r.stderr)):
                    continue
                o = np.load(P("o.npy"))
                check(np.abs(o - want[0]).max() < 2e-5,
                      "sdpa %s %s: out err %g" % (impl, args, np.abs(o - want[0]).max()))
                extra = ["--dsinks", P("ds.npy")] if kw.get("sinks") is not None else []
                r = run(["sdpa-backward", "--q", P("q.npy"), "--k", P("k.npy"),
                         "--v", P("v.npy"), "--dout", P("do.npy"), "--dq",
                         P("dq.npy"), "--dk", P("dk.npy"), "--dv", P("dv.npy"),
                         "--impl", impl] + args + extra)
                if not check(r.returncode == 0, "backward %s %s: %s" % (impl, args, r.stderr)):
                    continue
                for n, w in zip(("dq", "dk", "dv"), want[1:4]):
                    g = np.load(P(n + ".npy"))
                    check(np.abs(g - w).max() < 1e-4 * (1 + np.abs(w).max()),
                          "%s %s %s: err %g" % (n, impl, args, np.abs(g - w).max()))
                if extra:
                    g = np.load(P("ds.npy"))
                    check(g.shape == (H,) and np.abs(g - want[4]).max() < 1e-4,
                          "dsinks %s %s: %s vs %s" % (impl, args, g, want[4]))
        # Lq != Lk: --cu-seqlens for the queries, --cu-seqlens-k for the keys
        Lk = 7
        k7, v7 = k[:, :, :Lk].copy(), v[:, :, :Lk].copy()
        np.save(P("k7.npy"), k7)
        np.save(P("v7.npy"), v7)
        idq = np.repeat([0, 1, 2], [3, 2, 6])
        idk = np.repeat([0, 1, 2], [2, 2, 3])
        want = numpy_sdpa(q, k7, v7, do, None, None, "causal", sinks,
                          np.stack([idq] * B), np.stack([idk] * B), False)
        r = run(["sdpa", "--q", P("q.npy"), "--k", P("k7.npy"), "--v", P("v7.npy"),
                 "--out", P("o.npy"), "--sinks", P("sinks.npy"), "--cu-seqlens",
                 "0,3,5,11", "--cu-seqlens-k", "0,2,4,7"])
        if check(r.returncode == 0, "cu-seqlens-k: " + r.stderr):
            err = np.abs(np.load(P("o.npy")) - want[0]).max()
            check(err < 2e-5, "cu-seqlens-k: out err %g" % err)
        # usage errors
        np.save(P("bad_ids.npy"), ids[::-1].copy())
        np.save(P("sinks2.npy"), sinks[:2])
        base = ["sdpa", "--q", P("q.npy"), "--k", P("k.npy"), "--v", P("v.npy"),
                "--out", P("o.npy")]
        for args, msg in ((["--softcap", "0"], "--softcap takes a positive cap"),
                          (["--softcap", "-2"], "--softcap takes a positive cap"),
                          (["--alibi", "left"], "--alibi takes causal or symmetric"),
                          (["--sinks", P("sinks2.npy")], "sinks has 2 entries"),
                          (["--doc-ids", P("bad_ids.npy")], "doc_q decreases"),
                          (["--doc-ids", P("sinks.npy")], "doc-ids"),
                          (["--cu-seqlens", "0,3,5,12"], "cu_seqlens ends at cu[3] = "
                           "12 but the sequence has 11 positions"),
                          (["--cu-seqlens", "1,11"], "cu_seqlens[0] is 1; the first "
                           "document starts at 0"),
                          (["--cu-seqlens", "0,5,3,11"], "cu_seqlens decreases: "
                           "cu[2] = 3 after cu[1] = 5"),
                          (["--cu-seqlens", "0"], "at least one document"),
                          (["--cu-seqlens", "0,x,11"], "entry 1 ('x') is not an integer"),
                          (["--cu-seqlens", P("q.npy")], "must have rank 1"),
                          (["--cu-seqlens", "0,11", "--doc-ids", P("ids.npy")],
                           "pass one of them"),
                          (["--cu-seqlens-k", "0,11"], "--cu-seqlens-k needs "
                           "--cu-seqlens")):
            r = run(base + args)
            check(r.returncode != 0 and msg in r.stderr,
                  "error %s: rc %d, %r" % (args, r.returncode, r.stderr))
        r = run(["sdpa", "--q", P("q.npy"), "--k", P("k7.npy"), "--v", P("v7.npy"),
                 "--out", P("o.npy"), "--cu-seqlens", "0,11"])
        check(r.returncode != 0 and "add --cu-seqlens-k" in r.stderr,
              "Lq != Lk without --cu-seqlens-k: " + r.stderr)
        # every subcommand that takes --doc-ids takes --cu-seqlens
        x = rng.standard_normal((1, L, 8)).astype(np.float32)
        np.save(P("x.npy"), x)
        for sub in (["mha", "--query", P("x.npy"), "--heads", "2", "--init-seed",
                     "1", "--out", P("y.npy")],
                    ["encoder", "--x", P("x.npy"), "--heads", "2", "--ff", "8",
                     "--init-seed", "1", "--out", P("y.npy")]):
            outs = []
            for docs in (["--doc-ids", P("ids.npy")],
                         ["--cu-seqlens", ",".join(map(str, cu))]):
                r = run(sub + docs)
                if check(r.returncode == 0, "%s %s: %s" % (sub[0], docs[0], r.stderr)):
                    outs.append(np.load(P("y.npy")))
            if len(outs) == 2:
                check(np.array_equal(outs[0], outs[1]),
                      "%s: --cu-seqlens and --doc-ids agree" % sub[0])
    return summary("cli_score_mods")


if __name__ == "__main__":
    sys.exit(main())
