#!/usr/bin/python3
"""A fresh database for one SQS client test run, on the engine named by
SQLQ_SQS_ENGINE (sqlite, the default; postgres; mysql).

The server engines follow the rule of every test that needs a database
server: the server's URL comes from SQLQ_TEST_PG_URL or SQLQ_TEST_MYSQL_URL
(scripts/test.sh starts throwaway servers and sets them); without it the
test is skipped, or fails when SQLQ_REQUIRE_PG / SQLQ_REQUIRE_MYSQL is 1.

As a program, for the JavaScript test:
  test_db.py create DIR   prints the database URL (exit 77: skip, with why)
  test_db.py drop URL     drops a database `create` made
"""
import os
import secrets
import subprocess
import sys
import unittest
import urllib.parse

SERVERS = {
    "postgres": ("SQLQ_TEST_PG_URL", "SQLQ_REQUIRE_PG"),
    "mysql": ("SQLQ_TEST_MYSQL_URL", "SQLQ_REQUIRE_MYSQL"),
}


class Skip(Exception):
    """The engine's server is not there and not required."""


def engine():
    return os.environ.get("SQLQ_SQS_ENGINE", "sqlite")


def _admin(url, sql):
    u = urllib.parse.urlsplit(url)
    if u.scheme.startswith("postgres"):
        cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url,
               "-c", sql]
    else:
        cmd = ["mariadb", "--no-defaults", "-h", u.hostname,
               "-P", str(u.port or 3306), "-u",
               urllib.parse.unquote(u.username or "root"),
               "-p" + urllib.parse.unquote(u.password or ""), "-e", sql]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def create_or_skip(tmp):
    """create() in the TemporaryDirectory `tmp`, for a unittest: when the
    engine's server is not there (and not required), `tmp` is cleaned up
    and the test skipped."""
    try:
        return create(tmp.name)
    except Skip as e:
        tmp.cleanup()
        raise unittest.SkipTest(str(e))


def create(directory):
    """The URL of a new, empty database (SQLite: a file in `directory`)."""
    name = engine()
    if name == "sqlite":
        return "sqlite:" + os.path.join(directory, "db")
    url_var, require_var = SERVERS[name]
    admin = os.environ.get(url_var, "")
    if not admin:
        why = f"{url_var} is not set: run scripts/test.sh"
        if os.environ.get(require_var) == "1":
            raise RuntimeError(why + f" (and {require_var}=1)")
        raise Skip(why)
    db = "sqlq_sqs_" + secrets.token_hex(6)
    _admin(admin, f"CREATE DATABASE {db}")
    u = urllib.parse.urlsplit(admin)
    return urllib.parse.urlunsplit(u._replace(path="/" + db))


def drop(url):
    if url.startswith("sqlite:"):
        return
    u = urllib.parse.urlsplit(url)
    db = u.path.lstrip("/")
    default = "postgres" if u.scheme.startswith("postgres") else ""
    _admin(urllib.parse.urlunsplit(u._replace(path="/" + default)),
           f"DROP DATABASE IF EXISTS {db}" +
           (" WITH (FORCE)" if default else ""))


if __name__ == "__main__":
    if sys.argv[1] == "create":
        try:
            print(create(sys.argv[2]))
        except Skip as e:
            print(e, file=sys.stderr)
            sys.exit(77)
    else:
        drop(sys.argv[2])
