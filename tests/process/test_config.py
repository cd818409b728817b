"""Configuration errors stop the node at start with exit code 2 and a
message naming the option."""

import json
import os
import re
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

    def test_a_value_of_the_wrong_type_is_refused_not_dropped(self):
        # CAF 0.17 drops such a value without a word and keeps the default:
        # a token that is no string left the admin API without one.
        for ini, name in (('[keys]\nttl="1h"\n', "keys.ttl"),
                          ("[admin]\ntoken=123456789\n", "admin.token"),
                          ("[global]\nhttp-port=99999\n", "http-port"),
                          ("[http]\nbody-limit=-1\n", "http.body-limit"),
                          ("[http]\nmax-connections=-3\n",
                           "http.max-connections"),
                          ("[cluster]\nid=-1\n", "cluster.id"),
                          ('[keys]\nmax-live="12"\n', "keys.max-live")):
            code, text = self.check(ini)
            self.assertEqual(code, 2, ini + text)
            self.assertIn("bad value for " + name, text)
            self.assertNotIn("123456789", text)  # a secret is never echoed

    def test_a_number_above_2_63_on_the_command_line_is_refused(self):
        # CAF 0.17 keeps integers as int64: on the command line such a
        # number became 0 without a word (the file's parser refuses it).
        for arg, name in (
                ("--store.max-pending-bytes=18446744073709551615",
                 "store.max-pending-bytes"),
                ("--store.max-pending-bytes=9223372036854775808",
                 "store.max-pending-bytes"),
                ("--keys.max-live=+00099999999999999999999",
                 "keys.max-live")):
            code, text = self.check("", arg)
            self.assertEqual(code, 2, arg + text)
            self.assertIn("bad value for " + name + " on the command line",
                          text)
        # The largest that fits is taken as given; a string option takes
        # any digits.
        code, text = self.check("",
                                "--store.max-pending-bytes=9223372036854775807",
                                "--admin.token=18446744073709551616")
        self.assertEqual(code, 0, text)
        self.assertIn("store.max-pending-bytes=9223372036854775807", text)

    def test_a_section_or_key_given_twice_is_refused(self):
        # The last one won silently: a second [route.tv] turned its
        # authentication off.
        code, text = self.check('[route.tv]\nauth="token"\nsecret="abc123"\n'
                                '[keys]\nttl=1h\n[route.tv]\nauth="none"\n')
        self.assertEqual(code, 2, text)
        self.assertIn("section [route.tv] appears twice", text)
        self.assertIn("lines 1 and 6", text)
        code, text = self.check("[keys]\nttl=1h\n; a comment\nttl = 2h\n")
        self.assertEqual(code, 2, text)
        self.assertIn("ttl is set twice in [keys]", text)
        # Lines of a multi-line list are no keys; one key in two sections
        # is two keys.
        code, text = self.check(
            '[http]\nidle-timeout=1s\n[keys]\nidle-timeout=2s\n'
            '[cluster]\ninitial=[\n  1,\n  2\n]\npeers=[\n'
            '  "1=127.0.0.1:7101,127.0.0.1:7201",\n'
            '  "2=127.0.0.1:7102,127.0.0.1:7202"\n]\n')
        self.assertEqual(code, 0, text)

    def test_a_config_file_that_is_no_regular_file_is_refused(self):
        fifo = os.path.join(self.tmp.path, "fifo")
        os.mkfifo(fifo)
        for path in (self.tmp.path, fifo):  # a directory read as empty;
            out = subprocess.run(            # a FIFO blocked the reader
                [BIN, "--check-config", path], capture_output=True,
                timeout=10)
            text = (out.stdout + out.stderr).decode()
            self.assertEqual(out.returncode, 2, text)
            self.assertIn("is not a regular file", text)

    def test_durations_out_of_range_are_refused(self):
        for args, want in (
                (["--keys.ttl=100000h"], "keys.ttl must be at most ten years"),
                (["--alarm.max-interval=0s"],
                 "alarm.max-interval must be positive"),
                (["--alarm.max-interval=-5s"],
                 "alarm.max-interval must be positive"),
                (["--http.header-timeout=-1s"],
                 "http.header-timeout must be positive"),
                (["--http.shutdown-grace=-1s"],
                 "http.shutdown-grace must not be negative"),
                (["--cluster.max-clock-offset=0s"],
                 "cluster.max-clock-offset must be within 1ms..24h"),
                (["--cluster.max-clock-offset=-500ms"],
                 "cluster.max-clock-offset must be within 1ms..24h"),
                (["--cluster.max-clock-offset=25h"],
                 "cluster.max-clock-offset must be within 1ms..24h")):
            code, text = self.check("", *args)
            self.assertEqual(code, 2, text)
            self.assertIn(want, text)
        # Every webhook failed (503) with a route ttl over the ten years a
        # record may live.
        code, text = self.check('[route.tv]\nauth="none"\nttl=100000h\n')
        self.assertEqual(code, 2, text)
        self.assertIn("ttl", text)
        self.assertIn("at most ten years", text)
        code, text = self.check("", "--http.shutdown-grace=0s")
        self.assertEqual(code, 0, text)
        # A page count that a 32-bit field would truncate.
        code, text = self.check("", "--store.wal-writeout-pages=4294967296")
        self.assertEqual(code, 2, text)
        self.assertIn("store.wal-writeout-pages must be at most", text)
        code, text = self.check("", "--store.wal-writeout-pages=0")
        self.assertEqual(code, 0, text)
        code, text = self.check("", "--cluster.max-clock-offset=250ms")
        self.assertEqual(code, 0, text)

    def test_printed_durations_read_back(self):
        # CAF prints 72h as "3d", which neither a flag nor the file accepts.
        code, text = self.check("[keys]\nttl=72h\nin-flight-deadline=90s\n"
                                "[http]\nresponse-timeout=1500ms\n")
        self.assertEqual(code, 0, text)
        spans = [l for l in text.splitlines()
                 if re.fullmatch(r"[a-z.-]+=-?[0-9]+[a-z]+", l)]
        self.assertIn("keys.ttl=72h", spans)
        self.assertIn("keys.in-flight-deadline=90s", spans)
        self.assertIn("http.response-timeout=1500ms", spans)
        code, again = self.check("", *["--" + l for l in spans])
        self.assertEqual(code, 0, again)
        for line in spans:
            self.assertIn(line, again.splitlines())

    def test_an_unknown_flag_is_refused(self):
        code, text = self.run_node("", "--keys.ttll=1h")
        self.assertEqual(code, 2, text)
        self.assertIn("--keys.ttll", text)

    def test_a_bad_cluster_peer_names_the_option(self):
        for bad in ("1=127.0.0.1", "1=127.0.0.1:99999", "x=127.0.0.1:7101",
                    "1=127.0.0.1:7101,127.0.0.1"):
            code, text = self.run_node(
                '[cluster]\nid=1\ninsecure=true\npeers=["%s"]\n' % bad)
            self.assertEqual(code, 2, text)
            self.assertIn("cluster.peers", text)
        # The form of builds before the node link (a second, CAF address)
        # is still read; its second address is ignored.
        for peers in ('"1=127.0.0.1:7101"', '"1=127.0.0.1:7101,127.0.0.1:7201"'):
            code, text = self.run_node(
                '[cluster]\nid=4\ninsecure=true\npeers=[%s]\n' % peers)
            self.assertEqual(code, 2, text)
            self.assertIn("cluster.id 4 is not among cluster.peers", text)

    def test_raft_entries_must_fit_the_log_byte_bound(self):
        # An entry larger than what a snapshot leaves room for would wait
        # for room that never comes (back-pressure on the raft log).
        cluster = ('[cluster]\nid=1\ninsecure=true\n'
                   'peers=["1=127.0.0.1:7101,127.0.0.1:7201"]\n')
        code, text = self.run_node(cluster + 'max-log-bytes=2000000\n'
                                   'max-entry-bytes=1000000\n')
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.max-entry-bytes must be at most a quarter of "
                      "cluster.max-log-bytes", text)
        code, text = self.run_node(cluster + 'max-hold=2h\n')
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.max-hold must be at most 1h", text)
        code, text = self.run_node(cluster + 'max-hold=-1s\n')
        self.assertEqual(code, 2, text)
        self.assertIn("cluster.max-hold must not be negative", text)

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
        self.assertIn("--keys.ttl=<timespan>  (default: 24h)", text)
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

    def test_the_store_runs_on_the_scheduler_unless_the_file_says_no(self):
        # Every node kind: a cluster node's store never waits for its disk,
        # a single node's commits on the asking HTTP thread or its sink's
        # commit thread. The file can turn it off (a CAF 0.17 flag can only
        # turn a switch on).
        cluster = ('[cluster]\nid=1\ninsecure=true\n'
                   'peers=["1=127.0.0.1:7101"]\n')
        for ini, args, expected in (
                ("", (), "true"),
                ("[store]\non-scheduler=false\n", (), "false"),
                ("", ("--store.on-scheduler",), "true"),
                ("[store]\non-scheduler=true\n", (), "true"),
                (cluster, (), "true"),
                (cluster + "[store]\non-scheduler=false\n", (), "false"),
                (cluster + "[store]\non-scheduler=true\n", (), "true")):
            code, out = self.check(ini, *args)
            self.assertEqual(code, 0, ini + out)
            self.assertIn("store.on-scheduler=" + expected + "\n", out,
                          ini + " " + " ".join(args))

    def test_check_config_prints_the_effective_config_with_secrets_masked(self):
        code, out = self.check(
            '[keys]\nttl=72h\n[admin]\ntoken="hunter2-admin"\n'
            '[route.tv]\nauth="token"\nsecret="hunter2-route"\n')
        self.assertEqual(code, 0, out)
        self.assertIn("keys.ttl=72h", out)             # set in the file
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
