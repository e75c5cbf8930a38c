"""libattn.so exports the public API and nothing else.

Lists the dynamic symbols libattn.so defines (nm -D --defined-only) and
fails on any that no public header (include/attn*.h) declares with ATTN_API,
on any ATTN_API declaration the library does not define, and on any C
function the Python binding (python/attn/*.py) looks up that the library
does not export. Internal functions (attn__*) are hidden by
-fvisibility=hidden; the command, the benchmark and the tests reach them
through the static library. The exception is the few internal functions
the ring library (libattn_dist) calls: their declarations under src/ are
marked ATTN__RING_API, and the library must export exactly those too.

usage: exported_symbols.py PATH/TO/libattn.so SOURCE_DIR
"""
import glob
import os
import re
import subprocess
import sys

# What a sanitizer build adds to every shared object it links.
SANITIZER = re.compile(r"^(__asan|__ubsan|__sanitizer|__lsan|_init$|_fini$)")


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not SANITIZER.match(parts[2]):
            names.add(parts[2].split("@")[0])
    return names


def declared(src):
    """ATTN_API names of every public header, and the names of its types
    and struct members."""
    api, types = {}, set()
    decl = re.compile(r"^ATTN_API\s+[^;(]*?\b(attn_\w+)\s*\(", re.M)
    for path in sorted(glob.glob(os.path.join(src, "include", "attn*.h"))):
        # attn_dist.h belongs to libattn_dist.a (built where MPI is found),
        # not to libattn.so, which never links MPI
        if os.path.basename(path) == "attn_dist.h":
            continue
        text = open(path).read()
        for name in decl.findall(text):
            api[name] = os.path.basename(path)
        types.update(re.findall(r"\}\s*(attn_\w+)\s*;", text))
        types.update(re.findall(r"typedef\s+[^;]*?\b(attn_\w+)\s*;", text))
        types.update(re.findall(r"typedef\s+[^;(]*\(\s*\*\s*(attn_\w+)\)", text))
        # struct members (indented), which the binding mirrors by name
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
        types.update(re.findall(r"^[ \t]+[\w \t\*]+?\b(attn_\w+)\s*[;,\[]", code,
                                re.M))
    return api, types


def ring_interface(src):
    """Internal names declared with ATTN__RING_API under src/."""
    names = {}
    decl = re.compile(r"ATTN__RING_API\s+[^;(]*?\b(attn__\w+)\s*\(", re.S)
    for path in sorted(glob.glob(os.path.join(src, "src", "**", "*.h"),
                             recursive=True)):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", open(path).read(), flags=re.S)
        text = re.sub(r"#define ATTN__RING_API[^\n]*", "", text)
        for name in decl.findall(text):
            names[name] = os.path.relpath(path, src)
    return names


def python_calls(src):
    """C functions the binding names: quoted "attn_..." strings and
    lib.attn_... attributes, less the names of types (attn_sizeof's
    argument) and struct members."""
    names = set()
    for path in glob.glob(os.path.join(src, "python", "attn", "*.py")):
        text = open(path).read()
        names.update(re.findall(r"[\"'](attn_[a-z0-9_]+)[\"']", text))
        names.update(re.findall(r"\blib\.(attn_[a-z0-9_]+)", text))
    return names


def main():
    lib, src = sys.argv[1], sys.argv[2]
    have = exported(lib)
    api, types = declared(src)
    ring = ring_interface(src)
    extra = sorted(have - set(api) - set(ring))
    for name in extra:
        print("FAIL %s exports %s, which no include/attn*.h declares with "
              "ATTN_API" % (os.path.basename(lib), name))
    missing = sorted(set(api) - have)
    for name in missing:
        print("FAIL %s declares %s (ATTN_API) but %s does not export it"
              % (api[name], name, os.path.basename(lib)))
    for name in sorted(set(ring) - have):
        print("FAIL %s marks %s ATTN__RING_API but %s does not export it"
              % (ring[name], name, os.path.basename(lib)))
        missing.append(name)
    if not ring:
        print("FAIL no ATTN__RING_API declaration found under src/")
        missing.append("(ring interface)")
    py = python_calls(src) - types
    unexported = sorted(n for n in py if n not in have)
    for name in unexported:
        print("FAIL python/attn names %s, which %s does not export"
              % (name, os.path.basename(lib)))
    if not api:
        print("FAIL no ATTN_API declaration found under include/")
    failed = len(extra) + len(missing) + len(unexported) + (not api)
    print("%d symbols exported, %d declared, %d for the ring library, "
          "%d named by the binding" % (len(have), len(api), len(ring), len(py)))
    print("%d passed, %d failed" % (0 if failed else 1, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
