"""Configuration errors stop the node at start with exit code 2 and a
message naming the option."""

import json
import os
import subprocess
import unittest

from harness import BIN, Node, TempDir


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def run_node(self, ini_text, *args):
        ini = os.path.join(self.tmp.path, "node.ini")
        with open(ini, "w") as f:
            f.write(ini_text)
        out = subprocess.run(
            [BIN, "--config-file=" + ini, "--http-port=0",
             "--data-dir=" + os.path.join(self.tmp.path, "data"), *args],
            capture_output=True, timeout=30)
        return out.returncode, (out.stdout + out.stderr).decode()

    def test_an_unknown_key_names_itself(self):
        code, text = self.run_node("[keys]\nttll=1h\n")
        self.assertEqual(code, 2, text)
        self.assertIn("unknown option keys.ttll", text)
        code, text = self.run_node("[nosuch]\na=1\n")
        self.assertEqual(code, 2, text)
        self.assertIn("unknown option nosuch.a", text)
        code, text = self.run_node("http-prt=8080\n")
        self.assertEqual(code, 2, text)
        self.assertIn("unknown option http-prt", text)

    def test_a_bad_value_quotes_its_line(self):
        code, text = self.run_node("[keys]\nttl=24h\n\n[http]\nbody-limit=big\n")
        self.assertEqual(code, 2, text)
        self.assertIn("line 5: `body-limit=big`", text)

    def test_an_unknown_flag_is_refused(self):
        code, text = self.run_node("", "--keys.ttll=1h")
        self.assertEqual(code, 2, text)
        self.assertIn("--keys.ttll", text)

    def test_a_bad_cluster_peer_names_the_option(self):
        code, text = self.run_node(
            '[cluster]\nid=1\ninsecure=true\npeers=["1=127.0.0.1:7101"]\n')
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.peers", text)
        code, text = self.run_node(
            '[cluster]\nid=4\ninsecure=true\n'
            'peers=["1=127.0.0.1:7101,127.0.0.1:7201"]\n')
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.id 4 is not among cluster.peers", text)

    def test_a_cluster_needs_tls_or_an_explicit_insecure(self):
        peers = 'peers=["1=127.0.0.1:7101,127.0.0.1:7201"]\n'
        code, text = self.run_node('[cluster]\nid=1\n' + peers)
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.tls-ca, cluster.tls-certificate and "
                      "cluster.tls-key", text)
        self.assertIn("cluster.insecure=true", text)
        code, text = self.run_node('[cluster]\nid=1\ntls-ca="ca.pem"\n'
                                   + peers)
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.tls-certificate", text)
        code, text = self.run_node('[cluster]\nid=1\ninsecure=true\n'
                                   'tls-ca="ca.pem"\n' + peers)
        self.assertEqual(code, 2, text)
        self.assertIn("choose one", text)

    def test_help_lists_every_option_with_its_default(self):
        out = subprocess.run([BIN, "--help"], capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0)
        text = out.stdout.decode()
        self.assertIn("--keys.ttl=<timespan>  (default: 1d)", text)
        self.assertIn("--http-port=<uint16>  (default: 8080)", text)
        self.assertIn("--cluster.election-timeout=<timespan>  (default: 500ms)",
                      text)
        self.assertIn("--version", text)

    def test_the_shipped_configs_are_valid(self):
        root = os.path.join(os.path.dirname(__file__), "..", "..",
                            "cluster-config")
        for sub in ("", "three-node", "five-node"):
            d = os.path.join(root, sub)
            for name in sorted(os.listdir(d)):
                if not name.endswith(".ini"):
                    continue
                with open(os.path.join(d, name)) as f:
                    text = f.read()
                code, out = self.check(text)
                self.assertEqual(code, 0, name + ": " + out)
                self.assertIn("configuration OK", out)

    def check(self, ini_text, *args):
        ini = os.path.join(self.tmp.path, "check.ini")
        with open(ini, "w") as f:
            f.write(ini_text)
        out = subprocess.run([BIN, "--check-config", ini, *args],
                             capture_output=True, timeout=30)
        return out.returncode, (out.stdout + out.stderr).decode()

    def test_check_config_prints_the_effective_config_with_secrets_masked(self):
        code, out = self.check(
            '[keys]\nttl=72h\n[admin]\ntoken="hunter2-admin"\n'
            '[route.tv]\nauth="token"\nsecret="hunter2-route"\n')
        self.assertEqual(code, 0, out)
        self.assertIn("keys.ttl=3d", out)              # set in the file
        self.assertIn("keys.max-live=1000000", out)    # a default
        self.assertIn("admin.token=***", out)
        self.assertIn("route.tv.secret=***", out)
        self.assertNotIn("hunter2", out)
        # A command-line flag wins over the file.
        code, out = self.check("[keys]\nttl=72h\n", "--keys.ttl=1h")
        self.assertIn("keys.ttl=1h", out)
        # And a bad file is refused the same way as at start.
        code, out = self.check("[keys]\nttll=1h\n")
        self.assertEqual(code, 2, out)
        self.assertIn("unknown option keys.ttll", out)


class LoggingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)

    def test_json_lines_to_a_rotating_file_with_levels_per_component(self):
        log_file = os.path.join(self.tmp.path, "node.jsonl")
        node = Node(os.path.join(self.tmp.path, "data"), "--log-format=json",
                    "--log-file=" + log_file, "--log-levels=store=warn",
                    "--log-level=info")
        node.start()
        self.addCleanup(node.kill)
        status, _, _ = node.webhook({"a": "quote \" and \\ newline \n"},
                                    key="log-k1")
        self.assertEqual(status, 200)
        node.stop()
        with open(log_file) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        self.assertTrue(lines)
        for entry in lines:
            self.assertEqual(set(entry), {"ts", "level", "component", "msg"})
            # store=warn: none of the store's info lines (store.opened).
            if entry["component"] == "store":
                self.assertNotEqual(entry["level"], "info", entry)
        msgs = [e["msg"] for e in lines]
        self.assertTrue(any(m.startswith("node.ready") for m in msgs), msgs)
        self.assertFalse(any(m.startswith("store.opened") for m in msgs))

    def test_bad_log_options_are_refused(self):
        for flag in ("--log-format=xml", "--log-levels=disk=info",
                     "--log-levels=store=loud", "--log-level=chatty"):
            out = subprocess.run([BIN, "--check-config", os.devnull, flag],
                                 capture_output=True, timeout=30)
            self.assertEqual(out.returncode, 2, flag)
            self.assertIn("log-", (out.stdout + out.stderr).decode(), flag)


if __name__ == "__main__":
    unittest.main()
