"""A real `sqlq serve` for the client tests: SQLQ_BIN on a fresh SQLite
database in a temporary directory, with a token file; it can be killed and
started again on the same port and database."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
# The tests import the package from the source tree.
sys.path.insert(0, os.path.dirname(HERE))

ADMIN_TOKEN = "py-admin-0123456789abcdef"
CLAIM_TOKEN = "py-claimer-0123456789abcdef"


def wait_for(cond: Callable[[], object], timeout: float = 20.0,
             what: str = "condition", step: float = 0.01) -> object:
    """Polls cond() until it is truthy; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for "
                                 f"{what}")
        time.sleep(step)


def serve(case: unittest.TestCase) -> tuple["Server", Any]:
    """A server and an admin client of it (sqlq.Client) for a test; both
    are closed after it, the client first."""
    import sqlq
    server = Server()
    case.addCleanup(server.close)
    client = sqlq.Client(server.url, token=ADMIN_TOKEN)
    case.addCleanup(client.close)
    return server, client


class Server:
    def __init__(self, tls: bool = False) -> None:
        """tls: serve HTTPS with a self-signed certificate for 127.0.0.1
        (made by the openssl command); ssl_context() trusts it."""
        self.bin = os.environ.get("SQLQ_BIN") or os.path.join(
            HERE, "..", "..", "..", "build", "dev", "sqlq")
        self.dir = tempfile.TemporaryDirectory(prefix="sqlq-py-")
        self.tls = tls
        self.cert = os.path.join(self.dir.name, "cert.pem")
        self.key = os.path.join(self.dir.name, "key.pem")
        if tls:
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                 "-subj", "/CN=127.0.0.1", "-addext",
                 "subjectAltName=IP:127.0.0.1", "-keyout", self.key,
                 "-out", self.cert],
                check=True, capture_output=True)
        self.db = "sqlite:" + os.path.join(self.dir.name, "db")
        self.tokens = os.path.join(self.dir.name, "tokens")
        with open(self.tokens, "w") as f:
            f.write(f"{ADMIN_TOKEN} admin:*\n")
            f.write(f"{CLAIM_TOKEN} claim:jobs*\n")
        self.log_path = os.path.join(self.dir.name, "log")
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def ssl_context(self) -> Any:
        """A client context that trusts this server's certificate."""
        import ssl
        return ssl.create_default_context(cafile=self.cert)

    def start(self) -> None:
        """Starts the server (on the port it had, after a restart)."""
        port_file = os.path.join(self.dir.name, "port")
        try:
            os.unlink(port_file)
        except FileNotFoundError:
            pass
        log = open(self.log_path, "a")
        tls = ["--tls-cert", self.cert, "--tls-key", self.key] \
            if self.tls else []
        self.proc = subprocess.Popen(
            [self.bin, "--db", self.db, "serve", "--port", str(self.port),
             "--port-file", port_file, "--tokens", self.tokens,
             "--shutdown-timeout", "2s"] + tls,
            stdout=log, stderr=log)
        log.close()

        def bound() -> int:
            if self.proc.poll() is not None:
                raise RuntimeError("sqlq serve exited: " + self.read_log())
            try:
                with open(port_file) as f:
                    return int(f.read().strip() or 0)
            except FileNotFoundError:
                return 0
        self.port = int(wait_for(bound, 15, "the server's port file"))

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self) -> None:
        self.stop()
        self.dir.cleanup()

    def read_log(self) -> str:
        with open(self.log_path) as f:
            return f.read()
