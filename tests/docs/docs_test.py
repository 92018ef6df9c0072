#!/usr/bin/python3
"""Runs the command blocks of a documentation page as a reader would: every
```sh block of the page, command by command, in order, in one shell, in a
fresh directory, with the build's `sqlq` first on PATH and a real
`sqlq serve` on SQLite in that directory (its database is the CLI's default,
./sqlq.db, as with ./scripts/run.sh). A command that exits non-zero fails
the test, which names the page, the line and the command.

    docs_test.py [--keep-going] PAGE   (README.md, docs/cli.md: relative to
                                        the source tree)

--keep-going runs the commands after a failed one too, and reports every
failure (for fixing a page; the commands after one that failed may fail
for that reason alone).

Environment: SQLQ_BIN, the sqlq program under test.

What the test does that a reader would do by hand, and nothing more:
- The server listens on a free port rather than 8080 (other programs may
  hold 8080); `localhost:8080` and `127.0.0.1:8080` in a command become that
  port, and `$S` (docs/http-api.md's base URL) is set to it.
- A receipt written `ID-ATTEMPT-…` (or `...`) is the one an earlier command
  printed for that message and attempt: the reader pastes it, so does the
  test.
- `curl` is run with --fail-with-body (and -sS): an error reply is a failure
  of the command, as a reader reading the reply would see it.
- A PostgreSQL or MariaDB/MySQL URL in a block (postgresql://admin@db/app)
  stands for a database of the reader's: the test makes a fresh one on the
  suite's throwaway server (SQLQ_TEST_PG_URL, SQLQ_TEST_MYSQL_URL, as
  scripts/test.sh sets them; tests/sqs/test_db.py) and uses its URL
  wherever the block names that one. Without that server the block is not
  run (with SQLQ_REQUIRE_PG=1 / SQLQ_REQUIRE_MYSQL=1 the test fails).
- Nothing of the machine's SQLQ_*, PG* or MYSQL* environment reaches the
  commands or the server; HOME is an empty directory beside the fresh one,
  whose .psqlrc sets ON_ERROR_STOP (so that psql's exit code tells an
  error, as its output tells a reader).

A block that is not meant to be run says so with an HTML comment on the
line before its fence, giving the reason (keep these rare):

    <!-- not run: these build and run every test, this one among them -->

Blocks with another info string (```cpp, ```python) or none (output, file
contents) are not run."""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sqs"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import test_db  # noqa: E402  (a fresh database on the suite's test servers)
from serve import Serve  # noqa: E402

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHELLS = {"sh", "bash", "shell"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")
PORT_8080 = re.compile(r"\b(localhost|127\.0\.0\.1):8080\b")
RECEIPT = re.compile(r"\b(\d+)-(\d+)-([0-9a-f]{16})\b")
RECEIPT_PLACEHOLDER = re.compile(r"\b(\d+)-(\d+)-(?:…|\.\.\.)")
# A database of the reader's own: PostgreSQL or MariaDB/MySQL.
DB_URL = re.compile(r"\b(postgres(?:ql)?|mysql|mariadb)://[^\s'\"|;)]+")
COMMAND_TIMEOUT_S = 90


class DocError(Exception):
    """The page itself is malformed (an unterminated block or command)."""


def blocks(path):
    """(first line number, lines, not-run reason or None) of each shell
    block of the page at `path`."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3)
        start = i + 1
        j = start
        while j < len(lines) and not re.match(
                r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$",
                lines[j]):
            j += 1
        if j == len(lines):
            raise DocError(f"{path}:{i + 1}: a block that never ends")
        if info.lower() in SHELLS:
            before = i - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            reason = None
            if before >= 0:
                marker = NOT_RUN.match(lines[before])
                if marker:
                    reason = marker.group(1)
            body = [l[len(indent):] if l.startswith(indent) else l.lstrip()
                    for l in lines[start:j]]
            out.append((start + 1, body, reason))
        i = j + 1
    return out


def complete(text):
    """Whether `text` is one or more whole shell commands (bash parses it
    and it does not end in a line continuation)."""
    if text.rstrip("\n").endswith("\\"):
        return False
    p = subprocess.run(["bash", "-n"], input=text, text=True,
                       capture_output=True)
    # An unterminated here-document is only a warning to bash.
    return p.returncode == 0 and "here-document" not in p.stderr


def commands(first_line, body, page):
    """(line number, text) of each command of a block: comment and blank
    lines between commands are left out; a command runs on over line
    continuations and open quotes."""
    out = []
    pending, pending_line = "", None
    for k, line in enumerate(body):
        if pending_line is None:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending_line = first_line + k
        pending += line + "\n"
        if complete(pending):
            out.append((pending_line, pending.rstrip("\n")))
            pending, pending_line = "", None
    if pending_line is not None:
        raise DocError(f"{page}:{pending_line}: a command that never ends:\n{pending}")
    return out


class Shell:
    """One bash for the whole page, as a reader's terminal: each command is
    sourced in it (so variables and `cd` carry over), its output kept in
    files, and its exit code reported on a pipe."""

    def __init__(self, directory, env):
        self.dir = directory
        self.scratch = os.path.join(directory, "..", "commands")
        os.mkdir(self.scratch)
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"], cwd=directory, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._send("set -o pipefail\n")
        self.n = 0

    def _send(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def run(self, text):
        """(exit code or None when it timed out or ended the shell,
        stdout, stderr) of one command."""
        self.n += 1
        base = os.path.join(self.scratch, str(self.n))
        with open(base + ".sh", "w") as f:
            f.write(text + "\n")
        self._send(f"source {base}.sh >{base}.out 2>{base}.err </dev/null; "
                   f"echo \"__done $?\"\n")
        rc = None
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:  # the command ended the shell (`exit`)
                break
            if line.startswith("__done "):
                rc = int(line.split()[1])
                break

        def read(suffix):
            try:
                with open(base + suffix, errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""

        return rc, read(".out"), read(".err")

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def clean_env(home, bin_dir, port):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SQLQ_", "PG", "MYSQL"))}
    env["PATH"] = bin_dir + ":" + env.get("PATH", "/usr/bin:/bin")
    env["HOME"] = home
    if port:
        env["S"] = f"http://127.0.0.1:{port}"
    return env


def tools(bin_dir, home, sqlq):
    """The build's sqlq, curl that fails on an error reply, and psql that
    stops at an error (its exit code then says so)."""
    with open(os.path.join(home, ".psqlrc"), "w") as f:
        f.write("\\set ON_ERROR_STOP on\n")
    os.symlink(sqlq, os.path.join(bin_dir, "sqlq"))
    curl = shutil.which("curl")
    if not curl:
        raise RuntimeError("curl is not installed (scripts/install-deps.sh)")
    shim = os.path.join(bin_dir, "curl")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec {curl} --fail-with-body -sS "$@"\n')
    os.chmod(shim, 0o755)


def fresh_databases(block_commands, made):
    """The URL of a fresh database for each PostgreSQL or MariaDB/MySQL URL
    the commands name (the same one wherever the same URL appears), added
    to `made`; raises test_db.Skip when that engine's test server is not
    there and not required."""
    urls = {}
    for _, text in block_commands:
        for m in DB_URL.finditer(text):
            url = m.group(0)
            if url in urls:
                continue
            if url not in made:
                os.environ["SQLQ_SQS_ENGINE"] = (
                    "postgres" if m.group(1).startswith("postgres") else "mysql")
                made[url] = test_db.create(None)
            urls[url] = made[url]
    return urls


def main():
    args = sys.argv[1:]
    keep_going = "--keep-going" in args
    args = [a for a in args if a != "--keep-going"]
    if len(args) != 1:
        sys.exit(__doc__)
    page = args[0]
    sqlq = os.path.abspath(os.environ["SQLQ_BIN"])
    try:
        to_run = []  # (line, [(line, command)]) of each block to run
        for first, body, reason in blocks(os.path.join(SOURCE_DIR, page)):
            if reason:
                print(f"{page}:{first}: not run: {reason}")
                continue
            to_run.append((first, commands(first, body, page)))
    except DocError as e:
        print(f"FAILED: {e}")
        return 1
    if not to_run:
        print(f"FAILED: {page} has no shell block to run")
        return 1

    root = tempfile.mkdtemp(prefix="sqlq-docs-test.")
    work = os.path.join(root, "work")
    bin_dir = os.path.join(root, "bin")
    home = os.path.join(root, "home")
    for d in (work, bin_dir, home):
        os.mkdir(d)
    tools(bin_dir, home, sqlq)
    # As ./scripts/run.sh serves: the database ./sqlq.db of the directory
    # the reader works in, which is the CLI's default too.
    server = Serve(sqlq, "sqlite:" + os.path.join(work, "sqlq.db"), root,
                   env=clean_env(home, bin_dir, 0), cwd=work)
    shell = Shell(work, clean_env(home, bin_dir, server.port))
    receipts = {}
    databases = {}
    failures = []
    ran = 0
    try:
        for first, block_commands in to_run:
            try:
                urls = fresh_databases(block_commands, databases)
            except test_db.Skip as e:
                print(f"{page}:{first}: not run: its database URL needs a "
                      f"test server: {e}")
                continue
            except (RuntimeError, subprocess.SubprocessError) as e:
                failures.append((first, "(a fresh database for the block)",
                                 str(e), ""))
                break
            for line, text in block_commands:
                run = PORT_8080.sub(lambda m: f"{m.group(1)}:{server.port}", text)
                run = DB_URL.sub(lambda m: urls[m.group(0)], run)
                # A placeholder no earlier command printed stays (it may be
                # in the comment that shows what this command prints).
                run = RECEIPT_PLACEHOLDER.sub(
                    lambda m: receipts.get((m.group(1), m.group(2)), m.group(0)),
                    run)
                print(f"{page}:{line}: $ {run}", flush=True)
                rc, out, err = shell.run(run)
                ran += 1
                for text_out in (out, err):
                    if text_out:
                        print(text_out, end="" if text_out.endswith("\n") else "\n")
                for m in RECEIPT.finditer(out + err):
                    receipts[(m.group(1), m.group(2))] = m.group(0)
                why = None
                if rc is None:
                    why = (f"did not finish within {COMMAND_TIMEOUT_S} s, "
                           "or ended the shell")
                elif rc != 0:
                    why = f"exit code {rc}"
                elif server.proc.poll() is not None:
                    why = "sqlq serve exited during it"
                if why:
                    failures.append((line, text, why, err))
                    if (not keep_going or rc is None
                            or server.proc.poll() is not None):
                        break
            if failures and not keep_going:
                break
    finally:
        shell.close()
        serve_rc = server.stop()
        log = server.read_log()
        shutil.rmtree(root)
        for url in databases.values():
            test_db.drop(url)
    for line, text, why, err in failures:
        print(f"\nFAILED: {page}:{line}: {why}:\n  {text}")
        if err:
            print("stderr:\n" + err)
    if failures:
        print("\nsqlq serve's log (last lines):\n"
              + "\n".join(log.splitlines()[-20:]))
        return 1
    if serve_rc != 0:
        print(f"FAILED: sqlq serve exited {serve_rc} on SIGTERM:\n" + log)
        return 1
    print(f"{page}: {ran} commands ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
