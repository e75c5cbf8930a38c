"""Shared by the tests/cli_*.py scripts (a module they import, not a test
of its own): the CLI under test and the source tree from the command line
(PATH/TO/attn SOURCE_DIR), a check that records and prints failures,
running the CLI, and the closing summary.
"""
import os
import subprocess
import sys

ATTN = sys.argv[1]
SRC = sys.argv[2] if len(sys.argv) > 2 else None
failures = []
_checks = [0]


def check(cond, what):
    _checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL", what)
    return cond


def run(args, env=None, timeout=None, input=None):
    """attn ARGS with text output captured; env adds to the environment;
    input: the text of standard input (else none)."""
    e = None
    if env:
        e = dict(os.environ)
        e.update(env)
    return subprocess.run([ATTN] + list(args), capture_output=True, text=True,
                          env=e, timeout=timeout, input=input)


def summary(name):
    """Prints 'NAME: N checks, M failed'; returns the exit status."""
    print("%s: %d checks, %d failed" % (name, _checks[0], len(failures)))
    return 1 if failures else 0
