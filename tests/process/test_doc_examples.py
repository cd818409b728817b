"""The shell examples of README.md and docs/*.md run against real nodes
(issue #19), so an example cannot drift from the code.

Every fenced ```sh / ```bash / ```console block that talks to a node (a
loopback address, /v1/, /readyz, /metrics, the `oncegate` binary, the
cluster and node scripts, the drill, the toy upstream) must carry a marker
on the line before its fence:

    <!-- doc-test: KIND [OPTION ...] -->
    <!-- doc-test: skip REASON -->

KIND is `single` (a fresh single node), `cluster` (a local 3-node cluster,
cluster-config/three-node) or `none` (no node: the binary's own output).
The convention, every option and what the test rewrites are in
docs/testing.md ("Examples in the docs"). A block runs with bash in a
sandbox that looks like the source tree (cwd), with the binary under test
as `build/tools/oncegate` and `oncegate`, the node's ports replaced by free
ones and /tmp/, /var/lib/oncegate and /backup/ moved into the sandbox. It
fails when a command fails (`set -e`, unless `allow-fail`), a command
commented `# ... exit N` exits otherwise, a status the comments name
(`# HTTP/1.1 200 OK`, `# 409`, `# ... 502 502`) was not answered in that
order, an answer the comments show (`# {"status":...}`) or the output
block right after the fence shows is not printed in that order, or a node
answered 400/401/403/405/413/415/422 that the comments do not name.

Groups of blocks (`same-node` continues the previous block) run in
parallel, each against nodes of its own.
"""

import concurrent.futures
import glob
import http.client
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import BIN, Node, free_port, wait_for

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC_FILES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

SHELL_LANGS = ("sh", "bash", "console", "shell")
KINDS = ("single", "cluster", "none", "skip")
# Options a group's first block sets for the whole group.
GROUP_OPTIONS = {"upstream", "token", "config-above"}
BLOCK_OPTIONS = {"same-node", "allow-fail", "own", "background"}
BLOCK_TIMEOUT = 60.0      # one block, from start to exit
READY_TIMEOUT = 20.0      # a server a block started
STOP_TIMEOUT = 15.0       # SIGTERM to SIGKILL
PARALLEL = 4

# What makes a block talk to a node (or start one): it then needs a marker.
NODE_TALK = [
    re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}"),
    re.compile(r"/v1/|/readyz|/healthz|/metrics"),
    re.compile(r"(^|[;&|(]|\bsudo(\s+-u\s+\S+)?|\$\()\s*(\S*/)?oncegate(_mutant)?(?=\s|$)",
               re.M),
    re.compile(r"scripts/(run-node|cluster)\.sh|oncegate-drill|test_upstream\.py"),
    re.compile(r"--http-port"),
]

# The ports of the docs' nodes, upstreams and clusters; each gets a free
# port of its own in every group.
DOC_PORTS = (set(range(8080, 8100)) | set(range(9000, 9010)) | {9090, 9443}
             | set(range(7101, 7120)) | set(range(7201, 7220)))
PORT_RE = re.compile(r"(?<![\w.])(\d{4})(?![\w])")
# Paths outside the source tree that examples use: moved into the sandbox.
PATH_RE = re.compile(r"(?<![\w./-])(/tmp/|/var/lib/oncegate|/backup/)")
# Statuses as comments name them: 3 digits on their own (`# 409`,
# `# HTTP/1.1 200 OK`, `# ... 502 502 502: in doubt`), not inside JSON.
STATUS_RE = re.compile(r"(?<![\w\":.\-/])([1-5]\d\d)(?=[\s,;:.)]|$)")
FORBIDDEN = {400, 401, 403, 405, 413, 415, 422}

# ---------------------------------------------------------------- parsing

class Marker:
    def __init__(self, text, where):
        words = text.split()
        self.text = text
        self.errors = []
        self.kind = words[0] if words else ""
        self.reason = ""
        self.options = set()
        self.leader = None
        if self.kind not in KINDS:
            self.errors.append("%s: unknown doc-test kind %r" % (where, self.kind))
            return
        if self.kind == "skip":
            self.reason = " ".join(words[1:])
            if not self.reason:
                self.errors.append("%s: a skip needs its reason" % where)
            return
        for w in words[1:]:
            if w.startswith("leader="):
                try:
                    self.leader = int(w[len("leader="):])
                except ValueError:
                    self.errors.append("%s: leader=N takes a node id" % where)
            elif w in GROUP_OPTIONS | BLOCK_OPTIONS:
                self.options.add(w)
            else:
                self.errors.append("%s: unknown doc-test option %r" % (where, w))


class Block:
    def __init__(self, path, line, lang, text, marker, output, ini_above):
        self.path = path
        self.line = line          # of the opening fence, 1-based
        self.lang = lang
        self.text = text
        self.marker = marker
        self.output = output      # the unlabelled block right after, or None
        self.ini_above = ini_above
        if lang == "console":
            self.script, shown = split_console(text)
            if shown.strip():
                self.output = shown if output is None else shown + "\n" + output
        else:
            self.script = text

    @property
    def name(self):
        return "%s:%d" % (self.path, self.line)

    def talks_to_node(self):
        return any(p.search(self.script) for p in NODE_TALK)

    def has(self, option):
        return self.marker is not None and option in self.marker.options


def split_console(text):
    """A console block: commands after `$ ` (and their continuation lines),
    the rest is their output."""
    commands, shown, cont = [], [], False
    for line in text.split("\n"):
        if cont or line.startswith("$ "):
            commands.append(line[2:] if not cont else line)
            cont = line.endswith("\\")
        else:
            shown.append(line)
    return "\n".join(commands), "\n".join(shown)


FENCE_RE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
MARKER_RE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")


def parse_doc(path):
    """Every fenced shell block of one file, and the structural errors."""
    with open(os.path.join(ROOT, path)) as f:
        return parse_markdown(path, f.read())


def parse_markdown(path, text):
    lines = text.split("\n")
    fences = []  # (start, end, lang, text, indent)
    i = 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip()
                for l in lines[i + 1:j]]
        fences.append((i, j, lang, "\n".join(body)))
        i = j + 1
    blocks, errors = [], []
    last_ini = None
    for n, (start, end, lang, text) in enumerate(fences):
        where = "%s:%d" % (path, start + 1)
        if lang == "ini":
            last_ini = text
            continue
        m = MARKER_RE.match(lines[start - 1]) if start > 0 else None
        if lang not in SHELL_LANGS:
            if m:
                errors.append("%s: a doc-test marker on a ```%s block" % (where, lang))
            if lang == "" and re.search(r"^curl\s", text, re.M):
                errors.append("%s: a shell example without a language: "
                              "label it ```sh" % where)
            continue
        marker = Marker(m.group(1), where) if m else None
        if marker:
            errors.extend(marker.errors)
        output = None
        if n + 1 < len(fences):
            nstart, _, nlang, ntext = fences[n + 1]
            if nstart == end + 1 and nlang == "":
                output = ntext
        blocks.append(Block(path, start + 1, lang, text, marker, output, last_ini))
    return blocks, errors


def parse_docs():
    blocks, errors = [], []
    for path in DOC_FILES:
        b, e = parse_doc(path)
        blocks.extend(b)
        errors.extend(e)
    return blocks, errors


def groups_of(blocks):
    """Runnable blocks in chains: a `same-node` block continues the previous
    block of its file. Returns (groups, errors)."""
    groups, errors, previous = [], [], None
    for b in blocks:
        if b.marker is None or b.marker.errors or b.marker.kind == "skip":
            if b.has("same-node"):
                errors.append("%s: same-node after a block that does not run" % b.name)
            previous = None
            continue
        if b.has("same-node"):
            if previous is None or previous.path != b.path:
                errors.append("%s: same-node without a runnable block before it" % b.name)
            elif previous.marker.kind != b.marker.kind:
                errors.append("%s: same-node continues a %s block as %s"
                              % (b.name, previous.marker.kind, b.marker.kind))
            else:
                for o in b.marker.options & GROUP_OPTIONS:
                    errors.append("%s: %s belongs on the group's first block"
                                  % (b.name, o))
                groups[-1].append(b)
                previous = b
                continue
        groups.append([b])
        previous = b
    return groups, errors


# ---------------------------------------------------------------- checks

def comment_of(line):
    """The comment of one script line (full-line or trailing), or None."""
    s = line.strip()
    if s.startswith("#"):
        return s[1:].strip()
    m = re.search(r"\s#\s(.*)$", line)
    if m and line.count("'", 0, m.start()) % 2 == 0 \
            and line.count('"', 0, m.start()) % 2 == 0:
        return m.group(1).strip()
    return None


def commented(script):
    """(statuses named, answers shown) in the comments, in order."""
    statuses, answers = [], []
    for line in script.split("\n"):
        c = comment_of(line)
        if c is None:
            continue
        if c.startswith("{") or c.startswith("HTTP/"):
            answers.append(c)
        if re.search(r"\bexit \d", c):
            c = re.sub(r"\bexit \d+", "", c)
        statuses.extend(int(s) for s in STATUS_RE.findall(c))
    return statuses, answers


def answer_regex(shown):
    """A regex for an answer a comment shows: `...` is anything, `"..."`
    any string; the trailing status (`... 200`, `... 409`) stays."""
    parts = re.split(r'("\.\.\."|\.\.\.)', shown)
    out = ""
    for p in parts:
        if p == '"..."':
            out += r'"[^"]*"'
        elif p == "...":
            out += ".*?"
        else:
            out += re.escape(p)
    return out


def output_line_regex(line):
    """A regex for a line of a shown output block: runs of digits stand for
    any number (times, ids, terms, ports differ per run), 64 hex digits for
    any digest, runs of blanks for any, `...` for anything."""
    out = ""
    for tok in re.split(r"(\.\.\.|[0-9a-f]{64}|\d+|\s+)", line.strip()):
        if tok == "":
            continue
        if tok == "...":
            out += ".*?"
        elif re.fullmatch(r"[0-9a-f]{64}", tok):
            out += r"[0-9a-f]{64}"
        elif tok.isdigit():
            out += r"\d+"
        elif tok.isspace():
            out += r"\s+"
        else:
            out += re.escape(tok)
    return out


def in_order(patterns, text, what):
    """Each regex found in `text` after the previous one; errors."""
    pos = 0
    for shown, rx in patterns:
        m = re.compile(rx).search(text, pos)
        if not m:
            return ["%s not printed (in this order): %s" % (what, shown)]
        pos = m.end()
    return []


def output_lines_in_order(shown, text):
    """Each line of the output block on a later line of `text`."""
    lines = text.split("\n")
    k = 0
    for want in shown.split("\n"):
        if want.strip() in ("", "..."):
            continue
        rx = re.compile(output_line_regex(want))
        while k < len(lines) and not rx.search(lines[k]):
            k += 1
        if k == len(lines):
            return ["the shown output line %r was not printed (in this order)"
                    % want.strip()]
        k += 1
    return []


def subsequence(want, got):
    it = iter(got)
    return all(any(s == g for g in it) for s in want)


# ---------------------------------------------------------------- running

CURL_SHIM = r"""#!/usr/bin/env bash
# doc-test: curl as the example runs it; each answer's status is logged for
# the checks (requests of the block's own shell only, not of scripts).
hdr=$(mktemp "$DOC_TEST_TMP/curl.XXXXXX")
"$DOC_TEST_REAL_CURL" -D "$hdr" "$@"
rc=$?
if [ "$PPID" = "${DOC_TEST_SHELL_PID:-}" ] && [ -n "${DOC_TEST_CURL_LOG:-}" ]; then
  sed -n 's/^HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' "$hdr" >> "$DOC_TEST_CURL_LOG"
fi
rm -f "$hdr"
exit $rc
"""

STUB = """#!/bin/sh
# doc-test: the binary under test is built already (ONCEGATE_BIN).
exit 0
"""

PRELUDE = r"""
shopt -s expand_aliases
__doc_test_vars0=" $(compgen -v | tr '\n' ' ') "
[ -f "$DOC_TEST_STATE" ] && . "$DOC_TEST_STATE"
export DOC_TEST_SHELL_PID=$$
__doc_test_save() {
  {
    export -p | grep -v '^declare -x DOC_TEST_'
    alias -p
    local v
    for v in $(compgen -v); do
      case "$__doc_test_vars0" in *" $v "*) continue ;; esac
      case "$v" in __doc_test*|DOC_TEST_*) continue ;; esac
      declare -p "$v" 2>/dev/null
    done
    printf 'cd %q\n' "$PWD"
  } >"$DOC_TEST_STATE.new" 2>/dev/null
  mv -f "$DOC_TEST_STATE.new" "$DOC_TEST_STATE"
}
trap '__doc_test_save' EXIT
__doc_test_exit() {  # EXPECTED GOT LINE
  if [ "$1" != "$2" ]; then
    echo "@@doc-test: line $3 exited $2, the doc says exit $1" >&2
  fi
}
__doc_test_lead() {  # NODE ID: makes node ID the leader (the doc shows it leading)
  local i
  for i in $(seq 200); do
    if ONCEGATE_TOKEN=${ONCEGATE_TOKEN:-${ONCEGATE_ADMIN_TOKEN:-}} \
        oncegate cluster status --json --node="$1" 2>/dev/null |
        grep -q "\"leader_id\":$2[,}]"; then
      return 0
    fi
    ONCEGATE_TOKEN=${ONCEGATE_TOKEN:-${ONCEGATE_ADMIN_TOKEN:-}} \
      oncegate cluster transfer --to="$2" --node="$1" >/dev/null 2>&1 || true
    sleep 0.05
  done
  echo "@@doc-test: node $2 did not become the leader" >&2
}
"""


def with_exit_checks(script):
    """Wraps each one-line command commented `# ... exit N` so that its exit
    code is checked (and does not stop the block)."""
    out, heredoc, cont = [], None, False
    for n, line in enumerate(script.split("\n"), 1):
        if heredoc is not None:
            out.append(line)
            if line.strip() == heredoc:
                heredoc = None
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if m and "#" not in line[:m.start()]:
            heredoc = m.group(1)
        e = re.match(r"^(?P<cmd>[^#]*?)\s+#(?P<c>[^#]*\bexit (?P<n>\d+)\b[^#]*)$", line)
        if e and not cont and not line.rstrip().endswith("\\") and heredoc is None:
            out.append("__doc_test_rc=0; %s || __doc_test_rc=$?; "
                       "__doc_test_exit %s \"$__doc_test_rc\" %d"
                       % (e.group("cmd").strip(), e.group("n"), n))
        else:
            out.append(line)
        cont = line.rstrip().endswith("\\")
    return "\n".join(out)


def pgid_alive(pgid):
    """True while a process of the group lives (zombies do not count)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def end_group(pgid):
    """SIGTERM to a process group, SIGKILL if it does not end in time."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not wait_for(lambda: not pgid_alive(pgid), STOP_TIMEOUT, 0.02):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_for(lambda: not pgid_alive(pgid), STOP_TIMEOUT, 0.02)


def serves_http(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except OSError:
        return False


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def servers_started(script):
    """What a block starts and the test should wait for: ("node"|"tcp",
    doc port) pairs. A cluster script waits for its nodes itself."""
    out = []
    for m in re.finditer(r"test_upstream\.py[^\n]*?--port[= ](\d+)", script):
        out.append(("tcp", int(m.group(1))))
    for line in re.sub(r"\\\n", " ", script).split("\n"):
        code = line.split(" #", 1)[0]
        starts = re.search(r"scripts/run-node\.sh", code) or re.search(
            r"(^|[;&|(]|\s)(\S*/)?oncegate\s+(?!keys\b|cluster\b|help\b)--", code)
        if not starts or re.search(
                r"--(check-config|backup-to|help|long-help|version|dump-config)\b", code):
            continue
        m = re.search(r"--http-port=(\d+)", code)
        out.append(("node", int(m.group(1)) if m else 8080))
    return out


class Sandbox:
    """The directory a group's blocks run in: a source tree of links (the
    cluster configs copied with their ports replaced), the binary, shims,
    and a root for the paths moved out of / (/tmp/, /var/lib/oncegate,
    /backup/)."""

    def __init__(self, group):
        self.first = group[0]
        self.marker = self.first.marker
        self.dir = tempfile.mkdtemp(prefix="oncegate-doc-")
        self.repo = os.path.join(self.dir, "repo")
        self.root = os.path.join(self.dir, "root")
        self.bin = os.path.join(self.dir, "bin")
        self.tmp = os.path.join(self.dir, "t")
        self.ports = {}
        self.pgids = []
        self.procs = []  # our children among them, reaped at the end
        self.node = None
        self.upstream = None
        self.env_extra = {}
        for d in (self.repo, self.bin, self.tmp,
                  os.path.join(self.root, "tmp"),
                  os.path.join(self.root, "var", "lib"),
                  os.path.join(self.root, "backup")):
            os.makedirs(d)

    # ports and paths
    def port(self, doc_port):
        if doc_port not in self.ports:
            self.ports[doc_port] = free_port()
        return self.ports[doc_port]

    def rewrite(self, text):
        text = PORT_RE.sub(
            lambda m: str(self.port(int(m.group(1))))
            if int(m.group(1)) in DOC_PORTS else m.group(1), text)
        return PATH_RE.sub(lambda m: os.path.join(self.root, m.group(1).lstrip("/")),
                           text)

    def unrewrite(self, text):
        """The output as the doc's reader would see it."""
        text = text.replace(self.root + "/", "/")
        back = {str(v): str(k) for k, v in self.ports.items()}
        if back:
            text = re.sub(r"(?<![\w.])(%s)(?![\w])" % "|".join(back),
                          lambda m: back[m.group(1)], text)
        return text

    def setup(self):
        m = self.marker
        token = "token" in m.options
        if token:
            self.env_extra["ONCEGATE_ADMIN_TOKEN"] = secrets.token_hex(32)
        if "upstream" in m.options:
            sys.path.insert(0, os.path.join(ROOT, "tools"))
            from test_upstream import TestUpstream
            self.upstream = TestUpstream().start()
            self.ports[9000] = self.upstream.port
        starts = not (self.first.has("own") or self.first.has("background"))
        if m.kind == "single" and starts:
            self.start_node(token)
        self.make_tree(token and m.kind == "cluster")
        if m.kind == "cluster" and starts:
            self.start_cluster()

    def start_node(self, token):
        args = ["--config-file=" + os.path.join(ROOT, "cluster-config", "single-node.ini")]
        env = dict(self.env_extra)
        if "config-above" in self.marker.options:
            ini = self.first.ini_above
            if ini is None:
                raise AssertionError("config-above: no ```ini block above")
            ini = self.rewrite(ini)
            for name in re.findall(r'-env\s*=\s*"(\w+)"', ini):
                env.setdefault(name, secrets.token_hex(16))
                self.env_extra.setdefault(name, env[name])
            path = os.path.join(self.dir, "node.ini")
            with open(path, "w") as f:
                f.write(ini)
            args = ["--config-file=" + path]
        if token:
            args.append("--admin.token-env=ONCEGATE_ADMIN_TOKEN")
        data = os.path.join(self.root, "var", "lib", "oncegate")
        self.node = Node(data, *args, env=env).start()
        self.ports[8080] = self.node.port

    def make_tree(self, cluster_token):
        for name in os.listdir(ROOT):
            if name in ("build", "data", "cluster-config", "scripts", ".git") \
                    or name.startswith("."):
                continue
            os.symlink(os.path.join(ROOT, name), os.path.join(self.repo, name))
        os.makedirs(os.path.join(self.repo, "data"))
        os.makedirs(os.path.join(self.repo, "build", "tools"))
        binary = os.path.abspath(BIN)
        os.symlink(binary, os.path.join(self.repo, "build", "tools", "oncegate"))
        os.symlink(binary, os.path.join(self.bin, "oncegate"))
        scripts = os.path.join(self.repo, "scripts")
        os.makedirs(scripts)
        for name in os.listdir(os.path.join(ROOT, "scripts")):
            target = os.path.join(scripts, name)
            if name in ("setup.sh", "build.sh"):
                with open(target, "w") as f:
                    f.write(STUB)
                os.chmod(target, 0o755)
            else:
                os.symlink(os.path.join(ROOT, "scripts", name), target)
        src = os.path.join(ROOT, "cluster-config")
        for d, _, files in os.walk(src):
            out = os.path.join(self.repo, "cluster-config", os.path.relpath(d, src))
            os.makedirs(out, exist_ok=True)
            for name in files:
                with open(os.path.join(d, name)) as f:
                    text = f.read()
                if name.endswith(".ini"):
                    text = self.rewrite(text)
                    if cluster_token and "three-node" in d:
                        # What docs/cli.md tells the reader to add.
                        text += '\n[admin]\ntoken-env="ONCEGATE_ADMIN_TOKEN"\n'
                with open(os.path.join(out, name), "w") as f:
                    f.write(text)
        with open(os.path.join(self.bin, "curl"), "w") as f:
            f.write(CURL_SHIM)
        os.chmod(os.path.join(self.bin, "curl"), 0o755)

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ONCEGATE_") and not k.startswith("DOC_TEST_")}
        env.update(self.env_extra)
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env["DOC_TEST_REAL_CURL"] = shutil.which("curl") or "curl"
        env["DOC_TEST_TMP"] = self.tmp
        env["DOC_TEST_STATE"] = os.path.join(self.dir, "state.sh")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if self.marker.kind == "single":
            env["ONCEGATE_NODE"] = "127.0.0.1:%d" % self.port(8080)
        return env

    def start_cluster(self):
        log = os.path.join(self.dir, "cluster-start.log")
        with open(log, "wb") as out:
            p = subprocess.Popen(
                ["scripts/cluster.sh", "start", "cluster-config/three-node"],
                cwd=self.repo, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        self.pgids.append(p.pid)
        self.procs.append(p)
        try:
            rc = p.wait(BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        if rc != 0:
            with open(log, errors="replace") as f:
                raise AssertionError("the test's cluster did not start (%s):\n%s"
                                     % (rc, f.read()[-3000:]))

    def wait_servers(self, block, proc=None):
        for what, doc_port in servers_started(block.script):
            port = self.port(doc_port)
            ok = serves_http if what == "node" else accepts

            def up():
                return ok(port) or (proc is not None and proc.poll() is not None)
            wait_for(up, READY_TIMEOUT, 0.02)
            if not ok(port):
                return ["%s on port %d (%d here) did not serve within %ss"
                        % ("the node" if what == "node" else "the server",
                           doc_port, port, READY_TIMEOUT)]
        return []

    def run(self, block, n):
        """Runs one block; returns (errors, output as the reader sees it)."""
        script = PRELUDE
        if not block.has("allow-fail"):
            script += "set -e\n"
        if block.marker.leader is not None:
            script += "__doc_test_lead 127.0.0.1:%d %d\n" % (self.port(8081),
                                                          block.marker.leader)
        script += self.rewrite(with_exit_checks(block.script)) + "\n"
        path = os.path.join(self.dir, "block%d.sh" % n)
        with open(path, "w") as f:
            f.write(script)
        out_path = os.path.join(self.dir, "block%d.out" % n)
        curl_log = os.path.join(self.dir, "block%d.curl" % n)
        env = self.env()
        env["DOC_TEST_CURL_LOG"] = curl_log
        out = open(out_path, "wb")
        proc = subprocess.Popen(["bash", path], cwd=self.repo, env=env,
                                stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.pgids.append(proc.pid)
        self.procs.append(proc)
        errors = []
        if block.has("background"):
            errors += self.wait_servers(block, proc)
            if proc.poll() is not None:
                errors.append("the server exited (%s) instead of serving" % proc.returncode)
        else:
            try:
                rc = proc.wait(BLOCK_TIMEOUT)
                if rc != 0 and not block.has("allow-fail"):
                    errors.append("exited %d" % rc)
            except subprocess.TimeoutExpired:
                errors.append("did not end within %ss" % BLOCK_TIMEOUT)
                end_group(proc.pid)
            if block.has("own") and not errors:
                errors += self.wait_servers(block)
        with open(out_path, errors="replace") as f:
            output = self.unrewrite(f.read())
        statuses = []
        if os.path.exists(curl_log):
            with open(curl_log) as f:
                statuses = [int(s) for s in f.read().split() if not s.startswith("1")]
        errors += check(block, output, statuses)
        return errors, output

    def teardown(self):
        for pgid in self.pgids:
            end_group(pgid)
        for p in self.procs:
            try:
                p.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.node is not None:
            self.node.stop()
        if self.upstream is not None:
            self.upstream.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def check(block, output, statuses):
    errors = [l[len("@@doc-test: "):] for l in output.split("\n")
              if l.startswith("@@doc-test: ")]
    named, answers = commented(block.script)
    if not subsequence(named, statuses):
        errors.append("the comments name the statuses %s, the node answered %s"
                      % (named, statuses))
    bad = sorted(set(statuses) & FORBIDDEN - set(named))
    if bad:
        errors.append("answered %s, which the example does not show (answers: %s)"
                      % (bad, statuses))
    errors += in_order([(a, answer_regex(a)) for a in answers], output,
                       "the answer a comment shows was")
    if block.output is not None:
        errors += output_lines_in_order(block.output, output)
    return errors


def run_group(group):
    """{block name: (errors, output)} for one chain of blocks."""
    results = {}
    box = Sandbox(group)
    try:
        try:
            box.setup()
        except Exception as e:  # a failed start fails every block of it
            return {b.name: (["setting up the %s: %s" % (b.marker.kind, e)], "")
                    for b in group}
        failed = None
        for n, block in enumerate(group):
            if failed:
                results[block.name] = (["not run: %s failed" % failed], "")
                continue
            start = time.monotonic()
            errors, output = box.run(block, n)
            results[block.name] = (errors, output, time.monotonic() - start)
            if errors:
                failed = block.name
    finally:
        box.teardown()
    return results


# ---------------------------------------------------------------- tests

BLOCKS, PARSE_ERRORS = parse_docs()
GROUPS, GROUP_ERRORS = groups_of(BLOCKS)


class DocExamplesTest(unittest.TestCase):
    """One test per shell block: test_<file>_<line>."""

    executor = None
    futures = {}
    lock = threading.Lock()
    started = None

    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.executor = concurrent.futures.ThreadPoolExecutor(PARALLEL)
        if os.path.exists(BIN) and not os.environ.get("DOC_TEST_LAZY"):
            for g in GROUPS:
                cls.future(g)

    @classmethod
    def tearDownClass(cls):
        cls.executor.shutdown(wait=True)
        kinds = {}
        for b in BLOCKS:
            k = b.marker.kind if b.marker else "unmarked"
            kinds[k] = kinds.get(k, 0) + 1
        sys.stderr.write("doc examples: %s; %.1f s\n" % (
            ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
            time.monotonic() - cls.started))

    @classmethod
    def future(cls, group):
        with cls.lock:
            key = group[0].name
            if key not in cls.futures:
                cls.futures[key] = cls.executor.submit(run_group, group)
            return cls.futures[key]

    def test_every_node_example_is_marked(self):
        errors = list(PARSE_ERRORS) + list(GROUP_ERRORS)
        for b in BLOCKS:
            if b.marker is None and b.talks_to_node():
                errors.append("%s: a shell example that talks to a node has no "
                              "<!-- doc-test: ... --> marker (docs/testing.md)" % b.name)
        if errors:
            self.fail("\n".join(errors))
        self.assertGreater(len([b for b in BLOCKS if b.marker
                                and b.marker.kind != "skip"]), 10)

    def run_block(self, block, group):
        if not os.path.exists(BIN):
            self.skipTest("no binary at %s" % BIN)
        results = self.future(group).result()
        errors, output = results[block.name][:2]
        if errors:
            self.fail("%s (%s):\n  %s\n--- the block, as run:\n%s\n--- its output:\n%s"
                      % (block.name, block.marker.text, "\n  ".join(errors),
                         block.script, output[-4000:]))


class CheckerTest(unittest.TestCase):
    """The checks themselves catch what they are for."""

    def test_comments_name_statuses_and_answers(self):
        named, answers = commented(
            "curl -i http://127.0.0.1:8080/v1/webhook\n"
            "# HTTP/1.1 200 OK\n"
            '# {"status":"accepted","received_at":"..."}\n'
            'curl -s -w " %{http_code}" x   # {"a":1,"original_status":200} 409\n'
            "done   # 502 502 502: in doubt\n"
            "oncegate keys get default nope   # again: exit 3, no record\n"
            "# 1. list them, ~25 s\n")
        self.assertEqual(named, [200, 409, 502, 502, 502])
        self.assertEqual(len(answers), 3)
        rx = answer_regex(answers[1])
        self.assertRegex('{"status":"accepted","received_at":"2026-12-01T00:00:00Z"}', rx)
        self.assertNotRegex('{"status":"accepted","received_at":"x","more":1}', rx + "$")

    def test_statuses_in_order(self):
        self.assertTrue(subsequence([200, 409], [200, 200, 409, 409]))
        self.assertFalse(subsequence([200, 409], [409, 200]))

    def test_output_lines(self):
        shown = "KEY      STATE\norder-7  in_doubt  2026-12-01T21:26:20.001Z\n...\nnode 2 leads"
        got = ("{}KEY  STATE\norder-7 in_doubt 2027-01-02T03:04:05.678Z\nx\n"
               "node 3 leads\n")
        self.assertEqual(output_lines_in_order(shown, got), [])
        self.assertNotEqual(output_lines_in_order(shown, got.replace("in_doubt", "queued")), [])
        self.assertNotEqual(output_lines_in_order("node 2 leads\nKEY", got), [])

    def test_exit_comments_are_checked(self):
        script = with_exit_checks("cat <<'EOF'\nx   # exit 4\nEOF\n"
                                  "oncegate keys get default nope   # exit 3")
        self.assertIn("x   # exit 4", script)
        self.assertIn("__doc_test_rc=0; oncegate keys get default nope || "
                      "__doc_test_rc=$?; __doc_test_exit 3", script)

    def run_text(self, text):
        blocks, errors = parse_markdown("check.md", text)
        self.assertEqual(errors, [])
        groups, errors = groups_of(blocks)
        self.assertEqual(errors, [])
        return [e for g in groups for r in run_group(g).values() for e in r[0]]

    @unittest.skipUnless(os.path.exists(BIN), "no binary")
    def test_a_drifted_example_fails(self):
        # curl -d without Content-Type sends a form: the node answers 415.
        errors = self.run_text(
            "<!-- doc-test: single -->\n```sh\n"
            "curl -s -X POST http://127.0.0.1:8080/v1/webhook -d '{\"a\":1}'   # 200\n"
            "oncegate keys get default nope   # exit 4\n"
            "oncegate keys get default nope\n"
            "```\n```\nno such line\n```\n")
        text = "\n".join(errors)
        self.assertIn("answered [415]", text)
        self.assertIn("name the statuses [200]", text)
        self.assertIn("exited 3, the doc says exit 4", text)
        self.assertIn("exited 3", text)  # set -e: the last command failed
        self.assertIn("'no such line' was not printed", text)

    @unittest.skipUnless(os.path.exists(BIN), "no binary")
    def test_a_working_example_passes(self):
        self.assertEqual(self.run_text(
            "<!-- doc-test: single -->\n```sh\n"
            "curl -s http://127.0.0.1:8080/v1/webhook -H 'Content-Type: application/json' \\\n"
            "  -H 'Idempotency-Key: k' -d '{\"a\":1}'   # 200\n"
            "oncegate keys get default nope   # exit 3\n"
            "oncegate keys get default k\n"
            "```\n```\nkey          k\nstate        completed\n```\n"), [])

    @unittest.skipUnless(os.path.exists(BIN), "no binary")
    def test_console_upstream_allow_fail(self):
        self.assertEqual(self.run_text(
            "<!-- doc-test: single upstream allow-fail -->\n```console\n"
            "$ curl -s http://127.0.0.1:9000/_counts\n"
            '{"total": 0, "keys": {}, ...}\n'
            "$ false\n"
            "```\n"), [])

    def test_bad_markers_are_reported(self):
        _, errors = parse_markdown("check.md", (
            "<!-- doc-test: single bogus -->\n```sh\ncurl localhost:8080/readyz\n```\n"
            "<!-- doc-test: skip -->\n```sh\ntrue\n```\n"
            "<!-- doc-test: nodes -->\n```sh\ntrue\n```\n"))
        self.assertEqual(len(errors), 3, errors)
        blocks, _ = parse_markdown("check.md", (
            "<!-- doc-test: single same-node -->\n```sh\ntrue\n```\n"))
        self.assertEqual(len(groups_of(blocks)[1]), 1)

    def test_unmarked_node_example_is_found(self):
        blocks, _ = parse_markdown("check.md", "```sh\ncurl -s localhost:8080/readyz\n```\n")
        self.assertTrue(blocks[0].talks_to_node())
        blocks, _ = parse_markdown("check.md", "```sh\nsudo systemctl restart oncegate\n```\n")
        self.assertFalse(blocks[0].talks_to_node())


def _add_tests():
    group_of = {b.name: g for g in GROUPS for b in g}
    for b in BLOCKS:
        if b.marker is None or b.marker.errors:
            continue
        name = "test_%s_%d" % (re.sub(r"\W", "_", b.path.replace(".md", "")), b.line)
        if b.marker.kind == "skip":
            def t(self, reason=b.marker.reason):
                self.skipTest(reason)
        elif b.name in group_of:
            def t(self, block=b, group=group_of[b.name]):
                self.run_block(block, group)
        else:
            continue
        t.__doc__ = None
        setattr(DocExamplesTest, name, t)


_add_tests()


if __name__ == "__main__":
    unittest.main()
