#!/usr/bin/env python3
"""drill.catches-unsafe-build: the drill must catch a node that acknowledges
claims before it commits them (tests/unsafe/oncegate_unsafe).

Runs a short single-node crash loop against the broken node and passes only
when the drill fails it the right way: exit code 1 with duplicate
executions or lost acknowledged decisions in its JSON report. A drill that
passes the broken node, or fails for another reason (could not run, a
timeout), fails this test.

    expect_caught.py DRILL UNSAFE_BIN JSON_OUT [drill options...]
"""

import json
import subprocess
import sys

EXIT_VIOLATION = 1
TIMEOUT = 240


def main(argv):
    drill, unsafe_bin, json_out = argv[:3]
    cmd = [sys.executable, drill, "single-node-crash-loop", "--bin",
           unsafe_bin, "--json", json_out, "--quiet"] + argv[3:]
    print("running: %s" % " ".join(cmd), flush=True)
    code = subprocess.run(cmd, timeout=TIMEOUT).returncode
    try:
        with open(json_out) as f:
            summary = json.load(f).get("summary", {})
    except (OSError, ValueError) as e:
        print("FAIL: no JSON report from the drill (%s)" % e)
        return 1
    caught = summary.get("duplicates", 0) + summary.get("lost", 0)
    if code == EXIT_VIOLATION and caught > 0:
        print("PASS: the drill caught the unsafe build (exit %d): %d "
              "duplicate executions, %d lost acknowledged decisions"
              % (code, summary["duplicates"], summary["lost"]))
        return 0
    print("FAIL: the unsafe build was not caught: drill exit %d, duplicates "
          "%s, lost %s" % (code, summary.get("duplicates"),
                           summary.get("lost")))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
