"""The cluster CA is replaced without downtime (docs/cluster.md, "Rotation
without downtime"): three rolling restarts under traffic.

1. every node's CA file becomes the old and the new CA (trust both);
2. every node gets its certificate from the new CA;
3. every node's CA file becomes the new CA alone.

Each node is stopped and started in turn, and the traffic must go on after
each restart (decisions within 10 s, every key executed once at the end).
At the end, each node's cluster port (its node link, the one port the
nodes talk on) answers with a certificate of the new CA, and a
certificate of the old CA is refused there."""

import os
import shutil
import socket
import ssl
import sys
import time
import unittest

from harness import wait_for
from test_cluster import OwnClusterCase, Traffic, with_logs
from test_peer_security import ports_of, tls_context
from oncegate_drill.cluster import make_certs  # noqa: E402 (test_cluster's path)


class CertificatesTest(OwnClusterCase):

    def decided_from_now(self, traffic, what):
        since = time.monotonic()
        self.assertTrue(wait_for(
            lambda: traffic.count_decided_since(since) >= 20, 10),
            "no decisions %s: %s" % (what, traffic.summary()))

    def rolling_restart(self, traffic, ids, what):
        for i in ids:
            node = self.cluster.node(i)
            self.assertEqual(node.stop(), 0, "node %d" % i)
            node.start()
            self.cluster.wait_leader()
            self.decided_from_now(traffic, "after restarting node %d (%s)"
                                  % (i, what))

    def handshake(self, port, cert_dir, node_id, trust):
        """A TLS client with `cert_dir`'s certificate of `node_id` that
        checks the server against the CA file `trust`: None if the
        handshake completes, else the error."""
        ctx = tls_context(os.path.join(cert_dir, "node-%d.pem" % node_id),
                          os.path.join(cert_dir, "node-%d.key" % node_id))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(trust)
        try:
            with socket.create_connection(("127.0.0.1", port),
                                          timeout=5) as raw:
                with ctx.wrap_socket(raw) as sock:
                    # TLS 1.3: the server checks the client's certificate
                    # after the client's Finished; a refusal arrives as an
                    # alert on the first read. An accepted one waits for
                    # our hello (the dialler speaks first): nothing comes.
                    sock.settimeout(1.0)
                    try:
                        sock.recv(1)
                    except socket.timeout:
                        pass
            return None
        except (ssl.SSLError, OSError) as e:
            return repr(e)

    @with_logs
    def test_the_cluster_ca_is_replaced_by_rolling_restarts(self):
        ids = [1, 2, 3]
        self.start_nodes(ids, ids)
        tls = self.cluster.tls_dir
        old = os.path.join(self.tmp.path, "old-ca")
        os.makedirs(old)
        for name in ["ca.pem"] + ["node-%d.%s" % (i, ext) for i in ids
                                  for ext in ("pem", "key")]:
            shutil.copy2(os.path.join(tls, name), os.path.join(old, name))
        new = make_certs(os.path.join(self.tmp.path, "new-ca"), ids)

        def read(path):
            with open(path, "rb") as f:
                return f.read()

        def install(name, data):
            # Replaced by rename, as an operator's tooling would.
            tmp = os.path.join(tls, name + ".new")
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o600 if name.endswith(".key") else 0o644)
            os.replace(tmp, os.path.join(tls, name))

        traffic = Traffic(self.cluster, "ca").start()
        try:
            self.decided_from_now(traffic, "at the start")
            install("ca.pem", read(os.path.join(old, "ca.pem"))
                    + read(os.path.join(new, "ca.pem")))
            self.rolling_restart(traffic, ids, "trusting both CAs")
            for i in ids:
                for ext in ("pem", "key"):
                    install("node-%d.%s" % (i, ext),
                            read(os.path.join(new, "node-%d.%s" % (i, ext))))
            self.rolling_restart(traffic, ids, "certificates of the new CA")
            install("ca.pem", read(os.path.join(new, "ca.pem")))
            self.rolling_restart(traffic, ids, "trusting the new CA only")
        finally:
            self.assertTrue(traffic.stop(), "senders did not stop")
        print("answers %s" % traffic.summary(), file=sys.stderr)
        self.cluster.wait_converged()
        self.assert_at_most_once(self.up, traffic, ids)
        new_ca = os.path.join(new, "ca.pem")
        for i in ids:
            port = ports_of(self.cluster, i)
            peer = 1 if i != 1 else 2
            self.assertIsNone(self.handshake(port, new, peer, new_ca),
                              "node %d does not serve the new CA's "
                              "certificate" % i)
            self.assertIsNotNone(
                self.handshake(port, old, peer, new_ca),
                "node %d still accepts the old CA on port %d" % (i, port))
        for i in ids:
            self.assertEqual(self.cluster.node(i).stop(), 0, "node %d" % i)


if __name__ == "__main__":
    unittest.main()
