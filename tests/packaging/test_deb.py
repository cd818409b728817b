"""The Debian package (cmake/Packaging.cmake, docs/packaging.md), built
from this build directory with cpack: its files, control fields and
maintainer scripts (run against a fake root with stand-in commands), then
the extracted binary checks the packaged configuration and serves a node.
Needs no root: nothing is installed on this system (`dpkg -x` only)."""

import os
import re
import shutil
import stat
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "process"))

from harness import Node, TempDir  # noqa: E402

BUILD = os.environ.get("ONCEGATE_BUILD_DIR", os.path.join(ROOT, "build"))
VERSION = os.environ.get("ONCEGATE_VERSION")
SCRIPTS = ("postinst", "prerm", "postrm")

# Every command the maintainer scripts may run besides the shell's own
# builtins: a stand-in for each records its arguments, and the real one
# must come from an essential package or a dependency.
STANDINS = {
    "getent": "libc-bin",
    "addgroup": "adduser",
    "adduser": "adduser",
    "chown": "coreutils",
    "deb-systemd-helper": "init-system-helpers",
    "deb-systemd-invoke": "init-system-helpers",
    "systemctl": "systemd",
}
# Run as they are (into the fake root only: every path is under DPKG_ROOT).
REAL = {"mkdir": "coreutils", "chmod": "coreutils", "rm": "coreutils",
        "rmdir": "coreutils"}

HARDENING = {
    "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "NoNewPrivileges": "yes",
    "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
    "ProtectClock": "yes", "ProtectHostname": "yes",
    "RestrictNamespaces": "yes", "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes", "RemoveIPC": "yes",
    "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native", "UMask": "0077",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "StateDirectory": "oncegate", "ReadWritePaths": "/var/lib/oncegate",
}


def run(args, **kw):
    kw.setdefault("timeout", 120)
    res = subprocess.run(args, capture_output=True, **kw)
    if res.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (
            " ".join(args), res.returncode, res.stdout.decode(errors="replace"),
            res.stderr.decode(errors="replace")))
    return res.stdout.decode()


def unit_settings(path):
    """{section: {key: [values]}} of a systemd unit file."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                section = out.setdefault(line.strip("[]"), {})
                continue
            key, _, value = line.partition("=")
            section.setdefault(key, []).append(value)
    return out


class DebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not VERSION:
            raise unittest.SkipTest("run through CTest (ONCEGATE_VERSION)")
        cls.tmp = TempDir()
        out = os.path.join(cls.tmp.path, "out")
        run(["cpack", "-G", "DEB", "--config",
             os.path.join(BUILD, "CPackConfig.cmake"), "-B", out],
            timeout=150)
        cls.deb = os.path.join(out, "oncegate_%s_amd64.deb" % VERSION)
        if not os.path.isfile(cls.deb):
            raise AssertionError("no %s among %s" % (cls.deb,
                                                     os.listdir(out)))
        cls.listing = run(["dpkg-deb", "-c", cls.deb])
        cls.control = os.path.join(cls.tmp.path, "control")
        run(["dpkg-deb", "-e", cls.deb, cls.control])
        cls.root = os.path.join(cls.tmp.path, "root")
        run(["dpkg-deb", "-x", cls.deb, cls.root])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def entries(self):
        """{path: (mode string, owner)} of the package's files."""
        out = {}
        for line in self.listing.splitlines():
            fields = line.split(None, 5)
            path = fields[5].split(" -> ")[0]
            out[path[1:] if path.startswith(".") else path] = (fields[0],
                                                              fields[1])
        return out

    def field(self, name):
        return run(["dpkg-deb", "-f", self.deb, name]).strip()

    # -- what is in it --------------------------------------------------
    def test_the_files_are_where_debian_wants_them(self):
        e = self.entries()
        for path in ("/usr/bin/oncegate", "/usr/bin/oncegate-drill",
                     "/usr/bin/oncegate-cluster-certs",
                     "/usr/bin/test_upstream.py"):
            self.assertIn(path, e)
            self.assertEqual(e[path][0], "-rwxr-xr-x", path)
        for path in ("/etc/oncegate/", "/etc/oncegate/oncegate.ini",
                     "/lib/systemd/system/oncegate.service",
                     "/usr/share/oncegate/python/oncegate_drill/__main__.py",
                     "/usr/share/oncegate/cluster-config/single-node.ini",
                     "/usr/share/oncegate/cluster-config/drills/"
                     "kill-leader.ini",
                     "/usr/share/oncegate/prometheus/oncegate.rules.yml",
                     "/usr/share/oncegate/grafana/oncegate-dashboard.json",
                     "/usr/share/doc/oncegate/copyright",
                     "/usr/share/doc/oncegate/changelog.gz",
                     "/usr/share/doc/oncegate/operations.md",
                     "/usr/share/doc/oncegate/packaging.md",
                     "/usr/share/man/man1/oncegate.1.gz",
                     "/usr/share/man/man1/oncegate-drill.1.gz",
                     "/usr/share/man/man1/oncegate-cluster-certs.1.gz",
                     "/usr/share/lintian/overrides/oncegate"):
            self.assertIn(path, e)
        for path, (mode, owner) in e.items():
            self.assertEqual(owner, "root/root", path)
            self.assertNotIn("__pycache__", path)
            self.assertFalse(path.endswith(".pyc"), path)
            for wrong in ("/usr/local/", "/usr/etc/", "/usr/lib/systemd/",
                          "/var/"):
                self.assertFalse(path.startswith(wrong), path)
            if mode.startswith("-") and not path.startswith("/usr/bin/"):
                self.assertEqual(mode, "-rw-r--r--", path)
        # The data directory is made by postinst, owned by the user.
        self.assertNotIn("/var/lib/oncegate/", e)

    def test_the_binary_is_stripped(self):
        out = run(["file", "-b", os.path.join(self.root, "usr", "bin",
                                              "oncegate")]) \
            if shutil.which("file") else None
        if out is not None:
            self.assertIn("stripped", out)
            self.assertNotIn("not stripped", out)
        sections = run(["readelf", "-S", os.path.join(self.root, "usr",
                                                      "bin", "oncegate")])
        self.assertNotIn(".debug_info", sections)

    def test_the_configuration_is_a_conffile(self):
        with open(os.path.join(self.control, "conffiles")) as f:
            self.assertEqual(f.read().split(), ["/etc/oncegate/oncegate.ini"])
        with open(os.path.join(self.control, "md5sums")) as f:
            sums = f.read()
        self.assertIn(" usr/bin/oncegate\n", sums)

    def test_the_control_fields(self):
        self.assertEqual(self.field("Package"), "oncegate")
        self.assertEqual(self.field("Version"), VERSION)
        self.assertEqual(self.field("Architecture"), "amd64")
        self.assertEqual(self.field("Section"), "net")
        self.assertEqual(self.field("Priority"), "optional")
        self.assertRegex(self.field("Maintainer"), r"^[^<]+ <[^@>]+@[^>]+>$")
        desc = self.field("Description").splitlines()
        self.assertLess(len(desc[0]), 80)
        self.assertGreater(len(desc), 3)
        depends = [d.strip() for d in self.field("Depends").split(",")]
        names = [re.split(r"[ (]", d)[0] for d in depends]
        for want in ("adduser", "python3", "openssl", "libc6", "libstdc++6",
                     "libsqlite3-0", "libssl3", "libuv1",
                     "libboost-json1.81.0"):
            self.assertIn(want, names, depends)
        for prefix in ("libcaf-core", "libspdlog", "libraft"):
            self.assertTrue(any(n.startswith(prefix) for n in names),
                            (prefix, depends))
        # The nodes talk over the node link: CAF's networking is no longer
        # linked (issue #29).
        for prefix in ("libcaf-io", "libcaf-openssl"):
            self.assertFalse(any(n.startswith(prefix) for n in names),
                             (prefix, depends))
        # Each dependency is a package, or a virtual one, that this system
        # has (the build linked against it): one Debian 12 has.
        known = set()
        listing = subprocess.run(
            ["dpkg-query", "-W", "-f=${Package} ${Provides}\n"],
            capture_output=True, timeout=60).stdout.decode()
        for line in listing.splitlines():
            known.update(re.split(r"[ ,]+", re.sub(r"\([^)]*\)", "", line)))
        for name in names:
            self.assertIn(name, known, depends)

    def test_the_changelog_names_this_version(self):
        out = subprocess.run(
            ["zcat", os.path.join(self.root, "usr", "share", "doc",
                                  "oncegate", "changelog.gz")],
            capture_output=True, timeout=30).stdout.decode()
        self.assertTrue(out.startswith("oncegate (%s) " % VERSION),
                        "packaging/debian/changelog: add an entry for %s"
                        % VERSION)

    # -- the unit -------------------------------------------------------
    def unit(self):
        return os.path.join(self.root, "lib", "systemd", "system",
                            "oncegate.service")

    def test_the_unit_runs_as_the_package_user_hardened(self):
        u = unit_settings(self.unit())
        svc = {k: v[-1] for k, v in u["Service"].items()}
        self.assertEqual(svc["ExecStart"].split()[:2],
                         ["/usr/bin/oncegate",
                          "--config-file=/etc/oncegate/oncegate.ini"])
        self.assertEqual(svc["User"], "oncegate")
        self.assertEqual(svc["Group"], "oncegate")
        self.assertNotIn("DynamicUser", svc)
        # Port 443 as that user, and no other capability at all.
        self.assertEqual(u["Service"]["AmbientCapabilities"],
                         ["CAP_NET_BIND_SERVICE"])
        self.assertEqual(u["Service"]["CapabilityBoundingSet"],
                         ["CAP_NET_BIND_SERVICE"])
        for key, value in HARDENING.items():
            self.assertEqual(svc.get(key), value, key)
        self.assertEqual(svc["EnvironmentFile"], "-/etc/oncegate/oncegate.env")
        self.assertEqual(svc["Restart"], "on-failure")
        self.assertEqual(u["Install"]["WantedBy"], ["multi-user.target"])

    def analyzable_unit(self):
        """The unit with ExecStart pointing at the extracted binary, so
        that systemd-analyze resolves it without the package installed."""
        path = os.path.join(self.tmp.path, "analyze", "oncegate.service")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(self.unit()) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("ExecStart=/usr/bin/oncegate ",
                                 "ExecStart=%s " % self.bin("oncegate")))
        return path

    def test_systemd_analyze_verifies_the_unit(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze not installed: unit not verified")
        res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                              self.analyzable_unit()],
                             capture_output=True, timeout=60)
        text = (res.stdout + res.stderr).decode()
        self.assertEqual([l for l in text.splitlines() if l.strip()], [],
                         text)
        self.assertEqual(res.returncode, 0, text)

    def test_the_units_exposure_stays_low(self):
        # systemd's own score of the hardening: 3.4 ("OK") when written;
        # a setting lost on the way raises it past the threshold.
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze not installed: unit not scored")
        res = subprocess.run(["systemd-analyze", "security", "--offline=yes",
                              "--man=no", "--threshold=35",
                              self.analyzable_unit()],
                             capture_output=True, timeout=60)
        text = (res.stdout + res.stderr).decode()
        self.assertEqual(res.returncode, 0, text[-3000:])

    # -- the maintainer scripts -----------------------------------------
    def test_the_scripts_are_posix_sh_and_executable(self):
        for name in SCRIPTS:
            path = os.path.join(self.control, name)
            self.assertTrue(os.stat(path).st_mode & stat.S_IXUSR, name)
            with open(path) as f:
                self.assertEqual(f.readline(), "#!/bin/sh\n", name)
            run(["sh", "-n", path])
            if shutil.which("dash"):
                run(["dash", "-n", path])

    def test_systemd_is_only_asked_where_it_runs(self):
        # Every systemctl / deb-systemd-invoke line sits inside an `if`
        # that checks for a running systemd outside a DPKG_ROOT install.
        for name in SCRIPTS:
            with open(os.path.join(self.control, name)) as f:
                lines = f.read().splitlines()
            for i, line in enumerate(lines):
                code = line.split("#")[0]
                if not re.search(r"\b(systemctl|deb-systemd-invoke)\b",
                                 code) or "command -v" in code:
                    continue
                depth = len(line) - len(line.lstrip("\t"))
                guards = []
                for above in reversed(lines[:i]):
                    d = len(above) - len(above.lstrip("\t"))
                    if d < depth and above.lstrip().startswith("if "):
                        guards.append(above)
                        depth = d
                text = " ".join(guards)
                self.assertIn("/run/systemd/system", text,
                              "%s:%d unguarded: %s" % (name, i + 1, line))
                self.assertIn("DPKG_ROOT", text, "%s:%d" % (name, i + 1))

    def test_the_commands_the_scripts_call_come_from_dependencies(self):
        depends = self.field("Depends")
        for name in SCRIPTS:
            with open(os.path.join(self.control, name)) as f:
                code = "\n".join(l.rstrip("\n").split("#")[0] for l in f)
            for cmd, package in list(STANDINS.items()) + list(REAL.items()):
                if not re.search(r"(^|[\s;|&(])%s\b" % re.escape(cmd), code):
                    continue
                if package in ("adduser",):
                    self.assertIn(package, depends, cmd)
                elif package == "systemd":
                    self.assertRegex(code, r"command -v %s|-d /run/systemd"
                                     % re.escape(cmd), cmd)
                else:
                    essential = subprocess.run(
                        ["dpkg-query", "-W", "-f=${Essential}", package],
                        capture_output=True, timeout=30).stdout.decode()
                    self.assertEqual(essential, "yes", (cmd, package))

    def standins(self, calls, user_exists, was_enabled):
        bindir = os.path.join(self.tmp.path, "standins")
        shutil.rmtree(bindir, ignore_errors=True)
        os.makedirs(bindir)
        codes = {"getent": 0 if user_exists else 2,
                 "deb-systemd-helper": 0 if was_enabled else 1}
        for cmd in STANDINS:
            with open(os.path.join(bindir, cmd), "w") as f:
                f.write('#!/bin/sh\necho "%s $*" >> "%s"\n' % (cmd, calls))
                if cmd == "deb-systemd-helper":
                    f.write('case "$*" in *was-enabled*) exit %d ;; esac\n'
                            % codes[cmd])
                else:
                    f.write("exit %d\n" % codes.get(cmd, 0))
            os.chmod(os.path.join(bindir, cmd), 0o755)
        return bindir

    def script(self, name, *args, user_exists=False, was_enabled=True):
        """Runs a maintainer script with DPKG_ROOT=fake root and stand-ins
        first on PATH; returns the commands it ran."""
        calls = os.path.join(self.tmp.path, "calls")
        if os.path.exists(calls):
            os.remove(calls)
        bindir = self.standins(calls, user_exists, was_enabled)
        env = dict(os.environ, DPKG_ROOT=self.fake,
                   PATH=bindir + ":/usr/sbin:/usr/bin:/sbin:/bin")
        run(["sh", "-e", os.path.join(self.control, name)] + list(args),
            env=env, timeout=30)
        if not os.path.exists(calls):
            return []
        with open(calls) as f:
            return f.read().splitlines()

    def test_the_scripts_install_upgrade_remove_and_purge(self):
        self.fake = os.path.join(self.tmp.path, "fakeroot")
        os.makedirs(os.path.join(self.fake, "etc", "oncegate"))
        data = os.path.join(self.fake, "var", "lib", "oncegate")

        # First install: group, user, data directory, unit enabled; no
        # systemctl (DPKG_ROOT: not this system's systemd).
        calls = self.script("postinst", "configure", "")
        self.assertIn("addgroup --system --quiet oncegate", calls)
        adduser = [c for c in calls if c.startswith("adduser ")]
        self.assertEqual(len(adduser), 1, calls)
        for arg in ("--system", "--ingroup oncegate",
                    "--home /var/lib/oncegate", "--no-create-home",
                    "--shell /usr/sbin/nologin"):
            self.assertIn(arg, adduser[0])
        self.assertTrue(adduser[0].endswith(" oncegate"), adduser[0])
        self.assertIn("chown oncegate:oncegate " + data, calls)
        self.assertTrue(os.path.isdir(data))
        self.assertEqual(stat.S_IMODE(os.stat(data).st_mode), 0o700)
        self.assertIn("deb-systemd-helper enable oncegate.service", calls)
        self.assertFalse([c for c in calls if c.startswith(("systemctl",
                                                            "deb-systemd-"
                                                            "invoke"))])

        # Upgrade: the user exists, the data stays as it is, a disabled
        # unit stays disabled.
        with open(os.path.join(data, "oncegate.db"), "w") as f:
            f.write("records")
        calls = self.script("postinst", "configure", "0.0.9",
                            user_exists=True, was_enabled=False)
        self.assertFalse([c for c in calls if c.startswith(("adduser",
                                                            "addgroup",
                                                            "chown"))], calls)
        self.assertIn("deb-systemd-helper update-state oncegate.service",
                      calls)
        self.assertNotIn("deb-systemd-helper enable oncegate.service", calls)
        self.assertTrue(os.path.exists(os.path.join(data, "oncegate.db")))

        # An upgrade's prerm stops nothing; neither does one for a fake root.
        self.assertEqual(self.script("prerm", "upgrade", "0.2.0"), [])
        self.assertEqual(self.script("prerm", "remove"), [])

        # Remove: the database and the user stay.
        calls = self.script("postrm", "remove")
        self.assertIn("deb-systemd-helper mask oncegate.service", calls)
        self.assertTrue(os.path.exists(os.path.join(data, "oncegate.db")))

        # Purge: the data and the secrets file go, the user stays.
        with open(os.path.join(self.fake, "etc", "oncegate", "oncegate.env"),
                  "w") as f:
            f.write("ONCEGATE_ADMIN_TOKEN=x\n")
        calls = self.script("postrm", "purge")
        self.assertIn("deb-systemd-helper purge oncegate.service", calls)
        self.assertFalse(os.path.exists(data))
        self.assertFalse(os.path.exists(os.path.join(self.fake, "etc",
                                                     "oncegate")))
        self.assertFalse([c for c in calls if "deluser" in c], calls)

    # -- the extracted programs -----------------------------------------
    def bin(self, name):
        return os.path.join(self.root, "usr", "bin", name)

    def test_the_extracted_binary_accepts_the_packaged_config(self):
        out = run([self.bin("oncegate"), "--version"], timeout=30)
        self.assertTrue(out.startswith("oncegate %s" % VERSION), out)
        ini = os.path.join(self.root, "etc", "oncegate", "oncegate.ini")
        out = run([self.bin("oncegate"), "--check-config", ini], timeout=30)
        self.assertIn("configuration OK", out)

    def test_the_extracted_binary_serves_a_node(self):
        ini = os.path.join(self.root, "etc", "oncegate", "oncegate.ini")
        node = Node(os.path.join(self.tmp.path, "data"),
                    "--config-file=" + ini, bin=self.bin("oncegate"))
        node.start()
        try:
            status, _, body = node.request("GET", "/readyz")
            self.assertEqual(status, 200, body)
            status, _, body = node.webhook({"symbol": "BTCUSDT"}, key="deb-1")
            self.assertEqual(status, 200, body)
            self.assertEqual(node.webhook({"symbol": "BTCUSDT"},
                                          key="deb-1")[0], 409)
        finally:
            self.assertEqual(node.stop(), 0)

    def test_the_extracted_drill_finds_its_package_and_scenarios(self):
        out = run([self.bin("oncegate-drill"), "--list"], timeout=60,
                  cwd=self.tmp.path)
        self.assertIn("kill-leader", out)

    def test_lintian_finds_no_error_or_warning(self):
        if not shutil.which("lintian"):
            self.skipTest("lintian not installed (scripts/setup.sh --test)")
        res = subprocess.run(["lintian", "--fail-on", "error,warning",
                              "--no-tag-display-limit", self.deb],
                             capture_output=True, timeout=150)
        text = (res.stdout + res.stderr).decode()
        self.assertEqual(res.returncode, 0, text)
        self.assertNotRegex(text, r"(?m)^[EW]: ", text)


if __name__ == "__main__":
    unittest.main()
