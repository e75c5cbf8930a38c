"""Files a command reads or writes, against what a user or an attacker may
hand it: outputs that cannot be written (refused before the work starts),
inputs that are FIFOs (refused, never waited on), the mode of a replaced
output, two outputs aliased through a dangling link, hostile model files
(peak memory measured), labels that are not UTF-8, pad_token_id outside
the vocabulary.

Every command runs under a timeout: a hang fails the check instead of
the test run.
"""
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import ATTN, check, summary  # noqa: E402

LIMIT = 60  # seconds: a command past it hung


def run(args, umask=None):
    def pre():
        if umask is not None:
            os.umask(umask)
    try:
        return subprocess.run([ATTN] + args, capture_output=True, text=True,
                              timeout=LIMIT, preexec_fn=pre,
                              errors="replace")
    except subprocess.TimeoutExpired:
        return None


def refused(r, what, words, rc=1):
    """r exited rc, with every one of words in its message."""
    if r is None:
        return check(False, "%s: hung (killed after %d s)" % (what, LIMIT))
    return check(r.returncode == rc and all(w in r.stderr for w in words),
                 "%s: rc %d, stderr %r (expected rc %d and %s)"
                 % (what, r.returncode, r.stderr[-600:], rc, words))


def peak_rss_mb(args):
    """Runs attn ARGS; (rc, its own peak RSS in MiB) from wait4."""
    p = subprocess.Popen([ATTN] + args, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    p.stderr.close()
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss / 1024.0


def tiny_model(d, edit_config=None):
    """A 1-layer BERT folder (config.json, vocab.txt, model.safetensors)."""
    os.makedirs(d, exist_ok=True)
    E, F, V, P = 4, 8, 6, 8
    cfg = {"model_type": "bert", "hidden_size": E, "num_hidden_layers": 1,
           "num_attention_heads": 2, "intermediate_size": F,
           "vocab_size": V, "max_position_embeddings": P,
           "type_vocab_size": 2, "hidden_act": "gelu"}
    if edit_config:
        edit_config(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n")
    rng = np.random.default_rng(0)
    t = {"embeddings.word_embeddings.weight": (V, E),
         "embeddings.position_embeddings.weight": (P, E),
         "embeddings.token_type_embeddings.weight": (2, E),
         "embeddings.LayerNorm.weight": (E,),
         "embeddings.LayerNorm.bias": (E,)}
    p = "encoder.layer.0."
    for k in ("query", "key", "value"):
        t[p + "attention.self.%s.weight" % k] = (E, E)
        t[p + "attention.self.%s.bias" % k] = (E,)
    for q, s in (("attention.output.dense", (E, E)),
                 ("intermediate.dense", (F, E)), ("output.dense", (E, F))):
        t[p + q + ".weight"] = s
        t[p + q + ".bias"] = (s[0],)
    for q in ("attention.output.LayerNorm", "output.LayerNorm"):
        t[p + q + ".weight"] = (E,)
        t[p + q + ".bias"] = (E,)
    header, blobs, off = {}, [], 0
    for name, shape in t.items():
        b = rng.normal(size=shape).astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return d


def outputs_checked_first(d, qkv):
    """A long run is not lost to an output it cannot write: refused at
    once (--steps is far more than the timeout allows, so a check made
    only at the end would hang here)."""
    folder = os.path.join(d, "adir")
    os.mkdir(folder)
    missing = os.path.join(d, "nodir", "m.bin")
    long_run = ["--steps", "100000000"]
    for save, word in ((folder, "folder"), (missing, "does not exist")):
        refused(run(["train", "reverse", "--save", save] + long_run),
                "train reverse --save %s" % save, ["--save", word])
        refused(run(["train", "date", "--save", save] + long_run),
                "train date --save %s" % save, ["--save", word])
    # the commands that write files or folders
    q, k, v = qkv
    afile = os.path.join(d, "a_file")
    open(afile, "w").close()
    for args, word in (
            (["sdpa", "--q", q, "--k", k, "--v", v, "--out", folder], "folder"),
            (["sdpa", "--q", q, "--k", k, "--v", v, "--out", q + ".npy",
              "--weights", missing], "does not exist"),
            (["mha", "--query", q, "--heads", "2", "--init-seed", "1",
              "--out", os.path.join(d, "o.npy"), "--save-params", folder],
             "folder"),
            (["heatmap", "--q", q, "--k", k, "--out",
              os.path.join(d, "nodir", "h.png")],
             "does not exist"),
            (["demo", "--out", afile], "not a folder"),
            (["demo", "--out", os.path.join(d, "nodir", "g")],
             "does not exist")):
        refused(run(args), " ".join(args[:1] + args[-2:]), [word])
    check(not os.path.exists(os.path.join(d, "o.npy")),
          "mha wrote --out although --save-params could not be written")
    if os.geteuid() == 0:
        print("read-only folder: running as root, which writes anywhere; "
              "that part needs an unprivileged user")
    else:
        ro = os.path.join(d, "ro")
        os.mkdir(ro, 0o555)
        refused(run(["train", "reverse", "--save", os.path.join(ro, "m.bin")]
                    + long_run), "train --save in a read-only folder",
                ["does not take new files"])


def fifos_refused(d, qkv):
    """Every reader refuses a FIFO at once instead of waiting for a
    writer that never comes."""
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    q, k, v = qkv
    out = os.path.join(d, "f_out.npy")
    words = ["FIFO", "not a regular file"]
    for args in (["sdpa", "--q", fifo, "--k", k, "--v", v, "--out", out],
                 ["mha", "--query", q, "--heads", "2", "--params", fifo,
                  "--out", out],
                 ["eval", fifo, "reverse"],
                 ["generate", fifo, "--input", "1+2="],
                 ["train", "--resume", fifo, "--save",
                  os.path.join(d, "r.bin")],
                 ["attend", fifo, "--input", "1 2 3"],
                 ["stats", fifo]):
        r = run(args)
        if r is None:
            check(False, "%s on a FIFO hung" % args[0])
            continue
        check(r.returncode != 0 and all(w in r.stderr for w in words),
              "%s on a FIFO: rc %d %r" % (args[0], r.returncode, r.stderr))
    # the files of a pretrained model folder, each replaced by a FIFO
    for name in ("config.json", "model.safetensors", "vocab.txt",
                 "tokenizer_config.json"):
        m = tiny_model(os.path.join(d, "fifo_" + name.split(".")[0]))
        p = os.path.join(m, name)
        if os.path.exists(p):
            os.unlink(p)
        os.mkfifo(p)
        r = run(["attend", m, "--text", "the cat", "--out",
                 os.path.join(d, "fifo_out")])
        if r is None:
            check(False, "a model folder whose %s is a FIFO hung" % name)
            continue
        check(r.returncode == 1 and "FIFO" in r.stderr and name in r.stderr,
              "model %s as a FIFO: rc %d %r" % (name, r.returncode, r.stderr))


    # an output that is a FIFO without a reader: an error, never a wait
    m = tiny_model(os.path.join(d, "fifo_outmodel"))
    od = os.path.join(d, "fifo_outdir")
    os.mkdir(od)
    os.mkfifo(os.path.join(od, "tokens.txt"))
    r = run(["attend", m, "--text", "the cat", "--out", od])
    check(r is not None and r.returncode == 1 and "tokens.txt" in r.stderr,
          "attend --out with a FIFO tokens.txt: %s" %
          ("hung" if r is None else "rc %d %r" % (r.returncode, r.stderr)))


def modes_kept(d, qkv):
    q, k, v = qkv
    o = os.path.join(d, "m.npy")
    np.save(o, np.zeros(3, np.float32))
    os.chmod(o, 0o600)
    r = run(["sdpa", "--q", q, "--k", k, "--v", v, "--out", o])
    check(r is not None and r.returncode == 0, "sdpa --out over a 0600 file")
    check(stat.S_IMODE(os.stat(o).st_mode) == 0o600,
          "a 0600 output became %o" % stat.S_IMODE(os.stat(o).st_mode))
    os.chmod(o, 0o640)
    run(["sdpa", "--q", q, "--k", k, "--v", v, "--out", o])
    check(stat.S_IMODE(os.stat(o).st_mode) == 0o640,
          "a 0640 output became %o" % stat.S_IMODE(os.stat(o).st_mode))
    os.unlink(o)
    for mask, want in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        r = run(["sdpa", "--q", q, "--k", k, "--v", v, "--out", o],
                umask=mask)
        got = stat.S_IMODE(os.stat(o).st_mode)
        check(got == want, "a new output under umask %03o is %o, not %o"
              % (mask, got, want))
        os.unlink(o)
    # a checkpoint too (the same writer)
    ck = os.path.join(d, "c.bin")
    open(ck, "w").close()
    os.chmod(ck, 0o600)
    r = run(["train", "reverse", "--steps", "1", "--d-model", "8", "--ff",
             "8", "--heads", "2", "--layers", "1", "--save", ck])
    check(r is not None and r.returncode == 0 and
          stat.S_IMODE(os.stat(ck).st_mode) == 0o600,
          "train --save over a 0600 file: %o" % stat.S_IMODE(os.stat(ck).st_mode))


def dangling_alias(d, qkv):
    q, k, v = qkv
    o = os.path.join(d, "al_o.npy")
    alias = os.path.join(d, "al_alias.npy")
    os.symlink("al_o.npy", alias)  # relative, dangling: al_o.npy is not there
    refused(run(["sdpa", "--q", q, "--k", k, "--v", v, "--out", o,
                 "--weights", alias]), "--out o --weights alias->o (dangling)",
            ["same file"], rc=2)
    check(not os.path.exists(o), "the aliased outputs wrote %s" % o)
    # through a chain of links and a folder link, absolute
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    os.symlink(sub, os.path.join(d, "sublink"))
    os.symlink(os.path.join(d, "sublink", "x.npy"), os.path.join(d, "l1"))
    os.symlink("l1", os.path.join(d, "l2"))
    refused(run(["sdpa", "--q", q, "--k", k, "--v", v, "--out",
                 os.path.join(sub, "x.npy"), "--lse", os.path.join(d, "l2")]),
            "--out sub/x --lse l2->l1->sublink/x (dangling)", ["same file"],
            rc=2)
    # and an input aliased by a link: o exists, a link to it as the output
    os.symlink(os.path.basename(q), os.path.join(d, "in_alias.npy"))
    refused(run(["sdpa", "--q", q, "--k", k, "--v", v, "--out",
                 os.path.join(d, "in_alias.npy")]), "--out is a link to --q",
            ["overwrite the input"], rc=2)


def hostile_models(d):
    """Peak memory on malformed model files stays within a small multiple
    of the file (a valid file of the size needs about that much)."""
    MB = 1 << 20
    size = 24 * MB
    base = tiny_model(os.path.join(d, "base"))
    rc, base_mb = peak_rss_mb(["model", "info", base])
    check(rc == 0, "model info on the tiny model: rc %d" % rc)

    def measure(name, make):
        m = tiny_model(os.path.join(d, "hostile_" + name.split()[0]))
        make(m)
        rc, mb = peak_rss_mb(["model", "info", m])
        for f in os.listdir(m):
            os.unlink(os.path.join(m, f))
        os.rmdir(m)
        return rc, mb - base_mb

    def case(name, make, valid, want_rc=1):
        """The hostile file's memory beyond the baseline is at most three
        times that of a valid file of the same size (or of the size)."""
        rc, extra = measure(name, make)
        _, vextra = measure(name, valid) if valid else (0, 0)
        limit = 3 * max(vextra, size / MB)
        print("%-34s rc %d, %.0f MiB above the baseline (a valid file of "
              "the size: %.0f; limit %.0f)" % (name, rc, extra, vextra, limit))
        check(rc == want_rc, "%s: rc %d" % (name, rc))
        check(extra <= limit, "%s: %.0f MiB above the baseline for a %d MiB "
              "file (limit %.0f)" % (name, extra, size // MB, limit))

    # the files are written in pieces: the peak RSS of a child includes
    # what this process held when it forked, which must stay small
    def pieces(f, head, unit, count, tail):
        f.write(head)
        chunk = unit * 65536
        for _ in range(count // 65536):
            f.write(chunk)
        f.write(unit * (count % 65536))
        f.write(tail)
        return len(head) + len(unit) * count + len(tail)

    def st_header(head, unit, count, tail):
        def make(m):
            with open(os.path.join(m, "model.safetensors"), "wb") as f:
                f.write(struct.pack("<Q", len(head) + len(unit) * count +
                                    len(tail)))
                pieces(f, head, unit, count, tail)
        return make

    # a valid header of the size: many empty tensors, distinct names
    entry = b'"t%07d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},'

    def valid_st(m):
        n = size // len(entry % 0)
        with open(os.path.join(m, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", n * len(entry % 0) + 1) + b"{")
            for i in range(0, n, 4096):
                f.write(b"".join(entry % k for k in range(i, min(n, i + 4096)))
                        [:-1 if i + 4096 >= n else None])
            f.write(b"}")
    # a tensor whose shape is millions of zeros: 80 bytes a node before
    case("safetensors shape [0,0,0,...]",
         st_header(b'{"a":{"dtype":"F32","shape":[', b"0,", size // 2,
                   b'0]}}'), valid_st)
    # the smallest values a header can hold many of: object members
    case("safetensors __metadata__ members",
         st_header(b'{"__metadata__":{', b'"":"",', size // 6, b'"":""}}'),
         valid_st)

    def text_file(name, head, unit, count, tail):
        def make(m):
            with open(os.path.join(m, name), "wb") as f:
                pieces(f, head, unit, count, tail)
        return make

    case("config.json of 15 MiB",
         text_file("config.json", b'{"a":[', b"0,", 15 * MB // 2, b"0]}"), None)
    case("config.json of 1 MiB of values",
         text_file("config.json", b'{"a":[', b"0,", 500 * 1024, b"0]}"), None)

    def valid_vocab(m):
        with open(os.path.join(m, "vocab.txt"), "wb") as f:
            f.write(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
            for i in range(0, size // 9, 65536):
                f.write(b"".join(b"t%07d\n" % k for k in range(i, i + 65536)))
    case("vocab.txt of empty lines",
         text_file("vocab.txt", b"[UNK]\n[CLS]\n[SEP]\n", b"\n", size, b""),
         valid_vocab)
    case("vocab.txt of 70 MiB",
         text_file("vocab.txt", b"", b"\n", 70 * MB, b""), None)


def labels_and_pad(d):
    w = os.path.join(d, "w.npy")
    np.save(w, np.full((2, 3), 1 / 3, np.float32))
    r = subprocess.run([ATTN, "heatmap", w, "--out", os.path.join(d, "h.png"),
                        "--x-tokens", b"a \xff c"], capture_output=True,
                       timeout=LIMIT)
    err = r.stderr.decode("utf-8", "replace")
    check(r.returncode == 1 and "not valid UTF-8" in err and
          "out of memory" not in err,
          "a label that is not UTF-8: rc %d %r" % (r.returncode, err))

    def pad(cfg):
        cfg["pad_token_id"] = 6  # vocab_size 6: ids 0..5
    m = tiny_model(os.path.join(d, "pad"), pad)
    r = run(["model", "info", m])
    refused(r, "pad_token_id outside the vocabulary",
            ["pad_token_id 6", "outside the vocabulary"])


def main():
    d = tempfile.mkdtemp(prefix="attn_cli_files_")
    rng = np.random.default_rng(0)
    qkv = []
    for n in "qkv":
        p = os.path.join(d, n + ".npy")
        np.save(p, rng.standard_normal((6, 4)).astype(np.float32))
        qkv.append(p)
    outputs_checked_first(d, qkv)
    fifos_refused(d, qkv)
    modes_kept(d, qkv)
    dangling_alias(d, qkv)
    labels_and_pad(d)
    hostile_models(d)
    subprocess.run(["rm", "-rf", d])


main()
sys.exit(summary("cli_files"))
