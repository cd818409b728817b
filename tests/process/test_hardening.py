"""A node that a careless operator cannot knock over or make leak: stored
outcomes are final HTTP answers, empty secrets are refused, no command
prints a secret, and every file the node writes is its owner's only.

The real oncegate binary on loopback.
"""

import json
import os
import stat
import subprocess
import unittest
from urllib.parse import quote

from harness import BIN, Node, TempDirCase, UpstreamNodeCase


ADMIN = "admin-hardening-token-1234"
SECRET = "route-secret-abcdef-98765"


def run(args, umask=None, timeout=20):
    def preexec():
        if umask is not None:
            os.umask(umask)
    proc = subprocess.run([BIN] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout,
                          preexec_fn=preexec)
    return proc.returncode, proc.stdout.decode(errors="replace")


class StoredOutcomeTest(UpstreamNodeCase, unittest.TestCase):
    def config(self, url):
        # The operator completes from loopback without a token.
        return ('[admin]\nallow-unauthenticated-loopback=true\n'
                '[route.replay]\nupstream="%s"\non-duplicate="replay"\n' % url)

    def in_doubt(self, key):
        self.up.set_mode("drop")
        status, _, body = self.node.request(
            "POST", "/v1/webhook/replay", {"k": key},
            {"Idempotency-Key": key})
        self.up.set_mode("normal")
        self.assertEqual(status, 502, body)

    def complete(self, key, outcome):
        return self.node.request(
            "POST", "/v1/keys/%s/complete?route=replay" % quote(key),
            outcome)

    def replay(self, key):
        return self.node.request("POST", "/v1/webhook/replay", {"k": key},
                                 {"Idempotency-Key": key})

    def test_a_204_with_a_body_cannot_be_stored_and_the_node_keeps_serving(
            self):
        self.in_doubt("k204")
        for outcome in ({"status": 204, "body": "not allowed"},
                        {"status": 304, "body": "not allowed"},
                        {"status": 103, "body": ""},
                        {"status": 199},
                        {"status": 600}):
            status, _, body = self.complete("k204", outcome)
            self.assertEqual(status, 400, (outcome, body))
        # Still in doubt, and the node still answers duplicates.
        status, _, body = self.replay("k204")
        self.assertEqual(status, 409, body)
        self.assertEqual(json.loads(body)["type"],
                         "https://oncegate.dev/problems/in-doubt")
        # A 204 without a body is a valid outcome, replayed without one.
        status, _, body = self.complete("k204", {"status": 204})
        self.assertEqual(status, 200, body)
        for _ in range(3):
            status, headers, body = self.replay("k204")
            self.assertEqual((status, body), (204, b""))
            self.assertEqual(headers["idempotent-replayed"], "true")
        self.assertEqual(self.node.request("GET", "/healthz")[0], 200)


class SecretsTest(TempDirCase, unittest.TestCase):
    def ini(self, text):
        path = os.path.join(self.tmp.path, "node.ini")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_an_empty_secret_is_a_start_up_error_naming_the_route(self):
        empty_file = os.path.join(self.tmp.path, "empty.secret")
        open(empty_file, "w").close()
        for text in ('[route.tv]\nauth="token"\nsecret=""\n',
                     '[route.tv]\nauth="token"\nsecret=["ok-one", ""]\n',
                     '[route.tv]\nauth="github"\nsecret-file="%s"\n'
                     % empty_file,
                     '[route.tv]\nauth="standard-webhooks"\n'
                     'secret="whsec_"\n'):
            code, out = run(["--check-config", self.ini(text),
                             "--data-dir=" + self.tmp.path])
            self.assertEqual(code, 2, (text, out))
            self.assertIn("route.tv.secret", out)

    def test_no_command_prints_a_secret(self):
        path = self.ini('[admin]\ntoken="%s"\n[route.tv]\nauth="token"\n'
                        'secret="%s"\n' % (ADMIN, SECRET))
        for args in (["--config-file=" + path, "--dump-config"],
                     ["--check-config", path],
                     ["--config-file=" + path, "--help"],
                     ["--config-file=" + path, "--long-help"]):
            code, out = run(args + ["--data-dir=" + self.tmp.path])
            self.assertEqual(code, 0, (args, out[-2000:]))
            self.assertNotIn(ADMIN, out, args)
            self.assertNotIn(SECRET, out, args)
        # A config line that does not parse is quoted, its secret masked.
        bad = self.ini('[admin]\ntoken=%s-[\n' % ADMIN)
        code, out = run(["--config-file=" + bad,
                         "--data-dir=" + self.tmp.path])
        self.assertNotEqual(code, 0, out)
        self.assertNotIn(ADMIN, out)


class PermissionsTest(TempDirCase, unittest.TestCase):
    def mode(self, path):
        return stat.S_IMODE(os.stat(path).st_mode)

    def test_data_dir_database_and_backups_are_private_whatever_the_umask(
            self):
        data = os.path.join(self.tmp.path, "data")
        os.makedirs(data)
        os.chmod(data, 0o777)
        old = os.umask(0)
        try:
            node = Node(data).start()
        finally:
            os.umask(old)
        try:
            status, _, _ = node.webhook({"a": 1}, key="perm-1")
            self.assertEqual(status, 200)
            self.assertEqual(self.mode(data), 0o700)
            names = sorted(os.listdir(data))
            self.assertIn("oncegate.db", names)
            for name in names:
                path = os.path.join(data, name)
                if os.path.isfile(path) and name != "node.log":
                    self.assertEqual(self.mode(path) & 0o077, 0,
                                     "%s is %o" % (name, self.mode(path)))
            backup = os.path.join(self.tmp.path, "backup.db")
            code, out = run(["--data-dir=" + data, "--backup-to=" + backup],
                            umask=0)
            self.assertEqual(code, 0, out)
            self.assertEqual(self.mode(backup), 0o600)
        finally:
            node.kill()

    def test_an_existing_open_data_dir_is_tightened_at_start(self):
        data = os.path.join(self.tmp.path, "data")
        os.makedirs(os.path.join(data, "raft"))
        loose = os.path.join(data, "raft", "leftover")
        with open(loose, "w") as f:
            f.write("x")
        os.chmod(loose, 0o644)
        os.chmod(data, 0o755)
        node = Node(data).start()
        try:
            self.assertEqual(self.mode(data), 0o700)
            self.assertEqual(self.mode(os.path.join(data, "raft")), 0o700)
            self.assertEqual(self.mode(loose), 0o600)
        finally:
            node.kill()


if __name__ == "__main__":
    unittest.main()
