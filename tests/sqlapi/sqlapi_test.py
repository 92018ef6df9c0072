#!/usr/bin/python3
"""The SQL-level API (docs/sql-api.md) on the engine SQLQ_SQLAPI_ENGINE names
(sqlite, postgres, mysql), called as applications call it: from psql and
psycopg on PostgreSQL, from the mariadb client on MariaDB, from python3's
sqlite3 on SQLite, inside transactions of the application's own rows that
commit and that roll back. The library's side is the sqlq program
(SQLQ_BIN): its sends are the library's, and its claims are what every
consumer sees. A fresh database per test (tests/sqs/test_db.py)."""
import copy
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sqs"))
ENGINE = os.environ.get("SQLQ_SQLAPI_ENGINE", "sqlite")
os.environ["SQLQ_SQS_ENGINE"] = ENGINE
import test_db  # noqa: E402

SQLQ = os.environ.get("SQLQ_BIN", "sqlq")


class SqlError(Exception):
    """The database refused a statement: `state` is its SQLSTATE (None on
    SQLite, which has none), `message` its text."""

    def __init__(self, state, message):
        super().__init__(f"{state}: {message}")
        self.state = state
        self.message = message


class Database:
    """A fresh database with sqlq's schema, and the application's side of
    it: `run(statements, commit)` runs them in one transaction of the
    engine's usual client and returns the last statement's rows."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.url = test_db.create_or_skip(self.dir)
        if ENGINE == "sqlite":
            self.path = self.url[len("sqlite:"):]

    def close(self):
        test_db.drop(self.url)
        self.dir.cleanup()

    def as_user(self, user, password):
        """This database as another user of its server sees it (for run,
        send and ack; closing it is this one's)."""
        other = copy.copy(self)
        u = urllib.parse.urlsplit(self.url)
        other.url = urllib.parse.urlunsplit(u._replace(
            netloc=f"{user}:{password}@{u.hostname}:{u.port}"))
        return other

    def sqlq(self, *args, ok=True):
        """Runs the sqlq program on this database; its stdout."""
        p = subprocess.run([SQLQ, "--db", self.url, "--json", *args],
                           capture_output=True, text=True, timeout=60)
        if ok and p.returncode != 0:
            raise AssertionError(f"sqlq {args}: {p.returncode} {p.stderr}")
        return p.stdout

    def stats(self, queue):
        return json.loads(self.sqlq("queue", "stats", queue))

    def claim_all(self, queue):
        out = self.sqlq("claim", queue, "--max", "100")
        return [json.loads(line) for line in out.splitlines() if line]

    # The application's client of each engine.

    def run(self, statements, commit=True, params=None):
        if ENGINE == "sqlite":
            return self._sqlite(statements, commit, params)
        if ENGINE == "postgres":
            return self._psql(statements, commit)
        return self._mariadb(statements, commit)

    def _sqlite(self, statements, commit, params):
        c = sqlite3.connect(self.path, timeout=30)
        try:
            rows = None
            for i, s in enumerate(statements):
                try:
                    cur = c.execute(s, (params or {}).get(i, ()))
                    rows = cur.fetchall()
                except sqlite3.Error as e:
                    c.rollback()
                    raise SqlError(None, str(e))
            c.commit() if commit else c.rollback()
            return rows
        finally:
            c.close()

    def _psql(self, statements, commit):
        script = "\\set ON_ERROR_STOP 1\n\\set VERBOSITY verbose\nBEGIN;\n"
        script += "".join(s + ";\n" for s in statements)
        script += "COMMIT;\n" if commit else "ROLLBACK;\n"
        p = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-d", self.url],
                           input=script, capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 0:
            # VERBOSITY verbose: "ERROR:  SQ404: sqlq: queue 'x' not found"
            line = next(l for l in p.stderr.splitlines() if "ERROR:" in l)
            text = line.split("ERROR:", 1)[1].strip()
            state, _, message = text.partition(": ")
            raise SqlError(state, message)
        lines = [l for l in p.stdout.splitlines() if l]
        return [tuple(l.split("|")) for l in lines]

    def _mariadb(self, statements, commit):
        u = urllib.parse.urlsplit(self.url)
        script = "START TRANSACTION;\n"
        script += "".join(s + ";\n" for s in statements)
        script += "COMMIT;\n" if commit else "ROLLBACK;\n"
        p = subprocess.run(
            ["mariadb", "--no-defaults", "-h", u.hostname, "-P",
             str(u.port or 3306), "-u", urllib.parse.unquote(u.username),
             "-p" + urllib.parse.unquote(u.password or ""), "-N", "-B",
             u.path.lstrip("/")],
            input=script, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            # "ERROR 1644 (45404) at line 2: sqlq: queue 'x' not found"
            line = next(l for l in p.stderr.splitlines() if "ERROR" in l)
            state = line[line.index("(") + 1:line.index(")")]
            raise SqlError(state, line.split(": ", 1)[1])
        lines = [l for l in p.stdout.splitlines() if l]
        return [tuple(l.split("\t")) for l in lines]

    # The SQL-level API, one statement per call, in each engine's form.

    def send(self, queue, payload, priority=0, headers=None, dedup=None,
             group=None, delay_ms=0):
        q = self.quote
        h = json.dumps(headers) if headers is not None else None
        if ENGINE == "postgres":
            return (f"SELECT sqlq.send({q(queue)}, {q(payload)}::text, "
                    f"priority => {priority}, delay_ms => {delay_ms}, "
                    f"headers => {q(h)}::jsonb, dedup_key => {q(dedup)}, "
                    f"\"group\" => {q(group)})")
        if ENGINE == "mysql":
            return (f"CALL sqlq_send_with({q(queue)}, {q(payload)}, "
                    f"{priority}, {delay_ms}, {q(h)}, {q(dedup)}, {q(group)}, "
                    "NULL)")
        return ("INSERT INTO sqlq_send (queue, payload, priority, delay_ms, "
                f"headers, dedup_key, \"group\") VALUES ({q(queue)}, "
                f"{q(payload)}, {priority}, {delay_ms}, {q(h)}, {q(dedup)}, "
                f"{q(group)})")

    def ack(self, queue, receipt):
        q = self.quote
        if ENGINE == "postgres":
            return f"SELECT sqlq.ack({q(queue)}, {q(receipt)})"
        if ENGINE == "mysql":
            return f"CALL sqlq_ack({q(queue)}, {q(receipt)})"
        return (f"INSERT INTO sqlq_ack (queue, receipt) VALUES ({q(queue)}, "
                f"{q(receipt)})")

    def publish(self, topic, payload, headers=None, dedup=None, priority=0):
        """A publish; PostgreSQL and MariaDB return a row per delivery
        (queue, id, duplicate), SQLite none."""
        q = self.quote
        h = json.dumps(headers) if headers is not None else None
        if ENGINE == "postgres":
            return (f"SELECT * FROM sqlq.publish({q(topic)}, {q(payload)}::text, "
                    f"priority => {priority}, headers => {q(h)}::jsonb, "
                    f"dedup_key => {q(dedup)})")
        if ENGINE == "mysql":
            return (f"CALL sqlq_publish_with({q(topic)}, {q(payload)}, "
                    f"{priority}, 0, {q(h)}, {q(dedup)}, NULL, NULL)")
        return ("INSERT INTO sqlq_publish (topic, payload, priority, headers, "
                f"dedup_key) VALUES ({q(topic)}, {q(payload)}, {priority}, "
                f"{q(h)}, {q(dedup)})")

    @staticmethod
    def deliveries(rows):
        """A publish's rows as (queue, id, duplicate), in their order."""
        return [(r[0], int(r[1]), r[2] in ("t", "1")) for r in rows]

    def send_lib(self, queue, payload, *args):
        """The library's send (the sqlq program); the message's id."""
        return json.loads(self.sqlq("send", queue, payload, *args))["id"]

    def message(self, queue, id):
        return json.loads(self.sqlq("message", "get", queue, str(id)))

    @staticmethod
    def quote(v):
        if v is None:
            return "NULL"
        return "'" + str(v).replace("'", "''") + "'"

    def errors(self):
        """The SQLSTATEs of the API's errors on this engine (SQLite: None)."""
        if ENGINE == "postgres":
            return {"invalid": "SQ400", "not_found": "SQ404",
                    "stale": "SQ409", "too_large": "SQ413"}
        if ENGINE == "mysql":
            return {"invalid": "45400", "not_found": "45404",
                    "stale": "45409", "too_large": "45413"}
        return {k: None for k in ("invalid", "not_found", "stale",
                                  "too_large")}


# What a consumer sees of a message, without what differs between any two
# messages (id, receipt, times).
def seen(m):
    return {k: v for k, v in m.items()
            if k not in ("id", "receipt", "enqueued_at", "lease_expires_at")}


class SqlApiTest(unittest.TestCase):
    def setUp(self):
        self.db = Database()
        self.addCleanup(self.db.close)
        self.db.sqlq("queue", "create", "emails")
        self.db.run(["CREATE TABLE orders (id INTEGER PRIMARY KEY, what "
                     "VARCHAR(100))"])

    def orders(self):
        return self.db.run(["SELECT count(*) FROM orders"])[0][0]

    def test_a_send_commits_with_the_applications_rows(self):
        self.db.run(["INSERT INTO orders VALUES (1, 'book')",
                     self.db.send("emails", "order 1 confirmed")])
        self.assertEqual(int(self.orders()), 1)
        got = self.db.claim_all("emails")
        self.assertEqual([m["payload"] for m in got], ["order 1 confirmed"])
        self.assertEqual(self.db.stats("emails")["sends"], 1)

    def test_a_send_rolls_back_with_the_applications_rows(self):
        self.db.run(["INSERT INTO orders VALUES (2, 'pen')",
                     self.db.send("emails", "order 2 confirmed")],
                    commit=False)
        self.assertEqual(int(self.orders()), 0)
        self.assertEqual(self.db.claim_all("emails"), [])
        stats = self.db.stats("emails")
        self.assertEqual((stats["sends"], stats["ready"]), (0, 0))

    def test_sql_and_library_sends_look_the_same_to_consumers(self):
        self.db.sqlq("queue", "create", "ordered", "--groups", "ordered")
        shapes = [
            {"payload": "plain"},
            {"payload": "urgent", "priority": 7},
            {"payload": "traced", "headers": {"traceparent": "00-ab-cd-01",
                                              "content-type": "text/plain"}},
            {"payload": "keyed", "dedup": "key-1"},
        ]
        for i, shape in enumerate(shapes):
            lib = ["send", "emails", shape["payload"]]
            if "priority" in shape:
                lib += ["--priority", str(shape["priority"])]
            for k, v in shape.get("headers", {}).items():
                lib += ["--header", f"{k}={v}"]
            sql = dict(shape)
            if "dedup" in shape:
                lib += ["--dedup", shape["dedup"] + "-lib"]
                sql["dedup"] = shape["dedup"] + "-sql"
            self.db.sqlq(*lib)
            self.db.run([self.db.send("emails", **sql)])
            got = self.db.claim_all("emails")
            self.assertEqual(len(got), 2, shape)
            self.assertEqual(seen(got[0]), seen(got[1]), shape)
            self.assertEqual(got[0]["payload"], shape["payload"])
        # Groups: an ordered queue hands out one message of a group at a
        # time, whichever way it was sent.
        self.db.sqlq("send", "ordered", "first", "--group", "acct-7")
        self.db.run([self.db.send("ordered", "second", group="acct-7")])
        first = self.db.claim_all("ordered")
        self.assertEqual([m["payload"] for m in first], ["first"])
        self.db.sqlq("ack", "ordered", first[0]["receipt"])
        second = self.db.claim_all("ordered")
        self.assertEqual([m["payload"] for m in second], ["second"])
        self.assertEqual(seen(second[0]) | {"payload": "first"},
                         seen(first[0]))
        stats = self.db.stats("emails")
        self.assertEqual(stats["sends"], 2 * len(shapes))
        self.assertEqual(stats["claims"], 2 * len(shapes))

    def test_a_dedup_key_taken_by_a_library_send_is_a_duplicate(self):
        out = self.db.sqlq("send", "emails", "first", "--dedup", "k")
        first_id = json.loads(out)["id"]
        rows = self.db.run([self.db.send("emails", "second", dedup="k")])
        if ENGINE != "sqlite":  # SQLite's view returns no id
            self.assertEqual(int(rows[0][0]), first_id)
        got = self.db.claim_all("emails")
        self.assertEqual([m["payload"] for m in got], ["first"])
        self.assertEqual(self.db.stats("emails")["sends"], 1)

    def test_a_dedup_key_acked_by_sql_is_free_for_either_send(self):
        # The key goes with its message, whoever acks it (on MariaDB the
        # trigger of schema version 25), and the SQL send and the library
        # see the same keys.
        self.db.run([self.db.send("emails", "first", dedup="k")])
        out = self.db.sqlq("send", "emails", "dup", "--dedup", "k")
        self.assertTrue(json.loads(out)["duplicate"])
        [m] = self.db.claim_all("emails")
        self.db.run([self.db.ack("emails", m["receipt"])])
        out = self.db.sqlq("send", "emails", "second", "--dedup", "k")
        self.assertFalse(json.loads(out).get("duplicate", False))
        self.db.run([self.db.send("emails", "dup", dedup="k")])
        [m] = self.db.claim_all("emails")
        self.assertEqual(m["payload"], "second")
        self.db.sqlq("ack", "emails", m["receipt"])
        self.db.run([self.db.send("emails", "third", dedup="k")])
        got = self.db.claim_all("emails")
        self.assertEqual([m["payload"] for m in got], ["third"])
        self.assertEqual(self.db.stats("emails")["sends"], 3)

    def test_a_key_left_behind_by_its_message_is_taken_over(self):
        if ENGINE != "mysql":
            self.skipTest("only MariaDB keeps keys in a table of their own")
        self.db.run([self.db.send("emails", "first", dedup="k")])
        # A delete the key's trigger does not see: in this session a
        # temporary table of the same name stands in for the key table.
        self.db.run(["CREATE TEMPORARY TABLE sqlq_dedup_keys (queue_id "
                     "BIGINT, dedup VARBINARY(255), message_id BIGINT)",
                     "DELETE FROM sqlq_messages",
                     "DROP TEMPORARY TABLE sqlq_dedup_keys"])
        rows = self.db.run([self.db.send("emails", "second", dedup="k")])
        self.assertEqual(rows[0][1], "0")  # not a duplicate
        got = self.db.claim_all("emails")
        self.assertEqual([m["payload"] for m in got], ["second"])
        self.assertEqual(int(rows[0][0]), got[0]["id"])
        out = self.db.sqlq("send", "emails", "third", "--dedup", "k")
        self.assertTrue(json.loads(out)["duplicate"])

    def test_an_empty_dedup_key_is_no_key(self):
        self.db.run([self.db.send("emails", "one", dedup=""),
                     self.db.send("emails", "two", dedup="")])
        self.db.sqlq("send", "emails", "three", "--dedup", "")
        got = self.db.claim_all("emails")
        self.assertEqual([m["payload"] for m in got], ["one", "two", "three"])
        self.assertEqual(self.db.stats("emails")["sends"], 3)

    def test_a_dedup_window_holds_the_key_after_an_sql_ack(self):
        self.db.sqlq("queue", "create", "once", "--unique-for", "1h")
        self.db.run([self.db.send("once", "first", dedup="invoice-9")])
        [m] = self.db.claim_all("once")
        self.db.run([self.db.ack("once", m["receipt"])])
        self.db.run([self.db.send("once", "again", dedup="invoice-9")])
        self.db.sqlq("send", "once", "again by the library", "--dedup",
                     "invoice-9")
        self.assertEqual(self.db.claim_all("once"), [])
        stats = self.db.stats("once")
        self.assertEqual((stats["sends"], stats["acks"]), (1, 1))

    def test_an_ack_by_receipt_and_its_refusals(self):
        self.db.sqlq("send", "emails", "one")
        self.db.sqlq("send", "emails", "two")
        one, two = self.db.claim_all("emails")
        errors = self.db.errors()
        # Another token for the same message and attempt: stale, nothing
        # changes.
        token = two["receipt"].rsplit("-", 1)[1]
        other = "%016x" % (int(token, 16) ^ 1)
        stale = two["receipt"].rsplit("-", 1)[0] + "-" + other
        with self.assertRaises(SqlError) as e:
            self.db.run([self.db.ack("emails", stale)])
        self.assertEqual(e.exception.state, errors["stale"])
        self.assertIn("stale receipt", e.exception.message)
        with self.assertRaises(SqlError) as e:
            self.db.run([self.db.ack("emails", "not-a-receipt")])
        self.assertEqual(e.exception.state, errors["invalid"])
        self.assertIn("malformed receipt", e.exception.message)
        # An ack rolled back acks nothing.
        self.db.run([self.db.ack("emails", one["receipt"])], commit=False)
        self.assertEqual(self.db.stats("emails")["leased"], 2)
        self.db.run(["INSERT INTO orders VALUES (3, 'done')",
                     self.db.ack("emails", one["receipt"])])
        stats = self.db.stats("emails")
        self.assertEqual((stats["leased"], stats["acks"]), (1, 1))
        with self.assertRaises(SqlError) as e:
            self.db.run([self.db.ack("emails", one["receipt"])])
        self.assertEqual(e.exception.state, errors["not_found"])
        # The library's ack of the other still works: its lease is intact.
        self.db.sqlq("ack", "emails", two["receipt"])
        self.assertEqual(self.db.stats("emails")["acks"], 2)

    def test_bad_input_is_refused_and_stores_nothing(self):
        self.db.sqlq("queue", "create", "small", "--max-payload", "10")
        errors = self.db.errors()
        cases = [
            (self.db.send("nope", "x"), "not_found", "queue"),
            (self.db.send("small", "x" * 11), "too_large", "payload"),
            (self.db.send("emails", "x", headers={"bad name": "v"}),
             "invalid", "header name"),
            (self.db.send("emails", "x", headers={"n": 1}), "invalid",
             "header" if ENGINE != "sqlite" else "headers must be"),
            (self.db.send("emails", "x", delay_ms=-1), "invalid", "delay"),
            (self.db.send("emails", "x", dedup="k" * 256), "invalid",
             "dedup key"),
        ]
        for statement, kind, words in cases:
            with self.assertRaises(SqlError, msg=statement) as e:
                self.db.run(["INSERT INTO orders VALUES (4, 'x')", statement])
            self.assertEqual(e.exception.state, errors[kind], statement)
            self.assertIn(words, e.exception.message, statement)
        self.assertEqual(int(self.orders()), 0)
        for q in ("emails", "small"):
            self.assertEqual(self.db.stats(q)["sends"], 0)

    def test_a_claim_waiting_in_another_process_wakes_at_commit(self):
        server = Server(self.db.url)
        self.addCleanup(server.stop)
        # Eight rounds: a claim parks in sqlq serve, a send commits; the
        # claim must return well before the server's once-a-second look
        # would have found the message (by luck eight times: under 0.4 %).
        # Timed from when the client that committed has returned: its own
        # start-up, which a loaded machine can stretch past half a second,
        # is not the server's to answer for.
        for i in range(8):
            result = {}

            def claim():
                result["reply"] = server.post(
                    "/v1/queues/emails/claim", {"max": 1, "wait_ms": 20000})
                result["at"] = time.monotonic()

            t = threading.Thread(target=claim)
            t.start()
            server.wait_parked(1)
            self.db.run([self.db.send("emails", f"wake {i}")])
            committed = time.monotonic()
            t.join(30)
            self.assertFalse(t.is_alive())
            [m] = result["reply"]["messages"]
            self.assertEqual(m["payload"], f"wake {i}")
            self.assertLess(result["at"] - committed, 0.5,
                            "the claim did not wake at the commit")
            server.post("/v1/queues/emails/ack", {"receipt": m["receipt"]})

    # Dependencies: an ack in SQL releases what waits for the message.

    def test_an_sql_ack_releases_what_waits_for_the_message(self):
        for q in ("fetch", "resize"):
            self.db.sqlq("queue", "create", q)
        a = self.db.send_lib("fetch", "a.png")
        b = self.db.send_lib("fetch", "b.png")
        after_a = self.db.send_lib("resize", "after a", "--depends-on", str(a))
        after_both = self.db.send_lib("resize", "after a and b",
                                      "--depends-on", f"{a},{b}")
        got = {m["payload"]: m for m in self.db.claim_all("fetch")}
        self.assertEqual(self.db.stats("resize")["waiting"], 2)
        # Rolled back: the ack and the release both.
        self.db.run([self.db.ack("fetch", got["a.png"]["receipt"])],
                    commit=False)
        self.assertEqual(self.db.claim_all("resize"), [])
        self.assertEqual(self.db.message("resize", after_a)["waits_for"], [a])
        # Committed with the application's rows: the one that waited for a
        # alone is ready, the other waits for b only.
        self.db.run(["INSERT INTO orders VALUES (5, 'a done')",
                     self.db.ack("fetch", got["a.png"]["receipt"])])
        [m] = self.db.claim_all("resize")
        self.assertEqual((m["id"], m["payload"]), (after_a, "after a"))
        self.assertEqual(self.db.message("resize", after_both)["waits_for"],
                         [b])
        self.db.run([self.db.ack("fetch", got["b.png"]["receipt"])])
        [m] = self.db.claim_all("resize")
        self.assertEqual((m["id"], m["payload"]), (after_both,
                                                   "after a and b"))
        stats = self.db.stats("resize")
        self.assertEqual((stats["waiting"], stats["ready"]), (0, 0))
        self.assertEqual(self.db.stats("fetch")["acks"], 2)

    def acks_at_once(self, first_ack, second_ack):
        """Two transactions of the application's: the first acks, the second
        acks and waits for the first's locks; the first commits, then the
        second."""
        first, second = Session(self.db), Session(self.db)
        first.execute(first_ack)
        t = threading.Thread(target=second.execute, args=(second_ack,))
        t.start()
        wait_blocked(self.db)
        first.commit()
        t.join(60)
        self.assertFalse(t.is_alive())
        second.commit()

    # Batches: an ack in SQL counts a member in its batch.

    def album(self, batch_id, members):
        """Batch `batch_id`: `members` in queue tiles, the callback "album
        ready" (with the header region=eu) in queue mosaics; the members
        as claimed, by payload."""
        self.db.sqlq("batch", "send", "mosaics", "album ready", "--id",
                     batch_id, "--callback-header", "region=eu",
                     *[a for m in members for a in ("--member", "tiles=" + m)])
        return {m["payload"]: m for m in self.db.claim_all("tiles")}

    def batch_status(self, batch_id):
        return json.loads(self.db.sqlq("batch", "status", batch_id))

    def test_an_sql_ack_counts_a_batch_member_and_the_last_releases_the_callback(
            self):
        for q in ("tiles", "mosaics"):
            self.db.sqlq("queue", "create", q)
        got = self.album("album-7", ["a.png", "b.png", "c.png"])
        # Rolled back: not acked, not counted.
        self.db.run([self.db.ack("tiles", got["a.png"]["receipt"])],
                    commit=False)
        status = self.batch_status("album-7")
        self.assertEqual((status["completed"], status["pending"]), (0, 3))
        # Committed with the application's rows: counted, the callback
        # still waits for the other two.
        self.db.run(["INSERT INTO orders VALUES (9, 'a done')",
                     self.db.ack("tiles", got["a.png"]["receipt"])])
        self.assertEqual(int(self.orders()), 1)
        status = self.batch_status("album-7")
        self.assertEqual((status["completed"], status["pending"],
                          status["done"]), (1, 2, False))
        self.assertEqual(self.db.claim_all("mosaics"), [])
        # One dies through the library; the last, acked in SQL, ends the
        # batch and releases its callback with the counts.
        self.db.sqlq("nack", "tiles", got["c.png"]["receipt"], "--dead",
                     "--error", "corrupt")
        self.db.run([self.db.ack("tiles", got["b.png"]["receipt"])])
        status = self.batch_status("album-7")
        self.assertEqual((status["completed"], status["dead"],
                          status["cancelled"], status["pending"],
                          status["done"]), (2, 1, 0, 0, True))
        [cb] = self.db.claim_all("mosaics")
        self.assertEqual(cb["payload"], "album ready")
        self.assertEqual(cb["batch"], {
            "id": "album-7", "callback": True, "total": 3, "completed": 2,
            "dead": 1, "cancelled": 0})
        self.assertEqual(self.db.stats("tiles")["acks"], 2)
        # The same batch acked through the library: its callback is the
        # same to a consumer.
        lib = self.album("album-8", ["a.png", "b.png", "c.png"])
        self.db.sqlq("ack", "tiles", lib["a.png"]["receipt"])
        self.db.sqlq("nack", "tiles", lib["c.png"]["receipt"], "--dead",
                     "--error", "corrupt")
        self.db.sqlq("ack", "tiles", lib["b.png"]["receipt"])
        [lib_cb] = self.db.claim_all("mosaics")
        self.assertEqual(lib_cb["batch"], dict(cb["batch"], id="album-8"))
        self.assertEqual(lib_cb.get("headers"), cb.get("headers"))
        self.assertEqual(cb.get("headers"), {"region": "eu"})

    def test_sql_acks_of_a_batchs_last_two_members_at_once_count_both(self):
        for q in ("tiles", "mosaics"):
            self.db.sqlq("queue", "create", q)
        got = self.album("album-9", ["a.png", "b.png"])
        # The second ack waits for the first's lock on the callback, then
        # counts on the batch's row as the first left it.
        self.acks_at_once(self.db.ack("tiles", got["a.png"]["receipt"]),
                          self.db.ack("tiles", got["b.png"]["receipt"]))
        status = self.batch_status("album-9")
        self.assertEqual((status["completed"], status["done"]), (2, True))
        [cb] = self.db.claim_all("mosaics")
        self.assertEqual(cb["batch"], {
            "id": "album-9", "callback": True, "total": 2, "completed": 2,
            "dead": 0, "cancelled": 0})
        self.assertEqual(self.db.claim_all("mosaics"), [])

    def test_acks_of_two_parents_at_once_release_their_child_once(self):
        for q in ("parts", "report"):
            self.db.sqlq("queue", "create", q)
        one = self.db.send_lib("parts", "one")
        two = self.db.send_lib("parts", "two")
        child = self.db.send_lib("report", "sum", "--depends-on",
                                 f"{one},{two}")
        got = {m["id"]: m for m in self.db.claim_all("parts")}
        # The second ack waits for the first's locks, then reads the child
        # as the first left it.
        self.acks_at_once(self.db.ack("parts", got[one]["receipt"]),
                          self.db.ack("parts", got[two]["receipt"]))
        [m] = self.db.claim_all("report")
        self.assertEqual((m["id"], m["payload"]), (child, "sum"))
        self.assertEqual(self.db.claim_all("report"), [])
        stats = self.db.stats("report")
        self.assertEqual((stats["waiting"], stats["leased"]), (0, 1))
        self.assertEqual(self.db.stats("parts")["acks"], 2)

    # Topics: a publish in SQL.

    def topic(self):
        """Topic orders: emails and audit take every message, eu only those
        with the header region=eu."""
        self.db.sqlq("topic", "create", "orders")
        for q in ("audit", "eu"):
            self.db.sqlq("queue", "create", q)
        self.db.sqlq("topic", "subscribe", "orders", "emails")
        self.db.sqlq("topic", "subscribe", "orders", "audit")
        self.db.sqlq("topic", "subscribe", "orders", "eu", "--filter",
                     "region=eu")

    def test_a_publish_stores_the_message_in_each_queue_it_matches(self):
        self.topic()
        rows = self.db.run(["INSERT INTO orders VALUES (6, 'x')",
                            self.db.publish("orders", "order 6",
                                            headers={"region": "us"},
                                            priority=2)])
        by_queue = {q: self.db.claim_all(q) for q in ("emails", "audit", "eu")}
        self.assertEqual([m["payload"] for m in by_queue["emails"]],
                         ["order 6"])
        self.assertEqual([m["payload"] for m in by_queue["audit"]],
                         ["order 6"])
        self.assertEqual(by_queue["eu"], [])
        if ENGINE != "sqlite":  # SQLite's view returns nothing
            self.assertEqual(self.db.deliveries(rows), [
                ("audit", by_queue["audit"][0]["id"], False),
                ("emails", by_queue["emails"][0]["id"], False)])
        # The library's publish of the same message: the same deliveries,
        # and consumers cannot tell the two apart.
        out = self.db.sqlq("topic", "publish", "orders", "order 6",
                           "--priority", "2", "--header", "region=us")
        lib = [json.loads(line) for line in out.splitlines() if line]
        self.assertEqual([d["queue"] for d in lib], ["audit", "emails"])
        for q in ("emails", "audit"):
            [m] = self.db.claim_all(q)
            self.assertEqual(seen(m), seen(by_queue[q][0]), q)
        # The filter's value, case and all: only region=eu reaches eu.
        self.db.run([self.db.publish("orders", "order 7",
                                     headers={"region": "EU"})])
        self.db.run([self.db.publish("orders", "order 8",
                                     headers={"region": "eu", "vip": "1"})])
        self.assertEqual([m["payload"] for m in self.db.claim_all("eu")],
                         ["order 8"])
        self.assertEqual(self.db.stats("emails")["sends"], 4)
        self.assertEqual(self.db.stats("eu")["sends"], 1)

    def test_a_publish_rolls_back_and_keeps_each_queues_dedup(self):
        self.topic()
        self.db.run([self.db.publish("orders", "lost")], commit=False)
        for q in ("emails", "audit"):
            self.assertEqual(self.db.stats(q)["sends"], 0)
        held = self.db.send_lib("emails", "first", "--dedup", "order-9")
        rows = self.db.run([self.db.publish("orders", "again",
                                            dedup="order-9")])
        audit = self.db.claim_all("audit")
        self.assertEqual([m["payload"] for m in audit], ["again"])
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["first"])
        if ENGINE != "sqlite":
            self.assertEqual(self.db.deliveries(rows), [
                ("audit", audit[0]["id"], False), ("emails", held, True)])
        self.assertEqual(self.db.stats("emails")["sends"], 1)

    def test_a_publish_refused_stores_nothing(self):
        self.topic()
        self.db.sqlq("queue", "create", "small", "--max-payload", "10")
        self.db.sqlq("topic", "subscribe", "orders", "small")
        self.db.sqlq("topic", "create", "quiet")
        errors = self.db.errors()
        cases = [
            (self.db.publish("nope", "x"), "not_found", "topic"),
            (self.db.publish("emails", "x"), "not_found",
             "topic" if ENGINE == "sqlite" else "is a queue, not a topic"),
            # Too large for one subscriber: refused for all.
            (self.db.publish("orders", "x" * 11), "too_large",
             "queue 'small'" if ENGINE != "sqlite" else "subscribed"),
            (self.db.publish("orders", "x", headers={"bad name": "v"}),
             "invalid", "header name"),
            # Checked whether or not a queue takes it.
            (self.db.publish("quiet", "x", headers={"bad name": "v"}),
             "invalid", "header name"),
            (self.db.publish("quiet", "x", dedup="k" * 256), "invalid",
             "dedup key"),
        ]
        for statement, kind, words in cases:
            with self.assertRaises(SqlError, msg=statement) as e:
                self.db.run(["INSERT INTO orders VALUES (7, 'x')", statement])
            self.assertEqual(e.exception.state, errors[kind], statement)
            self.assertIn(words, e.exception.message, statement)
        self.assertEqual(int(self.orders()), 0)
        for q in ("emails", "audit", "small"):
            self.assertEqual(self.db.stats(q)["sends"], 0, q)
        # No subscriber: nothing stored, and no error.
        rows = self.db.run(["INSERT INTO orders VALUES (8, 'x')",
                            self.db.publish("quiet", "to no one")])
        self.assertEqual(int(self.orders()), 1)
        if ENGINE != "sqlite":
            self.assertEqual(rows, [])

    def test_claims_waiting_in_another_process_wake_at_a_release_or_publish(self):
        for q in ("fetch", "resize"):
            self.db.sqlq("queue", "create", q)
        self.db.sqlq("topic", "create", "orders")
        self.db.sqlq("topic", "subscribe", "orders", "emails")
        server = Server(self.db.url)
        self.addCleanup(server.stop)
        # As above, eight rounds each: a claim parks in sqlq serve, an ack
        # that releases a waiting message (or a publish) commits.
        for i in range(16):
            release = i % 2 == 0
            queue = "resize" if release else "emails"
            if release:
                parent = self.db.send_lib("fetch", f"parent {i}")
                self.db.send_lib("resize", f"child {i}", "--depends-on",
                                 str(parent))
                [p] = self.db.claim_all("fetch")
            result = {}

            def claim():
                result["reply"] = server.post(
                    f"/v1/queues/{queue}/claim", {"max": 1, "wait_ms": 20000})
                result["at"] = time.monotonic()

            t = threading.Thread(target=claim)
            t.start()
            server.wait_parked(1)
            if release:
                self.db.run([self.db.ack("fetch", p["receipt"])])
            else:
                self.db.run([self.db.publish("orders", f"published {i}")])
            committed = time.monotonic()
            t.join(30)
            self.assertFalse(t.is_alive())
            [m] = result["reply"]["messages"]
            self.assertEqual(m["payload"],
                             f"child {i}" if release else f"published {i}")
            self.assertLess(result["at"] - committed, 0.5,
                            f"the claim did not wake at the commit ({m})")
            server.post(f"/v1/queues/{queue}/ack", {"receipt": m["receipt"]})


@unittest.skipUnless(ENGINE == "postgres", "psycopg is PostgreSQL's")
class PsycopgTest(unittest.TestCase):
    """The functions from psycopg (Debian's python3-psycopg), with bound
    parameters of every payload type, as a Python application calls them."""

    def setUp(self):
        import psycopg
        self.psycopg = psycopg
        self.db = Database()
        self.addCleanup(self.db.close)
        self.db.sqlq("queue", "create", "emails")
        # Autocommit: each `with transaction()` is a transaction of its own.
        self.conn = psycopg.connect(self.db.url, autocommit=True)
        self.addCleanup(self.conn.close)
        with self.conn.transaction():
            self.conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")

    def test_sends_in_the_applications_transactions(self):
        from psycopg.types.json import Jsonb
        c = self.conn
        with c.transaction():
            c.execute("INSERT INTO orders VALUES (%s)", (1,))
            text_id = c.execute("SELECT sqlq.send(%s, %s, priority => %s)",
                                ("emails", "text payload", 3)).fetchone()[0]
            bytes_id = c.execute("SELECT sqlq.send(%s, %s)",
                                 ("emails", b"\x00\xffbytes")).fetchone()[0]
            json_ids = [r[0] for r in c.execute(
                "SELECT * FROM sqlq.send_batch_json(%s, %s)",
                ("emails", [Jsonb([1]), Jsonb("two")])).fetchall()]
            bytes_ids = [r[0] for r in c.execute(
                "SELECT * FROM sqlq.send_batch_bytes(%s, %s)",
                ("emails", [b"\x01", b"\x02"])).fetchall()]
            json_id = c.execute(
                "SELECT sqlq.send(%s, %s, headers => %s)",
                ("emails", Jsonb({"n": 1}), Jsonb({"trace": "t1"}))
            ).fetchone()[0]
            batch = [r[0] for r in c.execute(
                "SELECT * FROM sqlq.send_batch(%s, %s)",
                ("emails", ["b1", "b2", "b3"])).fetchall()]
        ids = [text_id, bytes_id, json_id, *batch, *json_ids, *bytes_ids]
        self.assertEqual(len(set(ids)), 10)
        self.assertEqual(batch, sorted(batch))
        # A transaction that fails after its send leaves nothing.
        with self.assertRaises(self.psycopg.errors.UniqueViolation):
            with c.transaction():
                c.execute("SELECT sqlq.send(%s, %s)", ("emails", "lost"))
                c.execute("INSERT INTO orders VALUES (%s)", (1,))
        with self.assertRaises(self.psycopg.Error) as e:
            with c.transaction():
                c.execute("SELECT sqlq.send(%s, %s)", ("nope", "x"))
        self.assertEqual(e.exception.sqlstate, "SQ404")
        got = {m["id"]: m for m in self.db.claim_all("emails")}
        self.assertEqual(sorted(got), sorted(ids))
        self.assertEqual(got[text_id]["payload"], "text payload")
        self.assertEqual(got[text_id]["priority"], 3)
        self.assertEqual(got[json_id]["payload"], {"n": 1})
        self.assertEqual(got[json_id]["headers"],
                         {"trace": "t1", "content-type": "application/json"})
        self.assertEqual([got[i]["payload"] for i in batch],
                         ["b1", "b2", "b3"])
        self.assertEqual([got[i]["payload"] for i in json_ids], [[1], "two"])
        self.assertEqual(got[json_ids[0]]["headers"],
                         {"content-type": "application/json"})
        self.assertEqual(self.db.stats("emails")["sends"], 10)
        stored = c.execute("SELECT payload FROM sqlq_messages WHERE id = %s",
                           (bytes_id,)).fetchone()[0]
        self.assertEqual(bytes(stored), b"\x00\xffbytes")
        with c.transaction():
            for m in got.values():
                c.execute("SELECT sqlq.ack(%s, %s)", ("emails", m["receipt"]))
        self.assertEqual(self.db.stats("emails")["acks"], 10)

    def test_publish_and_an_ack_that_releases_in_the_applications_transactions(self):
        from psycopg.types.json import Jsonb
        c = self.conn
        for args in (("queue", "create", "audit"), ("queue", "create", "later"),
                     ("topic", "create", "orders"),
                     ("topic", "subscribe", "orders", "emails"),
                     ("topic", "subscribe", "orders", "audit", "--filter",
                      "region=eu")):
            self.db.sqlq(*args)
        with c.transaction():
            c.execute("INSERT INTO orders VALUES (%s)", (1,))
            rows = c.execute(
                "SELECT * FROM sqlq.publish(%s, %s, headers => %s)",
                ("orders", Jsonb({"order": 1}), Jsonb({"region": "eu"}))
            ).fetchall()
            bytes_rows = c.execute("SELECT * FROM sqlq.publish(%s, %s)",
                                   ("orders", b"\x00\x01")).fetchall()
        self.assertEqual([(q, dup) for q, _, dup in rows],
                         [("audit", False), ("emails", False)])
        self.assertEqual([(q, dup) for q, _, dup in bytes_rows],
                         [("emails", False)])
        [audit] = self.db.claim_all("audit")
        self.assertEqual((audit["id"], audit["payload"]), (rows[0][1],
                                                           {"order": 1}))
        self.assertEqual(audit["headers"], {"region": "eu",
                                            "content-type": "application/json"})
        emails = self.db.claim_all("emails")
        self.assertEqual([m["id"] for m in emails],
                         [rows[1][1], bytes_rows[0][1]])
        # A job that waits for the published one: the ack in the
        # application's transaction releases it.
        later = json.loads(self.db.sqlq("send", "later", "after", "--depends-on",
                                        str(audit["id"])))["id"]
        # Not at REPEATABLE READ: a snapshot taken before a link could miss it.
        with self.assertRaises(self.psycopg.Error) as e:
            with c.transaction():
                c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                c.execute("SELECT sqlq.ack(%s, %s)", ("audit", audit["receipt"]))
        self.assertEqual(e.exception.sqlstate, "SQ400")
        self.assertIn("REPEATABLE READ", str(e.exception))
        self.assertEqual(self.db.claim_all("later"), [])
        with c.transaction():
            c.execute("INSERT INTO orders VALUES (%s)", (2,))
            c.execute("SELECT sqlq.ack(%s, %s)", ("audit", audit["receipt"]))
        [m] = self.db.claim_all("later")
        self.assertEqual((m["id"], m["payload"]), (later, "after"))

@unittest.skipUnless(ENGINE == "postgres", "search_path is PostgreSQL's")
class SearchPathTest(unittest.TestCase):
    """The functions run with the caller's privileges, so what their names
    find must not be the caller's search_path's choice: not a schema named
    after the caller, which another role may have made, and not the
    caller's temporary tables."""

    def setUp(self):
        import psycopg
        self.psycopg = psycopg
        self.db = Database()
        self.addCleanup(self.db.close)
        self.db.sqlq("queue", "create", "emails")
        self.dbname = urllib.parse.urlsplit(self.db.url).path.lstrip("/")
        self.admin = psycopg.connect(self.db.url, autocommit=True)
        self.addCleanup(self.admin.close)

    def role(self, name, db=None, admin=None):
        """A login role with password pw, dropped with what it owns; its
        connection to `db` (this test's database), whose administrator's
        connection is `admin`."""
        db, admin = db or self.db, admin or self.admin
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pw'")
        self.addCleanup(admin.execute,
                        f"DROP OWNED BY {name}; DROP ROLE {name}")
        conn = self.psycopg.connect(db.as_user(name, "pw").url,
                                    autocommit=True)
        self.addCleanup(conn.close)
        return conn

    def test_a_schema_named_after_the_caller_does_not_capture_its_sends(self):
        suffix = self.dbname[-6:]
        caller = "sqlq_app_" + suffix
        # The caller may send, ack and read the application's secrets.
        app = self.role(caller)
        self.admin.execute(
            f"GRANT USAGE ON SCHEMA sqlq TO {caller}; "
            "CREATE TABLE secrets (secret text); "
            "INSERT INTO secrets VALUES ('the secret'); "
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
            f"public TO {caller}; "
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {caller}")
        # Another role may only create schemas in the database. It makes
        # one named after the caller (first in PostgreSQL's default
        # search_path, "$user", public) with tables named like sqlq's and a
        # trigger that copies the secrets as whoever inserts.
        other = self.role("sqlq_other_" + suffix)
        self.admin.execute(
            f"GRANT CREATE ON DATABASE {self.dbname} TO sqlq_other_{suffix}")
        with self.assertRaises(self.psycopg.errors.InsufficientPrivilege):
            other.execute("SELECT * FROM public.secrets")
        other.execute(f"""
            CREATE SCHEMA {caller};
            SET search_path = {caller};
            CREATE TABLE sqlq_queues (id bigint, name text, kind text,
              max_payload bigint, unique_for_us bigint, group_mode int,
              archive boolean, group_limit int, max_leased int);
            INSERT INTO sqlq_queues VALUES
              (1, 'emails', 'queue', 1048576, 0, 0, false, 0, 0);
            CREATE TABLE sqlq_messages (
              id bigint GENERATED ALWAYS AS IDENTITY, queue_id bigint,
              priority int, ready_us bigint, enqueued_us bigint,
              dedup bytea, payload bytea, headers jsonb, grp bytea,
              token bigint, attempts bigint, worker bytea, errors jsonb);
            CREATE UNIQUE INDEX ON sqlq_messages (queue_id, dedup)
              WHERE dedup IS NOT NULL;
            CREATE TABLE sqlq_counter_deltas (queue_id bigint, sends bigint,
              acks bigint);
            CREATE TABLE loot (secret text);
            CREATE FUNCTION steal() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN
                INSERT INTO {caller}.loot SELECT secret FROM public.secrets;
                RETURN NEW;
              END $$;
            CREATE TRIGGER steal BEFORE INSERT ON sqlq_messages
              FOR EACH ROW EXECUTE FUNCTION steal();
            GRANT USAGE ON SCHEMA {caller} TO PUBLIC;
            GRANT ALL ON ALL TABLES IN SCHEMA {caller} TO PUBLIC""")
        from psycopg.types.json import Jsonb
        with app.transaction():
            ids = [
                app.execute("SELECT sqlq.send('emails', 'text')"
                            ).fetchone()[0],
                app.execute("SELECT sqlq.send('emails', %s)",
                            (Jsonb({"n": 1}),)).fetchone()[0],
                *[r[0] for r in app.execute(
                    "SELECT * FROM sqlq.send_batch('emails', %s)",
                    (["b1", "b2"],)).fetchall()],
            ]
        # The sends reached the queue, and nothing of the other role ran.
        got = self.db.claim_all("emails")
        self.assertEqual([m["id"] for m in got], ids)
        self.assertEqual([m["payload"] for m in got],
                         ["text", {"n": 1}, "b1", "b2"])
        self.assertEqual(got[1]["headers"],
                         {"content-type": "application/json"})
        self.assertEqual(self.db.stats("emails")["sends"], 4)
        with app.transaction():
            for m in got:
                app.execute("SELECT sqlq.ack('emails', %s)", (m["receipt"],))
        self.assertEqual(self.db.stats("emails")["acks"], 4)
        self.assertEqual(other.execute(
            "SELECT (SELECT count(*) FROM loot), "
            "(SELECT count(*) FROM sqlq_messages)").fetchone(), (0, 0))
        # Every function of the API says which path it runs with.
        paths = self.admin.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p WHERE "
            "p.pronamespace = 'sqlq'::regnamespace").fetchall()
        self.assertEqual(len(paths), 15)
        for name, config in paths:
            self.assertEqual(config,
                             ["search_path=pg_catalog, public, pg_temp"], name)

    def test_the_api_is_not_left_in_a_schema_sqlq_another_role_owns(self):
        # A store whose user is no superuser, in a fresh database where
        # another role that may only create schemas made the schema sqlq
        # first and let everyone create in it. Its owner could drop and
        # replace any function in it, and sqlq.send would run its code as
        # each caller.
        db = Database()
        self.addCleanup(db.close)
        dbname = urllib.parse.urlsplit(db.url).path.lstrip("/")
        suffix = dbname[-6:]
        admin = self.psycopg.connect(db.url, autocommit=True)
        self.addCleanup(admin.close)
        other = self.role("sqlq_other_" + suffix, db, admin)
        store_user = "sqlq_store_" + suffix
        self.role(store_user, db, admin)
        admin.execute(f"GRANT CREATE ON DATABASE {dbname} TO {store_user}, "
                      f"sqlq_other_{suffix}; "
                      f"GRANT CREATE ON SCHEMA public TO {store_user}")
        other.execute("CREATE SCHEMA sqlq; "
                      "GRANT USAGE, CREATE ON SCHEMA sqlq TO PUBLIC")
        store = db.as_user(store_user, "pw")
        p = subprocess.run([SQLQ, "--db", store.url, "queue", "create",
                            "emails"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(admin.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = "
            "'sqlq'::regnamespace").fetchone(), (0,))
        # The store works without the API.
        store.sqlq("send", "emails", "by the library")
        self.assertEqual([m["payload"] for m in store.claim_all("emails")],
                         ["by the library"])

    def test_a_temporary_table_named_like_sqlqs_does_not_catch_a_send(self):
        c = self.admin
        with c.transaction():
            c.execute("CREATE TEMPORARY TABLE sqlq_messages "
                      "(LIKE public.sqlq_messages INCLUDING ALL)")
            c.execute("SELECT sqlq.send('emails', 'to the queue')")
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["to the queue"])
        self.assertEqual(
            c.execute("SELECT count(*) FROM pg_temp.sqlq_messages").fetchone(),
            (0,))


@unittest.skipUnless(ENGINE == "mysql", "MariaDB's temporary tables")
class TemporaryTableTest(unittest.TestCase):
    """In MariaDB a session's temporary table stands in for the table of the
    same name in the same database, also inside a routine. The procedures
    run with their definer's rights: whatever the calling session made,
    they must use sqlq's own tables."""

    def setUp(self):
        self.db = Database()
        self.addCleanup(self.db.close)
        self.db.sqlq("queue", "create", "emails")
        self.db.sqlq("queue", "create", "small", "--max-payload", "10")

    def test_a_temporary_table_named_like_sqlqs_does_not_catch_a_send(self):
        self.db.run(["CREATE TEMPORARY TABLE sqlq_messages AS SELECT * FROM "
                     "sqlq_messages LIMIT 0",
                     "ALTER TABLE sqlq_messages MODIFY id BIGINT NOT NULL "
                     "AUTO_INCREMENT PRIMARY KEY",
                     self.db.send("emails", "to the queue")])
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["to the queue"])
        self.assertEqual(self.db.stats("emails")["sends"], 1)

    def test_a_caller_cannot_stand_in_queues_or_messages_of_its_own(self):
        ids = dict(self.db.run(["SELECT name, id FROM sqlq_queues"]))
        # A user that may call the procedures and create temporary tables,
        # and nothing else.
        u = urllib.parse.urlsplit(self.db.url)
        name = u.path.lstrip("/")
        user = "sqlq_caller_" + name[-6:]
        self.db.run([f"CREATE USER {user}@'%' IDENTIFIED BY 'pw'",
                     f"GRANT EXECUTE, CREATE TEMPORARY TABLES ON `{name}`.* "
                     f"TO {user}@'%'"])
        self.addCleanup(self.db.run, [f"DROP USER {user}@'%'"])
        caller = self.db.as_user(user, "pw")
        # A queue of its own making, without the real one's limit: the
        # send is still held to the real one.
        with self.assertRaises(SqlError) as e:
            caller.run([
                "CREATE TEMPORARY TABLE sqlq_queues (id BIGINT, name "
                "VARBINARY(255), kind VARBINARY(16), max_payload BIGINT, "
                "unique_for_us BIGINT, group_mode INT, archive INT)",
                f"INSERT INTO sqlq_queues VALUES ({ids['small']}, 'small', "
                "'queue', 1048576, 0, 0, 0)",
                caller.send("small", "x" * 11)])
        self.assertEqual(e.exception.state, "45413")
        # A message of its own making: there is nothing to ack.
        with self.assertRaises(SqlError) as e:
            caller.run([
                "CREATE TEMPORARY TABLE sqlq_messages (id BIGINT, queue_id "
                "BIGINT, token BIGINT, attempts BIGINT, dedup VARBINARY(255))",
                "INSERT INTO sqlq_messages VALUES "
                f"(99, {ids['emails']}, 1, 1, NULL)",
                caller.ack("emails", "99-1-0000000000000001")])
        self.assertEqual(e.exception.state, "45404")
        self.assertEqual(self.db.claim_all("small"), [])
        for q in ("small", "emails"):
            stats = self.db.stats(q)
            self.assertEqual((stats["sends"], stats["acks"]), (0, 0), q)

    def test_temporary_links_and_subscriptions_do_not_steer_acks_or_publishes(self):
        for args in (("queue", "create", "later"), ("topic", "create", "orders"),
                     ("topic", "subscribe", "orders", "emails")):
            self.db.sqlq(*args)
        parent = self.db.send_lib("emails", "parent")
        child = self.db.send_lib("later", "child", "--depends-on", str(parent))
        [m] = self.db.claim_all("emails")
        # Empty stand-ins: the ack still releases the child, the publish
        # still reaches emails.
        self.db.run(["CREATE TEMPORARY TABLE sqlq_deps AS SELECT * FROM "
                     "sqlq_deps LIMIT 0",
                     "CREATE TEMPORARY TABLE sqlq_subscriptions AS SELECT * "
                     "FROM sqlq_subscriptions LIMIT 0",
                     self.db.ack("emails", m["receipt"]),
                     self.db.publish("orders", "published")])
        self.assertEqual([m["id"] for m in self.db.claim_all("later")],
                         [child])
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["published"])

@unittest.skipUnless(ENGINE == "sqlite", "SQLite's temporary objects")
class SqliteTemporaryTest(unittest.TestCase):
    """The triggers of the views belong to the main database, and SQLite
    binds the tables their statements name to it: a session's temporary
    tables of the same names do not stand in for sqlq's. The view itself
    is found by name, temp first: main.sqlq_send is sqlq's whatever the
    session defined."""

    def setUp(self):
        self.db = Database()
        self.addCleanup(self.db.close)
        self.db.sqlq("queue", "create", "emails")
        self.db.sqlq("queue", "create", "small", "--max-payload", "10")

    def test_temporary_tables_named_like_sqlqs_do_not_catch_a_send(self):
        shadows = ["CREATE TEMP TABLE sqlq_queues AS SELECT * FROM "
                   "main.sqlq_queues",
                   "UPDATE temp.sqlq_queues SET max_payload = 1000000",
                   "CREATE TEMP TABLE sqlq_messages AS SELECT * FROM "
                   "main.sqlq_messages WHERE 0"]
        with self.assertRaises(SqlError) as e:
            self.db.run(shadows + [self.db.send("small", "x" * 11)])
        self.assertIn("exceeds the queue's limit", e.exception.message)
        self.db.run(shadows + [self.db.send("emails", "to the queue")])
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["to the queue"])
        self.assertEqual(self.db.stats("small")["sends"], 0)

    def test_main_sqlq_send_is_sqlqs_view_whatever_the_session_made(self):
        self.db.run([
            "CREATE TEMP VIEW sqlq_send (queue, payload) AS "
            "SELECT NULL, NULL WHERE 0",
            "CREATE TEMP TRIGGER sqlq_send INSTEAD OF INSERT ON sqlq_send "
            "BEGIN SELECT 1; END",
            "INSERT INTO main.sqlq_send (queue, payload) "
            "VALUES ('emails', 'to the queue')"])
        self.assertEqual([m["payload"] for m in self.db.claim_all("emails")],
                         ["to the queue"])


@unittest.skipIf(ENGINE == "sqlite", "SQLite has no users")
class WithoutPrivilegeTest(unittest.TestCase):
    """A database user that may not create the API (PostgreSQL: the schema
    sqlq; MariaDB: routines) still opens the store; an administrator then
    installs the API with what `sqlq sql-api` prints, and it works."""

    def setUp(self):
        self.db = Database()
        self.addCleanup(self.db.close)
        u = urllib.parse.urlsplit(self.db.url)
        name = u.path.lstrip("/")
        self.user = "sqlq_limited_" + name[-6:]
        if ENGINE == "postgres":
            self.db.run([f"CREATE ROLE {self.user} LOGIN PASSWORD 'pw'",
                         f"GRANT CREATE, USAGE ON SCHEMA public TO {self.user}"])
            self.addCleanup(self.admin, f"DROP OWNED BY {self.user}; "
                            f"DROP ROLE {self.user}")
        else:
            self.db.run([f"CREATE USER {self.user}@'%' IDENTIFIED BY 'pw'",
                         "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, "
                         "ALTER, INDEX, DROP, REFERENCES ON "
                         f"`{name}`.* TO {self.user}@'%'"])
            self.addCleanup(self.admin, f"DROP USER {self.user}@'%'")
        self.limited = urllib.parse.urlunsplit(
            u._replace(netloc=f"{self.user}:pw@{u.hostname}:{u.port}"))

    def admin(self, sql):
        self.db.run([sql])

    def test_the_store_opens_and_the_api_is_installed_later(self):
        p = subprocess.run([SQLQ, "--db", self.limited, "queue", "create",
                            "emails"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.db.url, limited_db = self.limited, self.db.url
        try:
            # As the limited user: the store works, the API is not there.
            self.db.sqlq("send", "emails", "by the library")
            with self.assertRaises(SqlError):
                self.db.run([self.db.send("emails", "by SQL")])
        finally:
            self.db.url = limited_db
        text = subprocess.run([SQLQ, "--db", self.db.url, "sql-api"],
                              capture_output=True, text=True, check=True,
                              timeout=60).stdout
        u = urllib.parse.urlsplit(self.db.url)
        if ENGINE == "postgres":
            subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d",
                            self.db.url], input=text, check=True,
                           capture_output=True, text=True, timeout=60)
            self.admin(f"GRANT USAGE ON SCHEMA sqlq TO {self.user}")
        else:
            # In a session of another sql_mode than the library's: the
            # procedures keep the mode they were created in.
            subprocess.run(
                ["mariadb", "--no-defaults", "-h", u.hostname, "-P",
                 str(u.port), "-u", urllib.parse.unquote(u.username),
                 "-p" + urllib.parse.unquote(u.password),
                 "--init-command=SET SESSION sql_mode = "
                 "'ANSI,NO_BACKSLASH_ESCAPES'",
                 u.path.lstrip("/")],
                input=text, check=True, capture_output=True, text=True,
                timeout=60)
            self.admin(f"GRANT EXECUTE ON `{u.path.lstrip('/')}`.* TO "
                       f"{self.user}@'%'")
        self.db.url, limited_db = self.limited, self.db.url
        try:
            self.db.run([self.db.send("emails", "by SQL",
                                      headers={"trace": "t"})])
            got = self.db.claim_all("emails")
            self.assertEqual([m["payload"] for m in got],
                             ["by the library", "by SQL"])
            self.assertEqual(self.db.stats("emails")["sends"], 2)
            self.db.run([self.db.ack("emails", got[1]["receipt"])])
            self.assertEqual(self.db.stats("emails")["acks"], 1)
            # And the publish the administrator's text installed too.
            self.db.sqlq("topic", "create", "orders")
            self.db.sqlq("topic", "subscribe", "orders", "emails")
            self.db.run([self.db.publish("orders", "published")])
            self.assertEqual(
                [m["payload"] for m in self.db.claim_all("emails")],
                ["published"])
        finally:
            self.db.url = limited_db


class Session:
    """A transaction of the application's that stays open between
    statements, on the engine's usual client: psycopg on PostgreSQL, the
    mariadb client on MariaDB, python3's sqlite3 on SQLite. It begins at
    its first statement."""

    def __init__(self, db):
        self.db = db
        self.begun = False
        if ENGINE == "postgres":
            import psycopg
            self.conn = psycopg.connect(db.url)  # BEGIN at the first execute
        elif ENGINE == "mysql":
            u = urllib.parse.urlsplit(db.url)
            self.proc = subprocess.Popen(
                ["mariadb", "--no-defaults", "--unbuffered", "-h", u.hostname,
                 "-P", str(u.port or 3306), "-u",
                 urllib.parse.unquote(u.username),
                 "-p" + urllib.parse.unquote(u.password or ""), "-N", "-B",
                 u.path.lstrip("/")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        else:
            self.conn = sqlite3.connect(db.path, timeout=30,
                                        isolation_level=None,
                                        check_same_thread=False)

    def execute(self, statement):
        if ENGINE == "postgres":
            self.conn.execute(statement)
            return
        if ENGINE == "mysql":
            begin = "" if self.begun else "START TRANSACTION;\n"
            self.begun = True
            self.proc.stdin.write(f"{begin}{statement};\nSELECT 'sqlq-done';\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.strip() == "sqlq-done":
                    return
            raise SqlError(None, self.proc.stderr.read())
        if not self.begun:
            self.conn.execute("BEGIN IMMEDIATE")
            self.begun = True
        self.conn.execute(statement)

    def commit(self):
        if ENGINE == "mysql":
            self.proc.stdin.write("COMMIT;\n")
            self.proc.stdin.close()
            self.proc.wait(60)
            self.proc.stdout.close()
            self.proc.stderr.close()
            return
        self.conn.commit() if ENGINE == "postgres" else self.conn.execute(
            "COMMIT")
        self.conn.close()


def wait_blocked(db):
    """Until a transaction of the database waits for a row lock another
    holds (the server's own view of its sessions). SQLite's second writer
    waits for the database's one write lock, which no view shows."""
    if ENGINE == "sqlite":
        return
    if ENGINE == "postgres":
        query = ("SELECT count(*) FROM pg_stat_activity WHERE "
                 "wait_event_type = 'Lock' AND datname = current_database()")
    else:
        query = ("SELECT count(*) FROM information_schema.innodb_trx "
                 "WHERE trx_state = 'LOCK WAIT'")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if int(db.run([query])[0][0]) > 0:
            return
        time.sleep(0.02)
    raise AssertionError("no transaction came to wait for the other's lock")

class Server:
    """sqlq serve on the test's database, on a port of its choosing."""

    def __init__(self, url):
        self.dir = tempfile.TemporaryDirectory()
        port_file = os.path.join(self.dir.name, "port")
        self.proc = subprocess.Popen(
            [SQLQ, "--db", url, "serve", "--port", "0", "--port-file",
             port_file], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and os.path.getsize(port_file)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("sqlq serve did not start: " +
                                     self.proc.stderr.read().decode())
            time.sleep(0.02)
        with open(port_file) as f:
            self.base = "http://127.0.0.1:" + f.read().strip()

    def post(self, path, body):
        req = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}")

    def wait_parked(self, n):
        """Until n long-poll claims are parked (the server's own gauge)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.base + "/metrics") as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("sqlq_server_waiting_consumers "):
                        if float(line.split()[1]) >= n:
                            return
            time.sleep(0.01)
        raise AssertionError("the claim never parked")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.proc.stderr.close()
        self.dir.cleanup()


if __name__ == "__main__":
    unittest.main()
