"""docs/operations.md documents every option the binary accepts."""

import os
import re
import subprocess
import unittest

from harness import BIN

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
# Option groups that are oncegate's own (CAF's logger, middleman, ... are
# CAF's and documented by CAF).
OWN_GROUPS = ("global", "http", "keys", "store", "alarm", "admin", "cluster")
# CAF's own global flags.
CAF_GLOBALS = {"help", "long-help", "dump-config", "config-file"}


class DocsTest(unittest.TestCase):
    def options(self):
        out = subprocess.run([BIN, "--long-help"], capture_output=True,
                             timeout=30)
        text = (out.stdout + out.stderr).decode()
        names, group = set(), None
        for line in text.splitlines():
            m = re.match(r"^(\w[\w-]*):$", line)
            if m:
                group = m.group(1)
                continue
            m = re.match(r"^\s+--([\w.-]+)", line)
            if m and group in OWN_GROUPS:
                name = m.group(1)
                # --help prints full names; the table lists them the same.
                names.add(name)
        return names - CAF_GLOBALS - {"version"}

    def test_every_option_is_in_the_operations_guide(self):
        with open(os.path.join(ROOT, "docs", "operations.md")) as f:
            doc = f.read()
        names = self.options()
        self.assertGreater(len(names), 20)
        missing = sorted(n for n in names if "`%s`" % n not in doc
                         and not re.search(r"`%s[` /]" % re.escape(n), doc))
        self.assertEqual(missing, [], "options missing in docs/operations.md")


if __name__ == "__main__":
    unittest.main()
