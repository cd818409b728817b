"""The native TLS listener (docs/tls.md): with `http.tls-certificate` and
`http.tls-key` the node speaks HTTPS on its port, TLS 1.2 or later with ALPN
http/1.1, offering only the AEAD suites of Mozilla's intermediate profile
(with an ECDSA and with an RSA certificate) and its key-exchange groups,
and letting the client choose; plain HTTP there gets a plain 400; a handshake is bounded by
`http.tls-handshake-timeout` and counts against `http.max-connections`;
SIGHUP reloads the files for new connections without dropping a request,
and a bad replacement is refused (logged) while the old certificate stays;
files that do not load stop the node at start with exit code 2.

Certificates are made here with the openssl CLI (as in
test_https_upstream): one CA, two server certificates for localhost /
127.0.0.1 with different serials and lifetimes, a key of neither. The
client is Python's ssl module verifying against the CA.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import unittest

from harness import BIN, Node, TempDir, wait_for

PROBLEM = "https://oncegate.dev/problems/"
EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
RSA_KEY = ["-newkey", "rsa:2048", "-nodes"]
# Mozilla's intermediate profile (Server Side TLS 5.7), written out here
# rather than read from the product: the TLS 1.2 suites, then TLS 1.3's.
MOZILLA_TLS12 = {
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
    "DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384"}
MOZILLA_TLS13 = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                 "TLS_CHACHA20_POLY1305_SHA256"}
SERVER_EXT = ["subjectAltName=DNS:localhost,IP:127.0.0.1",
              "extendedKeyUsage=serverAuth", "basicConstraints=CA:FALSE"]
TV_TOKEN = "tv-listener-secret"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True,
                   timeout=30)


def make_ca(d):
    openssl("req", "-x509", *EC_KEY, "-days", "2",
            "-subj", "/CN=oncegate listener test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", os.path.join(d, "ca.key"),
            "-out", os.path.join(d, "ca.pem"))
    return os.path.join(d, "ca.pem")


def sign(d, name, issuer, subject, ext, days, key=EC_KEY):
    """`name`.pem / `name`.key for `subject`, signed by `issuer` (the
    basename of its .pem / .key); returns the serial as int."""
    base = os.path.join(d, name)
    serial = int.from_bytes(os.urandom(8), "big") | 1 << 62
    openssl("req", "-new", *key, "-subj", subject,
            "-keyout", base + ".key", "-out", base + ".csr")
    with open(base + ".ext", "w") as f:
        f.write("\n".join(ext) + "\n")
    openssl("x509", "-req", "-in", base + ".csr",
            "-CA", os.path.join(d, issuer + ".pem"),
            "-CAkey", os.path.join(d, issuer + ".key"),
            "-set_serial", str(serial), "-days", str(days),
            "-extfile", base + ".ext", "-out", base + ".pem")
    return serial


def make_server(d, name, days, issuer="ca"):
    """A server certificate for localhost / 127.0.0.1 signed by `issuer`;
    returns (pem, key, serial as int). The pem is the full chain when the
    issuer is an intermediate (as certbot's fullchain.pem)."""
    serial = sign(d, name, issuer, "/CN=localhost", SERVER_EXT, days)
    base = os.path.join(d, name)
    if issuer != "ca":
        with open(base + ".pem", "a") as chain, \
                open(os.path.join(d, issuer + ".pem")) as f:
            chain.write(f.read())
    return base + ".pem", base + ".key", serial


def make_intermediate(d, name):
    """A CA signed by the root, as Let's Encrypt's R10 / E5 are."""
    sign(d, name, "ca", "/CN=oncegate listener test intermediate",
         ["basicConstraints=critical,CA:TRUE,pathlen:0",
          "keyUsage=critical,keyCertSign,cRLSign"], 2)


def install(src, dst):
    """Replaces `dst` by a copy of `src` at once (rename), as certbot swaps
    its links: a reader sees the old file or the new one."""
    tmp = dst + ".new"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def tls12_handshake(port, ca, suites):
    """A TLS 1.2 handshake offering only `suites` (OpenSSL's names, in
    order of preference): the suite the node chose, or the SSLError of
    its refusal."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    # Security level 0: this client offers whatever it is told to.
    ctx.set_ciphers(suites + ":@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return s.cipher()[0]
        except ssl.SSLError as e:
            return e


def tls12_suites_accepted(port, ca):
    """Every TLS 1.2 suite this client's OpenSSL knows, offered one at a
    time as testssl.sh does: the set the node accepted."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    names = [c["name"] for c in probe.get_ciphers()
             if c["protocol"] != "TLSv1.3"]
    assert len(names) > 40, names
    accepted = set()
    for name in names:
        if isinstance(tls12_handshake(port, ca, name), str):
            accepted.add(name)
    return accepted


def client_context(ca):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def tv_alert(index):
    """A TradingView alert as it sends one: JSON as text/plain, the token
    as `passphrase`, keyed by the derived key (exchange, symbol, action,
    timestamp)."""
    body = json.dumps({"exchange": "TLSTEST", "symbol": "BTCUSDT",
                       "action": ("buy", "sell")[index % 2],
                       "timestamp": 1700000000000 + index,
                       "qty": 1, "passphrase": TV_TOKEN})
    return body, {"Content-Type": "text/plain; charset=utf-8"}


class TlsListenerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = TempDir()
        cls.node = None
        try:
            cls._start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _start(cls):
        d = cls.tmp.path
        cls.ca = make_ca(d)
        cls.a = make_server(d, "a", 2)
        # The second one comes with its intermediate, like certbot's
        # fullchain.pem: the client trusts the root only.
        make_intermediate(d, "intermediate")
        cls.b = make_server(d, "b", 3, issuer="intermediate")
        cls.stranger_key = make_server(d, "stranger", 2)[1]
        # Where the node reads them, like /etc/letsencrypt/live/NAME/.
        live = os.path.join(d, "live")
        os.makedirs(live)
        cls.cert = os.path.join(live, "fullchain.pem")
        cls.key = os.path.join(live, "privkey.pem")
        install(cls.a[0], cls.cert)
        install(cls.a[1], cls.key)
        cls.pairs = {cls.a[2]: cls.a, cls.b[2]: cls.b}
        ini = os.path.join(d, "node.ini")
        with open(ini, "w") as f:
            f.write('[route.tv]\nauth="token"\nsecret="%s"\n' % TV_TOKEN)
        cls.node = Node(os.path.join(d, "node"), "--config-file=" + ini,
                        "--http.tls-certificate=" + cls.cert,
                        "--http.tls-key=" + cls.key,
                        "--http.tls-handshake-timeout=1s").start()
        cls.ctx = client_context(cls.ca)
        cls.next_index = 0
        cls.index_lock = threading.Lock()

    @classmethod
    def tearDownClass(cls):
        try:
            if cls.node is not None:
                cls.node.stop()
        finally:
            cls.tmp.cleanup()

    @classmethod
    def index(cls):
        with cls.index_lock:
            cls.next_index += 1
            return cls.next_index

    def connect(self, node=None):
        conn = http.client.HTTPSConnection("127.0.0.1",
                                           (node or self.node).port,
                                           context=self.ctx, timeout=10)
        conn.connect()
        return conn

    @staticmethod
    def serial(conn):
        return int(conn.sock.getpeercert()["serialNumber"], 16)

    @staticmethod
    def call(conn, index):
        body, headers = tv_alert(index)
        conn.request("POST", "/v1/webhook/tv", body=body, headers=headers)
        res = conn.getresponse()
        return res.status, res.read()

    def log_count(self, text):
        with open(self.node.log_path, errors="replace") as f:
            return f.read().count(text)

    def test_a_tradingview_alert_over_https_is_200_then_409(self):
        conn = self.connect()
        try:
            self.assertEqual(conn.sock.version() in ("TLSv1.2", "TLSv1.3"),
                             True)
            self.assertEqual(conn.sock.selected_alpn_protocol(), "http/1.1")
            i = self.index()
            status, body = self.call(conn, i)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["key_source"], "derived")
            # A retry on the same kept-alive connection, and on a new one.
            status, body = self.call(conn, i)
            self.assertEqual(status, 409, body)
            self.assertEqual(json.loads(body)["type"], PROBLEM + "duplicate")
        finally:
            conn.close()
        conn = self.connect()
        try:
            self.assertEqual(self.call(conn, i)[0], 409)
            # As application/json with the token in the URL instead.
            body, _ = tv_alert(self.index())
            conn.request("POST", "/v1/webhook/tv?token=" + TV_TOKEN,
                         body=body,
                         headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            self.assertEqual(res.status, 200, res.read())
        finally:
            conn.close()

    @unittest.skipUnless(shutil.which("curl"), "needs curl")
    def test_expect_continue_and_the_body_limit_work_over_tls(self):
        def curl(body, key):
            path = os.path.join(self.tmp.path, "body.json")
            with open(path, "w") as f:
                f.write(body)
            out = subprocess.run(
                ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                 "--cacert", self.ca, "-H", "Content-Type: application/json",
                 "-H", "Expect: 100-continue", "-H", "Idempotency-Key: " + key,
                 "--data-binary", "@" + path,
                 "https://127.0.0.1:%d/v1/webhook" % self.node.port],
                capture_output=True, timeout=30)
            return out.stdout.decode()
        key = "tls-continue-%d" % self.index()
        self.assertEqual(curl(json.dumps({"pad": "x" * 2000}), key), "200")
        self.assertEqual(curl(json.dumps({"pad": "x" * 2000}), key), "409")
        # Over the 64 KiB limit: refused before the body is sent.
        self.assertEqual(curl(json.dumps({"pad": "x" * 70000}), key + "-big"),
                         "413")

    def test_tls_1_1_is_refused_and_1_2_is_served(self):
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(self.ca)
        # Let this client really offer TLS 1.0/1.1 (Debian's default
        # security level would not even try).
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        with socket.create_connection(("127.0.0.1", self.node.port),
                                      timeout=10) as raw:
            with self.assertRaises(ssl.SSLError) as refused:
                old.wrap_socket(raw, server_hostname="127.0.0.1")
            # The node's alert, not this client's own refusal.
            self.assertIn("alert protocol version", str(refused.exception))
        tls12 = client_context(self.ca)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        conn = http.client.HTTPSConnection("127.0.0.1", self.node.port,
                                           context=tls12, timeout=10)
        try:
            conn.request("GET", "/healthz")
            self.assertEqual(conn.getresponse().status, 200)
            self.assertEqual(conn.sock.version(), "TLSv1.2")
        finally:
            conn.close()

    def check_offer(self, port, kind, refused):
        """The node at `port` (a certificate of `kind`, "ECDSA" or "RSA")
        keeps to Mozilla's intermediate profile: of TLS 1.2, only the
        profile's suites for its key (AEAD, ECDHE or DHE), each of the
        ECDHE ones; the `refused` suites with the node's own alert; TLS 1.3
        with one of its three suites; the client's preference."""
        accepted = tls12_suites_accepted(port, self.ca)
        mine = {s for s in MOZILLA_TLS12 if "-%s-" % kind in s}
        self.assertEqual(accepted - mine, set(),
                         "%s: TLS 1.2 suites beyond the profile" % kind)
        for name in mine:
            if name.startswith("ECDHE-"):
                self.assertIn(name, accepted)
        for name in refused:
            err = tls12_handshake(port, self.ca, name)
            self.assertIsInstance(err, ssl.SSLError, name)
            # The node's alert, not this client's own refusal.
            self.assertIn("alert handshake failure", str(err), name)
        # The client chooses (all are strong): its first choice wins in
        # either order.
        gcm = "ECDHE-%s-AES128-GCM-SHA256" % kind
        chacha = "ECDHE-%s-CHACHA20-POLY1305" % kind
        self.assertEqual(tls12_handshake(port, self.ca, chacha + ":" + gcm),
                         chacha)
        self.assertEqual(tls12_handshake(port, self.ca, gcm + ":" + chacha),
                         gcm)
        tls13 = client_context(self.ca)
        tls13.minimum_version = ssl.TLSVersion.TLSv1_3
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with tls13.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertEqual(s.version(), "TLSv1.3")
                self.assertIn(s.cipher()[0], MOZILLA_TLS13)
        # The profile's key-exchange groups only (Python's ssl cannot
        # choose them: the openssl CLI can).
        for group, served in (("X25519", True), ("prime256v1", True),
                              ("secp384r1", True), ("secp521r1", False),
                              ("ffdhe2048", False)):
            out = subprocess.run(
                ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port,
                 "-groups", group, "-CAfile", self.ca],
                stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
            self.assertEqual(out.returncode == 0, served, group)

    def test_only_aead_suites_are_offered_with_an_ecdsa_certificate(self):
        # testssl.sh against this listener once found CBC suites (LUCKY13
        # "potentially vulnerable"), SHA-1 MACs among them.
        self.check_offer(self.node.port, "ECDSA",
                         ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES128-SHA256",
                          "ECDHE-ECDSA-AES256-SHA384"])

    def test_only_aead_suites_are_offered_with_an_rsa_certificate(self):
        d = os.path.join(self.tmp.path, "rsa")
        os.makedirs(d)
        sign(self.tmp.path, "rsa/server", "ca", "/CN=localhost", SERVER_EXT,
             2, key=RSA_KEY)
        node = Node(os.path.join(d, "node"),
                    "--http.tls-certificate=" + os.path.join(d, "server.pem"),
                    "--http.tls-key=" + os.path.join(d, "server.key")).start()
        try:
            # RSA key exchange (no forward secrecy), CBC with SHA-256 and
            # with SHA-1.
            self.check_offer(node.port, "RSA",
                             ["AES128-SHA256", "AES128-GCM-SHA256",
                              "ECDHE-RSA-AES128-SHA",
                              "ECDHE-RSA-AES256-SHA384"])
        finally:
            self.assertEqual(node.stop(), 0)

    def test_plain_http_on_the_tls_port_gets_a_plain_400(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.node.port,
                                          timeout=10)
        try:
            conn.request("GET", "/healthz")
            res = conn.getresponse()
            body = res.read()
            self.assertEqual(res.status, 400)
            self.assertIn(b"speaks HTTPS", body)
            self.assertEqual(res.getheader("Connection"), "close")
        finally:
            conn.close()
        # Garbage that is neither: closed, and the node serves on.
        with socket.create_connection(("127.0.0.1", self.node.port),
                                      timeout=10) as raw:
            raw.sendall(b"\x16\x03\x01\x00\x05hello")
            raw.settimeout(10)
            try:
                while raw.recv(4096):
                    pass
            except ConnectionError:
                pass
        conn = self.connect()
        try:
            conn.request("GET", "/healthz")
            self.assertEqual(conn.getresponse().status, 200)
        finally:
            conn.close()

    def test_a_silent_handshake_is_closed_and_counts_as_a_connection(self):
        d = os.path.join(self.tmp.path, "capped")
        node = Node(d, "--http.tls-certificate=" + self.cert,
                    "--http.tls-key=" + self.key,
                    "--http.tls-handshake-timeout=1s",
                    "--http.max-connections=2").start()
        silent = []
        try:
            for _ in range(2):
                silent.append(socket.create_connection(
                    ("127.0.0.1", node.port), timeout=10))
            # The third connection is over the cap: 503 after its handshake.
            def over_cap():
                conn = self.connect(node)
                try:
                    conn.request("GET", "/healthz")
                    return conn.getresponse().status
                finally:
                    conn.close()
            self.assertEqual(over_cap(), 503)
            # The silent ones are closed at the handshake timeout (1 s, the
            # sweep's 100 ms late at most).
            started = time.monotonic()
            for s in silent:
                s.settimeout(5)
                self.assertEqual(s.recv(1), b"")
            self.assertLess(time.monotonic() - started, 4)
            self.assertTrue(wait_for(lambda: over_cap() == 200, 5))
        finally:
            for s in silent:
                s.close()
            self.assertEqual(node.stop(), 0)

    def test_sighup_reloads_the_certificate_under_traffic(self):
        refused = self.log_count("http.tls_reload_failed")
        before = self.current_serial()
        after = next(s for s in self.pairs if s != before)
        # A kept-alive connection opened before the reload.
        kept = self.connect()
        self.assertEqual(self.serial(kept), before)
        self.assertEqual(self.call(kept, self.index())[0], 200)

        failures, serials = [], []
        done = threading.Event()
        sent = [0]
        reloaded = threading.Event()

        def traffic():
            conn = None
            extra = 0
            try:
                for n in range(600):
                    # Every fourth request on a new connection, the others
                    # kept alive on the current one.
                    if conn is None or n % 4 == 0:
                        if conn is not None:
                            conn.close()
                        conn = self.connect()
                        serials.append(self.serial(conn))
                    status, body = self.call(conn, self.index())
                    if status != 200:
                        failures.append((n, status, body[:200]))
                    sent[0] += 1
                    if reloaded.is_set():
                        extra += 1
                        if extra >= 80:
                            break
            except Exception as e:  # noqa: BLE001 - every failure counts
                failures.append((sent[0], "exception", repr(e)))
            finally:
                if conn is not None:
                    conn.close()
                done.set()

        thread = threading.Thread(target=traffic, daemon=True)
        thread.start()
        try:
            self.assertTrue(wait_for(lambda: sent[0] >= 40 or done.is_set(),
                                     10))
            install(self.pairs[after][0], self.cert)
            install(self.pairs[after][1], self.key)
            self.node.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_for(lambda: after in serials
                                     or done.is_set(), 10),
                            "no new connection saw the new certificate")
            reloaded.set()
            self.assertTrue(done.wait(20))
        finally:
            reloaded.set()
            thread.join(20)
        self.assertEqual(failures, [])
        self.assertIn(before, serials)
        self.assertIn(after, serials)
        # Once a new connection saw the new certificate, every later one
        # did.
        first = serials.index(after)
        self.assertEqual(set(serials[first:]), {after})
        # The connection from before the reload still works, with its
        # certificate.
        try:
            self.assertEqual(self.call(kept, self.index())[0], 200)
            self.assertEqual(self.serial(kept), before)
        finally:
            kept.close()
        self.assertEqual(self.current_serial(), after)
        self.assertEqual(self.log_count("http.tls_reload_failed"), refused)

    def test_a_bad_replacement_is_refused_and_the_old_certificate_stays(self):
        current = self.current_serial()
        pem, key, _ = self.pairs[current]
        try:
            failed = self.log_count("http.tls_reload_failed")
            cases = (
                ("garbage certificate", lambda: self.write(
                    self.cert, b"-----BEGIN CERTIFICATE-----\nnot base64 "
                    b"at all\n-----END CERTIFICATE-----\n")),
                ("a key of another certificate",
                 lambda: (install(pem, self.cert),
                          install(self.stranger_key, self.key))),
                ("an empty key", lambda: (install(pem, self.cert),
                                          self.write(self.key, b""))),
            )
            for what, replace in cases:
                replace()
                self.node.proc.send_signal(signal.SIGHUP)
                self.assertTrue(wait_for(
                    lambda: self.log_count("http.tls_reload_failed")
                    > failed, 10), what)
                failed += 1
                self.assertEqual(self.current_serial(), current, what)
                conn = self.connect()
                try:
                    self.assertEqual(self.call(conn, self.index())[0], 200)
                finally:
                    conn.close()
            self.assertIsNone(self.node.proc.poll())
        finally:
            install(pem, self.cert)
            install(key, self.key)

    def test_files_that_do_not_load_stop_the_start_with_code_2(self):
        d = self.tmp.path
        garbage = os.path.join(d, "garbage.pem")
        self.write(garbage, b"hello\n")
        big = os.path.join(d, "big.pem")
        self.write(big, b"#" * (1024 * 1024 + 1))
        missing = os.path.join(d, "nosuch.pem")
        a_pem, a_key, _ = self.a
        cases = (
            ([a_pem, missing], "http.tls-key: cannot read " + missing),
            ([missing, a_key], "http.tls-certificate: cannot read " + missing),
            ([garbage, a_key], "http.tls-certificate: no PEM certificate in "
             + garbage),
            ([a_pem, garbage], "http.tls-key: no PEM private key in "
             + garbage),
            ([a_pem, self.stranger_key],
             "http.tls-key: %s is not the key of %s"
             % (self.stranger_key, a_pem)),
            ([big, a_key], "is larger than 1048576 bytes"),
            ([a_pem, None], "http.tls-certificate and http.tls-key go "
             "together"),
        )
        for (cert, key), message in cases:
            for mode in ("start", "check"):
                args = [BIN, "--http-port=0",
                        "--data-dir=" + os.path.join(d, "refused"),
                        "--http.tls-certificate=" + cert]
                if key is not None:
                    args.append("--http.tls-key=" + key)
                if mode == "check":
                    args.append("--dump-config")
                out = subprocess.run(args, capture_output=True, timeout=30)
                text = (out.stdout + out.stderr).decode()
                self.assertEqual(out.returncode, 2, (mode, cert, key, text))
                self.assertIn(message, text, (mode, cert, key))
                self.assertNotIn("oncegate ready", text)
        # Good files check: the certificate is named, its key never shown.
        out = subprocess.run([BIN, "--check-config", os.devnull,
                              "--http.tls-certificate=" + a_pem,
                              "--http.tls-key=" + a_key],
                             capture_output=True, timeout=30)
        text = out.stdout.decode()
        self.assertEqual(out.returncode, 0, text + out.stderr.decode())
        self.assertIn("# https: certificate serial", text)
        with open(a_key) as f:
            key_body = f.read().splitlines()[1]
        self.assertNotIn(key_body, text + out.stderr.decode())

    # helpers

    def current_serial(self):
        conn = self.connect()
        try:
            return self.serial(conn)
        finally:
            conn.close()

    @staticmethod
    def write(path, data):
        tmp = path + ".new"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)


if __name__ == "__main__":
    unittest.main()
