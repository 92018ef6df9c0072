"""A real `sqlq serve` for the Python tests: started on a free loopback
port (--port 0), its log in a file, stopped with SIGTERM as a service
manager stops it."""
import os
import subprocess
import time


class Serve:
    """`sqlq --db DB serve --port 0 ARGS...`; `port` and `url` once it
    listens (its port file appears then). Raises RuntimeError, with the
    log, when it does not."""

    def __init__(self, sqlq, db, directory, *args, env=None, cwd=None,
                 timeout_s=30):
        port_file = os.path.join(directory, "port")
        self.log_path = os.path.join(directory, "serve.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sqlq, "--db", db, "serve", "--port", "0", "--port-file",
             port_file, *args],
            stdout=self.log, stderr=self.log, env=env, cwd=cwd)
        deadline = time.monotonic() + timeout_s
        self.port = 0
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with open(port_file) as f:
                    self.port = int(f.read().strip() or 0)
            except FileNotFoundError:
                pass
            if self.port:
                break
            time.sleep(0.01)
        if not self.port:
            self.stop()
            raise RuntimeError("sqlq serve did not start:\n" + self.read_log())
        self.url = f"http://127.0.0.1:{self.port}"

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """Stops the server; its exit code (0 after a graceful shutdown)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode
