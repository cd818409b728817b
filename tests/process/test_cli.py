"""The admin CLI (docs/cli.md): `oncegate keys ...` and `oncegate cluster
...` of the real binary against a real node and a real 3-node cluster (a
fourth node joins and leaves), over the node's admin API.

What must hold:
- every command does what its endpoint does, prints a table by default and
  the node's JSON with --json (`keys list` the pages it followed, merged);
- keys with any bytes (`/`, `?`, `%`, `+`, spaces, `.`, `..`, a key ending
  in `/complete`, one starting with `-`, control and bidi characters) reach
  the node intact, and tables show them escaped;
- exit codes: 0 done, 1 refused (400), 2 usage error (nothing sent), 3 not
  found, 4 conflict (409), 5 unreachable / timed out / malformed or
  oversized answer, 6 token refused or missing;
- the token (from --token, --token-file or ONCEGATE_TOKEN) never appears in
  any output, and a --token value is overwritten in the process's argv;
- over `https://` the node's certificate is verified (the CA from --ca-file
  or ONCEGATE_CA_FILE, else the system store; the name or address in the
  URL): a node with the TLS listener is administered, while a certificate
  of another CA or for another name ends the handshake before the request,
  so the token never reaches such a peer.

One node and one cluster serve every case of their class (started once);
each case uses keys of its own. Every CLI run has a timeout; every wait is
a bounded poll.
"""

import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest

from harness import BIN, Node, TempDir, free_port, wait_for
from test_cluster import Cluster
from test_tls_listener import SERVER_EXT, make_ca, make_server, sign
from oncegate_drill.config import cluster_section

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
from test_upstream import TestUpstream  # noqa: E402

TOKEN = "cli-" + secrets.token_hex(16)
TOKEN_ENV = "ONCEGATE_TEST_CLI_TOKEN"
CLI_TIMEOUT = 20  # seconds for one CLI process, at most

OK, REFUSED, USAGE, NOT_FOUND, CONFLICT, UNAVAILABLE, AUTH = range(7)

# Keys a URL would mangle unless escaped byte for byte, as body keys.
ODD_KEYS = ["a/b", "a b+c", "100%", "%41", "?route=fwd&x=1", "#frag",
            ".", "..", "k/complete", "k/redeliver", "-dash", "ключ-ü",
            "tab\tkey", "rtl\u202ekey", "nul\u0000key", "q\"uote\\"]


class Run:
    def __init__(self, args, proc):
        self.args = args
        self.code = proc.returncode
        self.out = proc.stdout.decode("utf-8", "replace")
        self.err = proc.stderr.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return "oncegate %s -> %d\nstdout: %s\nstderr: %s" % (
            " ".join(self.args), self.code, self.out, self.err)


def cli(*args, env=None, check_token=True):
    """Runs `oncegate ARGS`; the environment has no ONCEGATE_NODE or
    ONCEGATE_TOKEN unless `env` sets them."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("ONCEGATE_NODE", "ONCEGATE_TOKEN")}
    e.update(env or {})
    run = Run(list(args), subprocess.run([BIN] + list(args), env=e,
                                         capture_output=True,
                                         stdin=subprocess.DEVNULL,
                                         timeout=CLI_TIMEOUT))
    if check_token:
        assert TOKEN not in run.out and TOKEN not in run.err, run
    return run


class CliCase(unittest.TestCase):
    def assert_exit(self, run, code):
        self.assertEqual(run.code, code, run)
        return run


class SingleNodeTest(CliCase):
    """One node with an admin token (token-env), the default route, `fwd`
    in front of the counting upstream and `durable` (async delivery to a
    port nobody listens on, 1.5 s deadline: its signals fail)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.up = TestUpstream().start()
        ini = os.path.join(cls.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write("""
[admin]
token-env="{env}"
[route.fwd]
upstream="{up}"
[route.durable]
upstream="http://127.0.0.1:{dead}/"
delivery="async"
delivery-first-retry=100ms
delivery-max-retry=200ms
delivery-deadline=1500ms
upstream-connect-timeout=300ms
""".format(env=TOKEN_ENV, up=cls.up.url, dead=free_port()))
        cls.token_file = os.path.join(cls.tmp.path, "token")
        with open(cls.token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.node = Node(os.path.join(cls.tmp.path, "data"),
                        "--config-file=" + ini,
                        env={TOKEN_ENV: TOKEN}).start()
        cls.url = "http://127.0.0.1:%d" % cls.node.port

    @classmethod
    def tearDownClass(cls):
        try:
            cls.node.kill()
            cls.up.stop()
        finally:
            cls.tmp.cleanup()

    # -- helpers ---------------------------------------------------------

    def run_cli(self, *args, **kwargs):
        """The CLI against the node, the token from ONCEGATE_TOKEN."""
        env = {"ONCEGATE_NODE": self.url, "ONCEGATE_TOKEN": TOKEN}
        env.update(kwargs.pop("env", {}))
        return cli(*args, env=env, **kwargs)

    def admin(self, method, path):
        return self.node.request(method, path, headers={
            "Authorization": "Bearer " + TOKEN})

    def record(self, route, key):
        from urllib.parse import quote
        status, _, body = self.admin("GET", "/v1/keys/%s?route=%s"
                                     % (quote(key, safe=""), route))
        return json.loads(body) if status == 200 else None

    def key(self, tag):
        return "%s-%s" % (tag, secrets.token_hex(4))

    def in_doubt(self, key):
        self.up.set_mode("drop")
        try:
            status, _, body = self.node.request(
                "POST", "/v1/webhook/fwd", {"order": key},
                {"Idempotency-Key": key})
        finally:
            self.up.set_mode("normal")
        self.assertEqual(status, 502, body)

    # -- cases -----------------------------------------------------------

    def test_help_and_usage_errors(self):
        for args in (["help"], ["keys", "--help"], ["cluster", "--help"],
                     ["help", "keys"], ["keys", "get", "-h"], ["cluster", "help"]):
            run = self.assert_exit(cli(*args), OK)
            self.assertIn("usage: oncegate", run.out, run)
            self.assertIn("Exit codes", run.out, run)
        self.assertIn("keys COMMAND", cli("help").out)
        self.assertIn("keys redeliver ROUTE KEY", cli("keys", "--help").out)
        self.assertIn("cluster add ID", cli("cluster", "--help").out)
        # Nothing is sent for a usage error: the node address is a dead one.
        dead = "--node=127.0.0.1:%d" % free_port()
        for args in (["keys"], ["keys", "frob"], ["cluster", "frob"],
                     ["help", "frob"], ["--json"],
                     ["keys", "get", "default"],
                     ["keys", "get", "default", "a", "b"],
                     ["keys", "get", "", "k"],
                     ["keys", "get", "default", "k" * 256],
                     ["keys", "get", "default", "-k"],
                     ["keys", "get", "default", "k", "--frob"],
                     ["keys", "get", "default", "k", "--json=yes"],
                     ["keys", "list", "default", "--state=completed"],
                     ["keys", "list", "default", "--limit=0"],
                     ["keys", "list", "default", "--limit"],
                     ["keys", "list", "default", "--page-size=1001"],
                     ["keys", "complete", "default", "k"],
                     ["keys", "complete", "default", "k", "--status=ok"],
                     ["keys", "complete", "default", "k", "--status=200",
                      "--body=x", "--body-file=/dev/null"],
                     ["keys", "release", "default", "k", "--force=yes"],
                     ["cluster", "status", "extra"],
                     ["cluster", "add", "4", "127.0.0.1:7104,127.0.0.1:7204"],
                     ["cluster", "add", "x"], ["cluster", "remove", "0"],
                     ["cluster", "transfer", "--to=-1"],
                     ["cluster", "status", "--timeout=soon"],
                     ["cluster", "status", "--timeout=2h"],
                     ["cluster", "status", "--token=a", "--token-file=b"],
                     ["cluster", "status", "--token-file=/nonexistent"]):
            run = self.assert_exit(cli(*(args + [dead])), USAGE)
            self.assertEqual(run.out, "", run)
            self.assertIn("oncegate", run.err, run)
        for node in ("https://", "ftp://x", "127.0.0.1:0",
                     "127.0.0.1:99999", "::1", "http://h/path", "u@h:1", ""):
            run = cli("cluster", "status", "--node=" + node)
            self.assertEqual(run.code, USAGE, run)
        # A token of 64 KiB and more aborted the CLI (exit 134).
        run = cli("cluster", "status", "--token=" + "t" * 70000, dead)
        self.assertEqual(run.code, USAGE, "exit %d: %s" % (run.code,
                                                           run.err[-300:]))
        self.assertIn("longer than", run.err[-300:])
        # A user part is refused without echoing it (it may hold a
        # password).
        run = cli("cluster", "status",
                  env={"ONCEGATE_NODE": "http://ops:s3cretpw@127.0.0.1:1"})
        self.assert_exit(run, USAGE)
        self.assertNotIn("s3cretpw", run.err + run.out)
        self.assertIn("***@127.0.0.1:1", run.err)
        # A bad ONCEGATE_NODE is a usage error too, naming its source.
        run = cli("cluster", "status", env={"ONCEGATE_NODE": "ftp://h"})
        self.assert_exit(run, USAGE)
        self.assertIn("ONCEGATE_NODE", run.err)
        # --ca-file is for https:// nodes; one that does not load is a
        # usage error too.
        run = self.assert_exit(cli("cluster", "status", dead,
                                   "--ca-file=" + self.token_file), USAGE)
        self.assertIn("https://", run.err)
        https_dead = "--node=https://127.0.0.1:%d" % free_port()
        for ca in ("/nonexistent/ca.pem", self.token_file):
            run = self.assert_exit(cli("cluster", "status", https_dead,
                                       "--ca-file=" + ca), USAGE)
            self.assertIn(ca, run.err)

    def test_get_prints_a_record_as_a_table_or_the_nodes_json(self):
        k = self.key("get")
        self.assertEqual(self.node.webhook({"n": 1}, key=k)[0], 200)
        run = self.assert_exit(self.run_cli("keys", "get", "default", k), OK)
        lines = dict(line.split(None, 1) for line in run.out.splitlines())
        self.assertEqual(lines["key"], k)
        self.assertEqual(lines["state"], "completed")
        self.assertEqual(lines["status"], "200")
        self.assertIn('"status":"accepted"', lines["response"])
        run = self.assert_exit(
            self.run_cli("keys", "get", "default", k, "--json"), OK)
        self.assertEqual(run.json(), self.record("default", k))
        # Global options before the command words work too.
        run = self.assert_exit(cli("--json", "--node=" + self.url, "keys",
                                   "get", "default", k,
                                   "--token-file=" + self.token_file), OK)
        self.assertEqual(run.json()["key"], k)
        # host:port without a scheme.
        run = self.assert_exit(cli("keys", "get", "default", k, "--json",
                                   "--node", "127.0.0.1:%d" % self.node.port,
                                   "--token-file", self.token_file), OK)
        self.assertEqual(run.json()["key"], k)

    def test_keys_with_any_bytes_reach_the_node_intact(self):
        suffix = secrets.token_hex(3)
        keys = [k + suffix for k in ODD_KEYS] + ["."] + [".."]
        for k in keys:
            status, _, body = self.node.request(
                "POST", "/v1/webhook", {"idempotency_key": k, "v": 1})
            self.assertIn(status, (200, 409), (k, body))
        for k in keys:
            if "\0" in k:
                continue  # no argument can carry a NUL byte
            with self.subTest(key=k):
                run = self.assert_exit(self.run_cli(
                    "keys", "get", "default", "--json", "--", k), OK)
                self.assertEqual(run.json()["key"], k)
        # Tables escape what a terminal would act on.
        run = self.run_cli("keys", "get", "default", "--",
                           "tab\tkey" + suffix)
        self.assertIn('"tab\\tkey%s"' % suffix, run.out)
        self.assertNotIn("\t", run.out)
        run = self.run_cli("keys", "get", "default", "--",
                           "rtl\u202ekey" + suffix)
        self.assertIn("\\u202e", run.out)
        self.assertNotIn("\u202e", run.out)
        # The key in a list's --after is escaped as well.
        run = self.assert_exit(self.run_cli(
            "keys", "list", "default", "--after", "?route=fwd&x=1", "--json"),
            OK)
        self.assertEqual(run.json(), {"records": [], "next_after": None})

    def test_an_operator_settles_in_doubt_keys(self):
        ks = sorted(self.key("doubt") for _ in range(3))
        for k in ks:
            self.in_doubt(k)
        run = self.assert_exit(self.run_cli("keys", "list", "fwd"), OK)
        header, *rows = run.out.splitlines()
        self.assertEqual(header.split(), ["KEY", "STATE", "FIRST_SEEN",
                                          "EXPIRES_AT"])
        listed = [r.split()[0] for r in rows]
        self.assertEqual([k for k in listed if k in ks], ks)
        self.assertTrue(all(r.split()[1] == "in_doubt" for r in rows))
        # --json follows every page; --page-size makes them small.
        everything = self.run_cli("keys", "list", "fwd", "--json").json()
        paged = self.assert_exit(self.run_cli(
            "keys", "list", "fwd", "--json", "--page-size=1"), OK).json()
        self.assertEqual(paged, everything)
        self.assertIsNone(paged["next_after"])
        self.assertEqual([r["key"] for r in paged["records"] if r["key"] in ks],
                         ks)
        # --limit stops early and says where to go on.
        all_keys = [r["key"] for r in everything["records"]]
        run = self.assert_exit(self.run_cli(
            "keys", "list", "fwd", "--json", "--limit=2", "--page-size=1"),
            OK).json()
        self.assertEqual([r["key"] for r in run["records"]], all_keys[:2])
        self.assertEqual(run["next_after"], all_keys[1])
        run = self.run_cli("keys", "list", "fwd", "--limit", "2")
        self.assertIn("more records: add --after=%s" % all_keys[1], run.out)
        run = self.assert_exit(self.run_cli(
            "keys", "list", "fwd", "--json", "--after", all_keys[1]), OK)
        self.assertEqual([r["key"] for r in run.json()["records"]],
                         all_keys[2:])
        # complete: the outcome verified upstream; duplicates get it.
        run = self.assert_exit(self.run_cli(
            "keys", "complete", "fwd", ks[0], "--status", "201",
            "--body", '{"order":"filled"}',
            "--content-type=application/json"), OK)
        self.assertIn("completed", run.out)
        rec = self.record("fwd", ks[0])
        self.assertEqual((rec["state"], rec["status"], rec["response"]),
                         ("completed", 201, '{"order":"filled"}'))
        status, _, body = self.node.request("POST", "/v1/webhook/fwd",
                                            {"order": ks[0]},
                                            {"Idempotency-Key": ks[0]})
        self.assertEqual((status, json.loads(body)["original_status"]),
                         (409, 201))
        run = self.assert_exit(self.run_cli(
            "keys", "complete", "fwd", ks[0], "--status=200"), CONFLICT)
        self.assertIn("409 not-unsettled", run.err)
        # complete from a file, with --json: the node's record.
        body_file = os.path.join(self.tmp.path, "body-" + ks[1])
        with open(body_file, "w") as f:
            f.write("filled from a file")
        run = self.assert_exit(self.run_cli(
            "keys", "complete", "fwd", ks[1], "--status=200", "--json",
            "--body-file=" + body_file), OK)
        self.assertEqual(run.json()["response"], "filled from a file")
        # A status the node refuses: 400, exit 1.
        run = self.assert_exit(self.run_cli(
            "keys", "complete", "fwd", ks[2], "--status=99"), REFUSED)
        self.assertIn("400", run.err)
        # release, then the key is gone; again: not found.
        run = self.assert_exit(self.run_cli("keys", "release", "fwd", ks[2]),
                               OK)
        self.assertIn("released", run.out)
        self.assertIsNone(self.record("fwd", ks[2]))
        self.assert_exit(self.run_cli("keys", "release", "fwd", ks[2]),
                         NOT_FOUND)
        run = self.assert_exit(self.run_cli(
            "keys", "release", "fwd", ks[0], "--force", "--json"), OK)
        self.assertEqual(run.json(), {"released": True, "key": ks[0]})
        # redeliver on a route that does not deliver durably: 400.
        run = self.assert_exit(self.run_cli("keys", "redeliver", "fwd",
                                            ks[1]), REFUSED)
        self.assertIn("does not deliver durably", run.err)
        listed = [r["key"] for r in self.run_cli(
            "keys", "list", "fwd", "--json").json()["records"]]
        self.assertFalse(set(ks) & set(listed), listed)

    def test_a_failed_signal_is_redelivered(self):
        k = self.key("dead")
        status, _, body = self.node.request("POST", "/v1/webhook/durable",
                                            {"order": k},
                                            {"Idempotency-Key": k})
        self.assertEqual(status, 202, body)
        run = self.assert_exit(self.run_cli("keys", "redeliver", "durable",
                                            k), CONFLICT)
        self.assertIn("409 not-failed", run.err)
        self.assertTrue(wait_for(
            lambda: (self.record("durable", k) or {}).get("state") == "failed",
            10, 0.05), self.record("durable", k))
        run = self.assert_exit(self.run_cli(
            "keys", "list", "durable", "--state=failed"), OK)
        header, *rows = run.out.splitlines()
        self.assertEqual(header.split(), ["KEY", "STATE", "FIRST_SEEN",
                                          "EXPIRES_AT", "ATTEMPTS",
                                          "DELIVER_BY", "NEXT_ATTEMPT"])
        self.assertIn(k, [r.split()[0] for r in rows])
        run = self.assert_exit(self.run_cli("keys", "redeliver", "durable",
                                            k), OK)
        self.assertIn("queued", run.out)
        self.assertEqual(self.record("durable", k)["state"], "queued")
        run = self.assert_exit(self.run_cli("keys", "redeliver", "durable", k,
                                            "--json"), CONFLICT)
        self.assertIn("/not-failed", run.json()["type"])

    def test_exit_codes_for_what_went_wrong(self):
        k = self.key("none")
        run = self.assert_exit(self.run_cli("keys", "get", "default", k),
                               NOT_FOUND)
        self.assertIn("404 not-found", run.err)
        self.assertEqual(run.out, "")
        run = self.assert_exit(self.run_cli("keys", "get", "nosuchroute", k),
                               NOT_FOUND)
        self.assertIn("no such route", run.err)
        run = self.assert_exit(self.run_cli("keys", "list", "nosuchroute"),
                               NOT_FOUND)
        # With --json, the node's problem on stdout for scripts.
        run = self.assert_exit(self.run_cli("keys", "get", "default", k,
                                            "--json"), NOT_FOUND)
        self.assertEqual(run.json()["status"], 404)
        # No token, a wrong one: 401.
        run = self.assert_exit(cli("keys", "list", "fwd", "--node=" + self.url),
                               AUTH)
        self.assertIn("401", run.err)
        self.assertIn("ONCEGATE_TOKEN", run.err)
        for env, args in (({"ONCEGATE_TOKEN": "wrong"}, []),
                          ({}, ["--token=" + TOKEN[:-1]])):
            run = self.assert_exit(cli("cluster", "status",
                                       "--node=" + self.url, *args, env=env),
                                   AUTH)
            self.assertIn("refused the admin token", run.err)
        # The right token from each source; --token warns.
        run = self.assert_exit(cli("cluster", "status", "--node=" + self.url,
                                   "--token=" + TOKEN), OK)
        self.assertIn("visible to other users", run.err)
        self.assert_exit(cli("cluster", "status", "--node=" + self.url,
                             "--token-file=" + self.token_file), OK)
        # --token wins over ONCEGATE_TOKEN.
        self.assert_exit(cli("cluster", "status", "--node=" + self.url,
                             "--token", TOKEN,
                             env={"ONCEGATE_TOKEN": "wrong"}), OK)
        # Nobody listens.
        run = self.assert_exit(cli("cluster", "status", "--node=127.0.0.1:%d"
                                   % free_port()), UNAVAILABLE)
        self.assertIn("cannot reach", run.err)

    def test_a_node_that_does_not_answer_properly_is_unavailable(self):
        def serve(answer):
            """A listener that sends `answer` (None: nothing) to each
            connection after reading its request."""
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen(8)
            self.addCleanup(srv.close)
            conns = []
            self.addCleanup(lambda: [c.close() for c in conns])

            def loop():
                while True:
                    try:
                        c, _ = srv.accept()
                    except OSError:
                        return
                    conns.append(c)
                    try:
                        c.recv(65536)
                        if answer is not None:
                            c.sendall(answer)
                    except OSError:
                        pass

            threading.Thread(target=loop, daemon=True).start()
            return "--node=127.0.0.1:%d" % srv.getsockname()[1]

        def answer(status, body, headers=b""):
            return (b"HTTP/1.1 " + status.encode() + b"\r\n" + headers
                    + b"Content-Length: %d\r\n\r\n" % len(body) + body)

        silent = serve(None)
        t0 = time.monotonic()
        run = self.assert_exit(cli("cluster", "status", silent,
                                   "--timeout=1s"), UNAVAILABLE)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn("no complete answer within 1 s", run.err)
        huge = serve(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 17000000\r\n\r\n{")
        run = self.assert_exit(cli("cluster", "status", huge), UNAVAILABLE)
        self.assertIn("larger than 16777216 bytes", run.err)
        junk = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        run = self.assert_exit(cli("cluster", "status", junk), UNAVAILABLE)
        self.assertIn("without a JSON document", run.err)
        busy = serve(answer(
            "503 Service Unavailable",
            b'{"type":"https://oncegate.dev/problems/no-leader",'
            b'"status":503,"detail":"no \\u001b[2Jleader"}',
            b"Retry-After: 1\r\nContent-Type: application/problem+json\r\n"))
        run = self.assert_exit(cli("cluster", "status", busy), UNAVAILABLE)
        self.assertIn("503 no-leader: no \\u001b[2Jleader", run.err)
        self.assertNotIn("\x1b", run.err)
        self.assertIn("retry after 1 s", run.err)
        bad = serve(answer("500 Oops", b"\x1b[31mred!"))
        run = self.assert_exit(cli("cluster", "status", bad), REFUSED)
        self.assertNotIn("\x1b", run.err)
        self.assertIn("\\u001b[31mred!", run.err)

    def test_a_token_on_the_command_line_is_scrubbed_from_argv(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)  # accepted by the kernel, never answered
        self.addCleanup(srv.close)
        proc = subprocess.Popen(
            [BIN, "cluster", "status", "--token", TOKEN, "--timeout=3s",
             "--node=127.0.0.1:%d" % srv.getsockname()[1]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL)
        self.addCleanup(proc.kill)
        path = "/proc/%d/cmdline" % proc.pid

        def cmdline():
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError:
                return b""

        self.assertTrue(wait_for(lambda: b"x" * len(TOKEN) in cmdline(), 5,
                                 0.005), cmdline())
        self.assertNotIn(TOKEN.encode(), cmdline())
        out, err = proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, UNAVAILABLE, err)
        self.assertNotIn(TOKEN.encode(), out + err)

    def test_cluster_commands_on_a_single_node(self):
        run = self.assert_exit(self.run_cli("cluster", "status"), OK)
        self.assertIn("single", run.out)
        run = self.assert_exit(self.run_cli("cluster", "status", "--json"), OK)
        self.assertEqual(run.json(), {"mode": "single"})
        for args in (["transfer"], ["transfer", "--to=2"], ["add", "2"],
                     ["remove", "2"]):
            run = self.assert_exit(self.run_cli("cluster", *args), CONFLICT)
            self.assertIn("409 not-a-cluster", run.err)


class TlsNodeTest(CliCase):
    """A node with the TLS listener (docs/tls.md), its certificate for
    localhost and 127.0.0.1 from a test CA; and a fake node, a TLS listener
    that records every byte it receives, with a certificate the CLI must
    refuse."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        d = cls.tmp.path
        cls.ca = make_ca(d)
        cert, key, _ = make_server(d, "node", 2)
        # The same CA's certificate for another name, as a host that DNS or
        # a typo led to would present.
        sign(d, "elsewhere", "ca", "/CN=elsewhere.example",
             ["subjectAltName=DNS:elsewhere.example",
              "extendedKeyUsage=serverAuth", "basicConstraints=CA:FALSE"], 2)
        cls.elsewhere = (os.path.join(d, "elsewhere.pem"),
                         os.path.join(d, "elsewhere.key"))
        # Another CA, and a certificate from it for the right names.
        other = os.path.join(d, "other")
        os.makedirs(other)
        cls.other_ca = make_ca(other)
        cls.stranger = make_server(other, "stranger", 2)[:2]
        ini = os.path.join(d, "node.ini")
        with open(ini, "w") as f:
            f.write('[admin]\ntoken-env="%s"\n' % TOKEN_ENV)
        cls.node = Node(os.path.join(d, "data"), "--config-file=" + ini,
                        "--http.tls-certificate=" + cert,
                        "--http.tls-key=" + key, env={TOKEN_ENV: TOKEN})
        try:
            cls.node.start()
        except BaseException:
            cls.tmp.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.node.kill()
        finally:
            cls.tmp.cleanup()

    def https(self, host, port=None):
        return "https://%s:%d" % (host, port or self.node.port)

    def fake_node(self, cert, key):
        """A TLS listener on 127.0.0.1 presenting `cert`; returns its port
        and the list of what each connection sent after a handshake (b""
        when the handshake failed), appended when the connection ends."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        self.addCleanup(srv.close)
        received = []

        def loop():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                data = b""
                try:
                    c.settimeout(10)
                    with ctx.wrap_socket(c, server_side=True) as t:
                        while True:
                            chunk = t.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                except (OSError, ssl.SSLError):
                    pass
                finally:
                    c.close()
                received.append(data)

        threading.Thread(target=loop, daemon=True).start()
        return srv.getsockname()[1], received

    def test_a_node_with_the_tls_listener_is_administered_over_https(self):
        env = {"ONCEGATE_TOKEN": TOKEN}
        # By address and by name, the CA from --ca-file or ONCEGATE_CA_FILE.
        for node, extra in ((self.https("127.0.0.1"), {}),
                            (self.https("localhost"), {}),
                            (self.https("localhost"),
                             {"ONCEGATE_CA_FILE": self.ca})):
            args = ["cluster", "status", "--node=" + node]
            if not extra:
                args.append("--ca-file=" + self.ca)
            run = self.assert_exit(cli(*args, env=dict(env, **extra)), OK)
            self.assertIn("single", run.out)
        k = "tls-" + secrets.token_hex(4)
        status, _, body = http_over_tls(self.node.port, self.ca, "POST",
                                        "/v1/webhook", {"n": 1},
                                        {"Idempotency-Key": k})
        self.assertEqual(status, 200, body)
        run = self.assert_exit(cli("keys", "get", "default", k, "--json",
                                   "--node=" + self.https("localhost"),
                                   "--ca-file=" + self.ca, env=env), OK)
        self.assertEqual(run.json()["state"], "completed")
        # The token still counts: none is 401.
        self.assert_exit(cli("keys", "get", "default", k,
                             "--node=" + self.https("127.0.0.1"),
                             "--ca-file=" + self.ca), AUTH)
        # http:// to the TLS listener: its plain 400, not a hang.
        run = self.assert_exit(cli("cluster", "status",
                                   "--node=http://127.0.0.1:%d"
                                   % self.node.port, env=env), REFUSED)
        self.assertIn("400", run.err)

    def test_a_certificate_the_cli_cannot_verify_is_refused(self):
        env = {"ONCEGATE_TOKEN": TOKEN}
        # The real node, verified against another CA or the system store.
        for extra in (["--ca-file=" + self.other_ca], []):
            run = self.assert_exit(cli("cluster", "status",
                                       "--node=" + self.https("localhost"),
                                       *extra, env=env), UNAVAILABLE)
            self.assertIn("certificate verify failed", run.err)
            self.assertIn("--ca-file", run.err)
        # Fake nodes: a certificate of another CA, and one of the trusted
        # CA for another name. The handshake fails, nothing is sent.
        for (cert, key), host, why in (
                (self.stranger, "localhost", "certificate verify failed"),
                (self.elsewhere, "localhost", "hostname mismatch"),
                (self.elsewhere, "127.0.0.1", "IP address mismatch")):
            port, received = self.fake_node(cert, key)
            run = cli("keys", "list", "default", "--timeout=5s",
                      "--node=" + self.https(host, port),
                      "--ca-file=" + self.ca, env=env)
            self.assertTrue(wait_for(lambda: len(received) >= 1, 10), run)
            self.assertNotIn(TOKEN.encode(), b"".join(received))
            self.assertEqual(received, [b""] * len(received), run)
            self.assert_exit(run, UNAVAILABLE)
            self.assertIn(why, run.err)
            self.assertIn("cannot reach https://%s:%d" % (host, port),
                          run.err)


def http_over_tls(port, ca, method, path, body, headers):
    """One request to the node's TLS listener, verified against `ca`."""
    import http.client
    ctx = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("localhost", port, context=ctx,
                                       timeout=10)
    try:
        data = json.dumps(body)
        conn.request(method, path, body=data, headers=dict(
            headers, **{"Content-Type": "application/json"}))
        res = conn.getresponse()
        return res.status, res.getheaders(), res.read()
    finally:
        conn.close()


class CliCluster(Cluster):
    """Nodes 1-3 bootstrap (cluster.initial), node 4 is in every node's
    cluster.peers and joins when added; admin changes from loopback without
    a token (the token is the single node's case). Routes: `orders` in
    front of the counting upstream, `durable` to a dead port."""

    def __init__(self, root, upstream_url):
        super().__init__(root, upstream_url, peers=4, tls=False)
        self.dead = free_port()

    def ini_text(self, node_id, peer_ids, join=False):
        return """
[global]
http-host="127.0.0.1"
http-threads=1

[scheduler]
policy='sharing'

[admin]
allow-unauthenticated-loopback=true

[route.orders]
upstream="{url}"

[route.durable]
upstream="http://127.0.0.1:{dead}/"
delivery="async"
delivery-first-retry=100ms
delivery-max-retry=200ms
delivery-deadline=1500ms
upstream-connect-timeout=300ms
""".format(url=self.upstream_url, dead=self.dead) + cluster_section(
            node_id, [self.peer_lines[i - 1] for i in peer_ids],
            remote_timeout="1s", join=join) + "initial=[1, 2, 3]\n"


class ClusterTest(CliCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.up = TestUpstream().start()
        cls.cluster = CliCluster(cls.tmp.path, cls.up.url)
        try:
            for i in (1, 2, 3):
                cls.cluster.add(i, [1, 2, 3, 4])
            for i in (1, 2, 3):
                cls.cluster.node(i).start()
            cls.cluster.add(4, [1, 2, 3, 4], join=True).start()
            cls.cluster.wait_leader([1, 2, 3])
            cls.cluster.wait_ready([1, 2, 3])
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.cluster.kill_all()
            cls.up.stop()
        finally:
            cls.tmp.cleanup()

    def on(self, node_id, *args):
        node = "--node=http://127.0.0.1:%d" % self.cluster.node(node_id).port
        return cli(*(list(args) + [node]))

    def leader(self):
        return self.cluster.wait_leader([1, 2, 3])

    def voters(self, node_id):
        run = self.on(node_id, "cluster", "status", "--json")
        if run.code != OK:
            return None
        return sorted(m["id"] for m in run.json()["members"]
                      if m["role"] == "voter")

    def test_every_command_against_a_three_node_cluster(self):
        try:
            self.every_command()
        except BaseException:
            print("\n" + self.cluster.logs(), file=sys.stderr)
            raise

    def every_command(self):
        lid = self.leader()
        f1, f2 = [i for i in (1, 2, 3) if i != lid]
        # A durable signal that fails while the rest runs.
        dead = "dead-" + secrets.token_hex(4)
        status, _, body = self.cluster.node(f1).request(
            "POST", "/v1/webhook/durable", {"order": dead},
            {"Idempotency-Key": dead})
        self.assertEqual(status, 202, body)

        # status: every node's view, a table and the node's JSON.
        for i in (1, 2, 3):
            run = self.assert_exit(self.on(i, "cluster", "status"), OK)
            fields = dict(line.split(None, 1)
                          for line in run.out.split("\n\n")[0].splitlines())
            self.assertEqual(fields["id"], str(i))
            self.assertEqual(fields["role"],
                             "leader" if i == lid else "follower")
            self.assertTrue(fields["leader"].startswith("%d at " % lid),
                            fields)
            header, *members = run.out.split("\n\n")[1].splitlines()
            self.assertEqual(header.split(), ["ID", "ADDRESS", "ROLE",
                                              "LEADER"])
            self.assertEqual([m.split()[0] for m in members], ["1", "2", "3"])
            doc = self.assert_exit(self.on(i, "cluster", "status", "--json"),
                                   OK).json()
            self.assertEqual((doc["mode"], doc["id"], doc["leader_id"]),
                             ("cluster", i, lid))

        # keys on any node: a decision taken through one follower is read,
        # listed and settled through the others.
        done = "done-" + secrets.token_hex(4)
        self.assertEqual(self.cluster.node(f1).request(
            "POST", "/v1/webhook/orders", {"order": done},
            {"Idempotency-Key": done})[0], 200)
        self.assertTrue(wait_for(
            lambda: self.on(f2, "keys", "get", "orders", done).code == OK,
            10, 0.05))
        run = self.assert_exit(self.on(f2, "keys", "get", "orders", done,
                                       "--json"), OK)
        self.assertEqual((run.json()["state"], run.json()["status"]),
                         ("completed", 200))
        doubt = sorted("doubt-%d-%s" % (n, secrets.token_hex(3))
                       for n in range(3))
        self.up.set_mode("drop")
        try:
            for k in doubt:
                status, _, body = self.cluster.node(lid).request(
                    "POST", "/v1/webhook/orders", {"order": k},
                    {"Idempotency-Key": k})
                self.assertEqual(status, 502, body)
        finally:
            self.up.set_mode("normal")
        for i in (f1, f2, lid):
            self.assertTrue(wait_for(lambda: [
                r["key"] for r in self.on(i, "keys", "list", "orders",
                                          "--json", "--page-size=2")
                .json()["records"]] == doubt, 10, 0.05))
        run = self.assert_exit(self.on(f1, "keys", "list", "orders"), OK)
        self.assertEqual([r.split()[0] for r in run.out.splitlines()[1:]],
                         doubt)
        self.assert_exit(self.on(f1, "keys", "complete", "orders", doubt[0],
                                 "--status=200", "--body=ok"), OK)
        self.assert_exit(self.on(f2, "keys", "complete", "orders", doubt[0],
                                 "--status=200"), CONFLICT)
        self.assert_exit(self.on(f2, "keys", "release", "orders", doubt[1]),
                         OK)
        self.assert_exit(self.on(lid, "keys", "release", "orders", doubt[1]),
                         NOT_FOUND)
        self.assert_exit(self.on(lid, "keys", "get", "orders", doubt[1]),
                         NOT_FOUND)
        self.assert_exit(self.on(f1, "keys", "redeliver", "orders",
                                 doubt[2]), REFUSED)
        self.assertTrue(wait_for(lambda: self.on(
            f2, "keys", "get", "durable", dead, "--json").json()["state"]
            == "failed", 10, 0.05))
        run = self.assert_exit(self.on(f2, "keys", "list", "durable",
                                       "--state=failed", "--json"), OK)
        self.assertEqual([r["key"] for r in run.json()["records"]], [dead])
        run = self.assert_exit(self.on(f2, "keys", "redeliver", "durable",
                                       dead), OK)
        self.assertIn("queued", run.out)
        self.assert_exit(self.on(f1, "keys", "redeliver", "durable", dead),
                         CONFLICT)

        # transfer: to a follower, through the other one; then to any.
        run = self.assert_exit(self.on(f2, "cluster", "transfer",
                                       "--to=%d" % f1), OK)
        self.assertIn("node %d leads" % f1, run.out)
        self.assertEqual(self.leader(), f1)
        run = self.assert_exit(self.on(lid, "cluster", "transfer", "--json"),
                               OK)
        self.assertEqual(run.json()["status"], "ok")
        lid = self.leader()
        self.assertEqual(run.json()["leader_id"], lid)
        run = self.assert_exit(self.on(lid, "cluster", "transfer", "--to=9"),
                               CONFLICT)
        self.assertIn("409 cluster-change-refused", run.err)
        # A transfer that cannot happen (to the leader itself) is refused by
        # the node, not answered 200 with no leader.
        status, _, body = self.cluster.node(lid).request(
            "POST", "/v1/cluster/transfer?to=%d" % lid, None,
            {"Authorization": "Bearer " + TOKEN}, timeout=15)
        self.assertEqual(status, 409, body)
        self.assertIn(b"cluster-change-refused", body)
        self.assertEqual(self.leader(), lid)

        # add node 4 (through a follower), then remove it again.
        f1 = [i for i in (1, 2, 3) if i != lid][0]
        run = self.assert_exit(self.on(f1, "cluster", "add", "4"), OK)
        self.assertIn("node 4 added", run.out)
        self.assertTrue(wait_for(
            lambda: all(self.voters(i) == [1, 2, 3, 4] for i in (1, 2, 3, 4)),
            15, 0.05), [self.voters(i) for i in (1, 2, 3, 4)])
        self.assert_exit(self.on(4, "keys", "get", "orders", done), OK)
        self.assert_exit(self.on(f1, "cluster", "add", "4"), CONFLICT)
        self.assert_exit(self.on(lid, "cluster", "add", "9"), CONFLICT)
        run = self.assert_exit(self.on(f1, "cluster", "remove", "4",
                                       "--json"), OK)
        self.assertEqual(run.json()["status"], "ok")
        self.assertTrue(wait_for(
            lambda: all(self.voters(i) == [1, 2, 3] for i in (1, 2, 3)),
            15, 0.05), [self.voters(i) for i in (1, 2, 3)])
        run = self.assert_exit(self.on(lid, "cluster", "remove", "4"),
                               CONFLICT)
        self.assertIn("409 cluster-change-refused", run.err)


if __name__ == "__main__":
    unittest.main()
