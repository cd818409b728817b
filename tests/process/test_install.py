"""`cmake --install` into a temporary prefix: what an operator gets (docs/
operations.md, "Install as a service")."""

import configparser
import os
import shutil
import subprocess
import unittest

from harness import TempDir

BUILD = os.environ.get("ONCEGATE_BUILD_DIR", "build")


class InstallTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()
        self.addCleanup(self.tmp.cleanup)
        self.prefix = os.path.join(self.tmp.path, "prefix")
        res = subprocess.run(["cmake", "--install", BUILD, "--prefix",
                              self.prefix], capture_output=True, timeout=120)
        self.assertEqual(res.returncode, 0, res.stderr.decode())

    def path(self, *parts):
        return os.path.join(self.prefix, *parts)

    def test_files_are_in_place(self):
        for rel in ("bin/oncegate", "bin/oncegate-drill",
                    "bin/test_upstream.py", "bin/oncegate-cluster-certs",
                    "etc/oncegate/oncegate.ini",
                    "lib/systemd/system/oncegate.service",
                    "share/oncegate/cluster-config/single-node.ini",
                    "share/oncegate/cluster-config/three-node/node1.ini",
                    "share/doc/oncegate/README.md",
                    "share/doc/oncegate/operations.md",
                    "share/doc/oncegate/cluster.md"):
            self.assertTrue(os.path.exists(self.path(rel)), rel)
        for rel in ("bin/oncegate", "bin/oncegate-drill",
                    "bin/oncegate-cluster-certs"):
            self.assertTrue(os.access(self.path(rel), os.X_OK), rel)

    def test_the_installed_cert_helper_makes_a_cluster_ca(self):
        out = os.path.join(self.tmp.path, "tls")
        res = subprocess.run([self.path("bin", "oncegate-cluster-certs"), out,
                              "1", "2"], capture_output=True, timeout=60,
                             cwd=self.tmp.path)
        self.assertEqual(res.returncode, 0, res.stderr.decode())
        for name in ("ca.pem", "ca.key", "node-1.pem", "node-1.key",
                     "node-2.pem", "node-2.key"):
            self.assertTrue(os.path.exists(os.path.join(out, name)), name)
        self.assertEqual(os.stat(os.path.join(out, "node-1.key")).st_mode
                         & 0o077, 0, "a node key readable by others")
        res = subprocess.run(["openssl", "verify", "-CAfile",
                              os.path.join(out, "ca.pem"),
                              os.path.join(out, "node-2.pem")],
                             capture_output=True, timeout=30)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)

    def test_the_installed_drill_runs_from_its_installed_package(self):
        # Run from elsewhere, with the source tree's package out of reach:
        # the entry point must find share/oncegate/python/oncegate_drill.
        res = subprocess.run([self.path("bin", "oncegate-drill"), "--list"],
                             capture_output=True, timeout=30,
                             cwd=self.tmp.path)
        self.assertEqual(res.returncode, 0, res.stderr.decode())
        self.assertIn(b"kill-leader", res.stdout)

    def test_installed_binary_accepts_the_installed_config(self):
        res = subprocess.run([self.path("bin", "oncegate"), "--check-config",
                              self.path("etc", "oncegate", "oncegate.ini")],
                             capture_output=True, timeout=30)
        self.assertEqual(res.returncode, 0, res.stderr.decode())
        self.assertIn(b"configuration OK", res.stdout)
        res = subprocess.run([self.path("bin", "oncegate"), "--version"],
                             capture_output=True, timeout=30)
        self.assertEqual(res.returncode, 0)
        self.assertTrue(res.stdout.startswith(b"oncegate "))

    def test_the_unit_is_hardened_and_points_at_the_install(self):
        unit = configparser.ConfigParser(strict=False,
                                         interpolation=None)
        unit.optionxform = str
        unit.read(self.path("lib", "systemd", "system", "oncegate.service"))
        svc = unit["Service"]
        self.assertIn("/bin/oncegate --config-file=", svc["ExecStart"])
        self.assertIn("/etc/oncegate/oncegate.ini", svc["ExecStart"])
        self.assertEqual(svc["DynamicUser"], "yes")
        self.assertEqual(svc["ProtectSystem"], "strict")
        self.assertEqual(svc["ReadWritePaths"], "/var/lib/oncegate")
        self.assertEqual(svc["StateDirectory"], "oncegate")
        self.assertEqual(svc["Restart"], "on-failure")
        self.assertEqual(svc["KillSignal"], "SIGTERM")
        self.assertEqual(unit["Install"]["WantedBy"], "multi-user.target")
        if shutil.which("systemd-analyze"):
            res = subprocess.run(
                ["systemd-analyze", "verify", "--man=no",
                 self.path("lib", "systemd", "system", "oncegate.service")],
                capture_output=True, timeout=60)
            # The binary path is the configured prefix's, which may not
            # exist here; everything else must verify.
            errors = [l for l in res.stderr.decode().splitlines()
                      if "Command" not in l and "not executable" not in l
                      and l.strip()]
            self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
