#!/usr/bin/env python3
"""mutant.NAME: a named test must catch the mutant NAME.

    expect_killed.py NAME [--exit N] [VAR=VALUE ...] -- COMMAND ...

Runs COMMAND (a test: a unittest id, a drill) with ONCEGATE_MUTANT=NAME and
ONCEGATE_BIN pointing at the mutant build, unless a VAR=VALUE says
otherwise. In VALUEs and in COMMAND, `@mutant` stands for the mutant build
(ONCEGATE_MUTANT_BIN), `@product` for the product (ONCEGATE_BIN as given
to this script), `@python` for this Python.

The mutant is KILLED (this test passes) only if COMMAND fails (with exit
code N when --exit is given) AND the mutation point was reached: the mutant
build names itself in ONCEGATE_MUTANT_TRACE when it is. A command that fails
without reaching the mutation point failed for some other reason: that is
not a kill, and this test fails too, as it does when the mutant survives.
"""

import os
import subprocess
import sys
import tempfile

TIMEOUT = 280


def main(argv):
    name = argv.pop(0)
    want_exit = None
    if argv[:1] == ["--exit"]:
        want_exit = int(argv[1])
        argv = argv[2:]
    sep = argv.index("--")
    assigns, cmd = argv[:sep], argv[sep + 1:]
    product = os.environ["ONCEGATE_BIN"]
    mutant = os.environ["ONCEGATE_MUTANT_BIN"]

    def subst(s):
        return (s.replace("@mutant", mutant).replace("@product", product)
                 .replace("@python", sys.executable))

    with tempfile.TemporaryDirectory(prefix="oncegate-mutant-") as tmp:
        trace = os.path.join(tmp, "trace")
        env = dict(os.environ)
        # A test that fails keeps its temp dir for reading (a drill does):
        # here failing is the point, so its temp files live in ours and go
        # with it.
        keep = os.path.join(tmp, "tmp")
        os.mkdir(keep)
        env.update(ONCEGATE_MUTANT=name, ONCEGATE_MUTANT_TRACE=trace,
                   ONCEGATE_BIN=mutant, TMPDIR=keep)
        for a in assigns:
            k, v = a.split("=", 1)
            env[k] = subst(v)
        cmd = [subst(c) for c in cmd]
        print("mutant %s: running %s" % (name, " ".join(cmd)), flush=True)
        try:
            code = subprocess.run(cmd, env=env, timeout=TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            print("FAIL: mutant %s: the test did not end within %d s"
                  % (name, TIMEOUT))
            return 1
        reached = False
        if os.path.exists(trace):
            with open(trace) as f:
                reached = name in f.read().split()
    if code == 0:
        print("FAIL: mutant %s SURVIVED: the test passed against it" % name)
        return 1
    if not reached:
        print("FAIL: mutant %s: the test failed (exit %d) but never reached "
              "the mutation point: it failed for another reason"
              % (name, code))
        return 1
    if want_exit is not None and code != want_exit:
        print("FAIL: mutant %s: the test failed with exit %d, not %d (a "
              "violation)" % (name, code, want_exit))
        return 1
    print("PASS: mutant %s killed (exit %d, mutation point reached)"
          % (name, code))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
