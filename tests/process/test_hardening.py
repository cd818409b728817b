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


class DataDirLockTest(TempDirCase, unittest.TestCase):
    def signal(self, node, key):
        return node.request("POST", "/v1/webhook", {"k": key},
                            {"Idempotency-Key": key})[0]

    def test_a_second_node_on_the_same_data_dir_is_refused(self):
        # Two processes on one database: the second started and served,
        # and the first answered 503 to every new key from then on while
        # /readyz said ready.
        data = os.path.join(self.tmp.path, "data")
        first = Node(data).start()
        try:
            self.assertEqual(self.signal(first, "lock-1"), 200)
            try:
                code, text = run(["--http-port=0", "--data-dir=" + data,
                                  "--log-level=warn"], timeout=10)
            except subprocess.TimeoutExpired:
                self.fail("a second node started on the same data dir")
            self.assertNotEqual(code, 0, text)
            self.assertIn("in use by another oncegate process", text)
            self.assertEqual(self.signal(first, "lock-2"), 200)
            self.assertEqual(self.signal(first, "lock-1"), 409)
        finally:
            first.kill()
        # The lock goes with the process, also after SIGKILL.
        again = Node(data).start()
        try:
            self.assertEqual(self.signal(again, "lock-2"), 409)
        finally:
            again.kill()

    def test_an_empty_database_file_is_refused(self):
        # `> oncegate.db` or a failed copy: taken for a fresh database it
        # made every key decided before execute again.
        data = os.path.join(self.tmp.path, "data")
        node = Node(data).start()
        try:
            self.assertEqual(self.signal(node, "empty-1"), 200)
        finally:
            node.stop()
        db = os.path.join(data, "oncegate.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.truncate(db + suffix, 0)
        code, text = run(["--http-port=0", "--data-dir=" + data], timeout=10)
        self.assertEqual(code, 1, text)
        self.assertIn("oncegate.db is empty", text)
        self.assertEqual(os.path.getsize(db), 0)  # left for the operator
        os.remove(db)
        again = Node(data).start()  # removed: starts with no records
        try:
            self.assertEqual(self.signal(again, "empty-1"), 200)
        finally:
            again.kill()

    def test_a_database_of_another_application_is_refused_untouched(self):
        # A data dir pointed at another program's SQLite file: the node
        # must neither add its tables to it nor switch its journal.
        import hashlib
        import sqlite3
        data = os.path.join(self.tmp.path, "data")
        os.makedirs(data)
        db = os.path.join(data, "oncegate.db")
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, symbol TEXT)")
        con.execute("INSERT INTO orders VALUES(1, 'BTCUSD')")
        con.commit()
        con.close()
        with open(db, "rb") as f:
            before = hashlib.sha256(f.read()).hexdigest()
        code, text = run(["--http-port=0", "--data-dir=" + data], timeout=10)
        self.assertEqual(code, 1, text)
        self.assertIn("oncegate.db is not an oncegate database (it holds "
                      "table orders", text)
        with open(db, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), before)
        self.assertFalse(os.path.exists(db + "-wal"))


class AdminTokenFileTest(TempDirCase, unittest.TestCase):
    """admin.token-file: its first line, a CR dropped (the CLI's rule for
    --token-file); a token no header can carry is refused at start."""

    def token_file(self, content):
        path = os.path.join(self.tmp.path, "token")
        with open(path, "wb") as f:
            f.write(content)
        return path

    def test_a_token_file_written_on_windows_admits(self):
        # The CR stayed in the node's token: no client could send it (401).
        path = self.token_file(ADMIN.encode() + b"\r\n")
        node = Node(os.path.join(self.tmp.path, "data"),
                    "--admin.token-file=" + path).start()
        try:
            status, _, body = node.request(
                "GET", "/v1/cluster", None,
                {"Authorization": "Bearer " + ADMIN})
            self.assertEqual(status, 200, body)
        finally:
            node.kill()

    def test_a_token_no_header_can_carry_is_refused_at_start(self):
        for content in (ADMIN.encode() + b" \n", b" " + ADMIN.encode(),
                        ADMIN.encode() + b"\0x\n", b"\r\n"):
            path = self.token_file(content)
            code, text = run(["--http-port=0", "--admin.token-file=" + path,
                              "--data-dir=" + os.path.join(self.tmp.path, "d")])
            self.assertEqual(code, 2, text)
            self.assertIn("admin", text)
            self.assertNotIn(ADMIN, text)


if __name__ == "__main__":
    unittest.main()
