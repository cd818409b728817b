"""A real nginx for process tests: one master (and its worker) run as the
test user from a temp dir (`-p`/`-c`/`-e`, pid, logs and temp paths there,
`daemon off;`) on a free 127.0.0.1 port, with the `server` block's
locations given by the test.

nginx (Debian: apt-get install nginx; scripts/setup.sh installs it) must be
there in CI (CI set in the environment); elsewhere tests that need it skip.
"""

import os
import shutil
import signal
import socket
import subprocess

from harness import free_port, http_call, wait_for

NGINX = shutil.which("nginx") or (
    "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

NGINX_CONF = """# written by tests/process/nginx.py
{user}
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
  worker_connections 64;
}}

http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;

  server {{
    listen 127.0.0.1:{port};
{locations}
  }}
}}
"""


def require(case):
    """Skips (or, in CI, fails) unittest case `case` without nginx."""
    if NGINX is None:
        if IN_CI:
            case.fail("nginx is missing (Debian: apt-get install nginx; "
                      "scripts/setup.sh installs it)")
        case.skipTest("nginx is not installed (Debian: apt-get install "
                      "nginx); this test runs in CI")


class Nginx:
    """One nginx master (and its worker) in `directory` serving
    `locations` (the text inside its `server` block), reaped by `stop`.
    `client`: the address `request` sends from (default 127.0.0.1)."""

    def __init__(self, directory, locations, client=None):
        self.dir = directory
        # The address requests come from (`request`), default 127.0.0.1.
        self.client = client
        self.port = free_port()
        user = "user %s;" % _user_name() if os.geteuid() == 0 else ""
        self.conf = os.path.join(directory, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(user=user, dir=directory, port=self.port,
                                      locations=locations))
        self.proc = None

    def start(self):
        out = open(os.path.join(self.dir, "stdout.log"), "wb")
        # Its own session, so that stop() can reach the worker too.
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.dir, "-c", self.conf,
             "-e", os.path.join(self.dir, "error.log")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()
        if not wait_for(self._accepts, START_TIMEOUT, 0.02):
            self.stop()
            raise RuntimeError("nginx did not start: %s" % self.log())
        return self

    def _accepts(self):
        if self.proc.poll() is not None:
            raise RuntimeError("nginx exited with %s: %s"
                               % (self.proc.returncode, self.log()))
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def log(self):
        text = []
        for name in ("stdout.log", "error.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text.append(f.read()[-2000:])
            except OSError:
                pass
        return "\n".join(text)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown, workers too
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def request(self, method, path, body=None, headers=None):
        """A request of the client, through nginx."""
        return http_call("127.0.0.1", self.port, method, path, body, headers,
                         source=self.client)


def _user_name():
    import pwd
    return pwd.getpwuid(os.geteuid()).pw_name
