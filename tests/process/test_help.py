"""What the binary says about itself: `--help` is short and oncegate's own
(every option of its own, grouped by what an operator configures, none of
CAF's), `--long-help` has everything, CAF's framework options included; no
command and no start-up log line prints a secret; and the `curl -d` trap of
docs/http-api.md: curl's default form type is refused with a 415 that says
what to send, the documented command with a JSON type is accepted."""

import json
import os
import re
import shutil
import subprocess
import unittest

from harness import BIN, Node, TempDir

GROUPS = ("listener", "routes", "keys", "store", "cluster", "admin",
          "logging")
# Option groups that are oncegate's own in --long-help (as test_docs).
OWN_GROUPS = ("global", "http", "keys", "store", "alarm", "admin", "cluster")
CAF_GLOBALS = {"help", "long-help", "dump-config", "config-file"}
ADMIN = "admin-token-that-must-not-leak-7f3a"
SECRETS = ("tv-secret-that-must-not-leak-91c2",
           "second-tv-secret-that-must-not-leak-04be")
GH_SECRET = "gh-secret-that-must-not-leak-55d0"


def run(*args, timeout=30):
    out = subprocess.run([BIN, *args], capture_output=True, timeout=timeout)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def own_options(long_help):
    """oncegate's own option names as --long-help lists them."""
    names, group = set(), None
    for line in long_help.splitlines():
        m = re.match(r"^(\w[\w-]*):$", line)
        if m:
            group = m.group(1)
            continue
        m = re.match(r"^\s+--([\w.-]+)", line)
        if m and group in OWN_GROUPS:
            names.add(m.group(1))
    return names - CAF_GLOBALS


class HelpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        code, cls.help, err = run("--help")
        assert code == 0, err
        code, cls.long_help, err = run("--long-help")
        assert code == 0, err

    def test_help_is_short_and_lists_every_group(self):
        lines = self.help.splitlines()
        self.assertLess(len(lines), 80, self.help)
        for g in GROUPS:
            self.assertIn("\n%s:\n" % g, self.help, g)
        self.assertLessEqual(max(len(line) for line in lines), 100)
        # One line per option with its default.
        self.assertIn("--keys.ttl=<timespan>  (default: 24h)", self.help)
        self.assertIn("--http-port=<uint16>  (default: 8080)", self.help)
        self.assertIn("--http.tls-certificate=<string>", self.help)
        self.assertIn("--version", self.help)
        self.assertIn("--long-help", self.help)
        self.assertIn("--check-config", self.help)

    def test_help_names_every_own_option_and_none_of_cafs(self):
        own = own_options(self.long_help)
        self.assertGreater(len(own), 60)
        self.assertIn("http.tls-key", own)
        helped = set(re.findall(r"--([\w.-]+)", self.help))
        self.assertEqual(sorted(own - helped), [],
                         "own options missing from --help")
        usage = {"config-file", "check-config", "dump-config", "long-help",
                 "backup-to", "data-dir", "OPTION", "keys.ttl"}
        self.assertEqual(sorted(helped - own - usage), [],
                         "--help names options that do not exist")
        for caf in ("stream.", "opencl.", "scheduler.", "work-stealing.",
                    "middleman.", "logger."):
            self.assertNotIn(caf, self.help, caf)
        for caf in ("stream.", "opencl.", "scheduler.", "work-stealing.",
                    "middleman.", "logger."):
            self.assertIn("--" + caf, self.long_help, caf)
        # oncegate's options come first in --long-help, CAF's after them.
        self.assertLess(self.long_help.index("--keys.ttl"),
                        self.long_help.index("--scheduler.policy"))

    def test_long_help_describes_each_option(self):
        self.assertIn("--http.tls-handshake-timeout=<timespan>  "
                      "(default: 5s)\n      time from accept", self.long_help)
        self.assertIn("--cluster.max-log-bytes", self.long_help)


class SecretsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.ini = os.path.join(self.tmp.path, "node.ini")
        with open(self.ini, "w") as f:
            f.write('[admin]\ntoken="%s"\n'
                    '[route.tv]\nauth="token"\nsecret=["%s", "%s"]\n'
                    '[route.gh]\nauth="github"\nsecret="%s"\n'
                    % ((ADMIN,) + SECRETS + (GH_SECRET,)))

    def assert_no_secret(self, text, what):
        for secret in (ADMIN, GH_SECRET) + SECRETS:
            self.assertNotIn(secret, text, what)

    def test_dump_and_check_config_mask_the_token_and_route_secrets(self):
        data = "--data-dir=" + os.path.join(self.tmp.path, "data")
        for args in (["--config-file=" + self.ini, "--dump-config"],
                     ["--check-config", self.ini],
                     ["--check-config=" + self.ini, "--admin.token=" + ADMIN]):
            code, out, err = run(*args, data)
            self.assertEqual(code, 0, (args, err))
            self.assertIn("configuration OK", out)
            self.assert_no_secret(out + err, args)
            self.assertIn("admin.token=***", out)
            self.assertIn("route.tv.secret=***", out)
            self.assertIn("route.gh.secret=***", out)

    def test_no_start_up_log_line_prints_a_secret(self):
        node = Node(os.path.join(self.tmp.path, "data"),
                    "--config-file=" + self.ini, "--log-level=debug",
                    "--admin.token=" + ADMIN).start()
        try:
            status, _, _ = node.request("GET", "/healthz")
            self.assertEqual(status, 200)
        finally:
            self.assertEqual(node.stop(), 0)
        with open(node.log_path, errors="replace") as f:
            log = f.read()
        self.assertIn("node.ready", log)
        self.assert_no_secret(log, "log")


@unittest.skipUnless(shutil.which("curl"), "needs curl")
class CurlDataTest(unittest.TestCase):
    """docs/http-api.md: `curl -d` alone sends
    application/x-www-form-urlencoded, which the contract refuses (415:
    JSON or text/plain only); the docs' commands set the type."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.node = Node(os.path.join(cls.tmp.path, "data")).start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.node.stop()
        finally:
            cls.tmp.cleanup()

    def curl(self, *args):
        out = subprocess.run(
            ["curl", "-s", "-w", "\n%{http_code}",
             "http://127.0.0.1:%d/v1/webhook" % self.node.port, *args],
            capture_output=True, timeout=30)
        body, _, status = out.stdout.decode().rpartition("\n")
        return int(status), body

    def test_plain_curl_d_is_415_naming_the_types_to_send(self):
        body = '{"idempotency_key":"curl-1","action":"buy"}'
        status, text = self.curl("-d", body)
        self.assertEqual(status, 415, text)
        problem = json.loads(text)
        self.assertEqual(problem["type"],
                         "https://oncegate.dev/problems/unsupported-media-type")
        self.assertIn("application/json", problem["detail"])
        # Nothing was stored: the documented command executes it.
        status, text = self.curl("-H", "Content-Type: application/json",
                                 "-d", body)
        self.assertEqual(status, 200, text)
        status, text = self.curl("-H", "Content-Type: text/plain",
                                 "-d", body)
        self.assertEqual(status, 409, text)


if __name__ == "__main__":
    unittest.main()
