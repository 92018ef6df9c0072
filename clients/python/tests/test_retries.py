"""What the Python client does when the server or the network fails for a
while, as during a database failover or a server restart: it keeps trying
for long enough, and a send it tries again is stored once."""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sqlq_server  # noqa: E402  (puts the package's source on sys.path)

import sqlq  # noqa: E402


class ReplyEater:
    """A TCP proxy in front of the server that, on the first connection,
    passes the request on and lets the server answer, but closes the
    client's side instead of passing the reply back: the request was
    carried out and its reply lost, as when the network breaks at the wrong
    moment. Later connections pass through."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.replies_eaten = 0
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            eat = self.connections == 1
            threading.Thread(target=self._serve, args=(client, eat),
                             daemon=True).start()

    def _serve(self, client: socket.socket, eat: bool) -> None:
        server = socket.create_connection(("127.0.0.1", self.upstream_port))

        def pump(src: socket.socket, dst: socket.socket, eat: bool) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if eat:
                        self.replies_eaten += 1
                        break
                    dst.sendall(data)
            except OSError:
                pass
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=pump, args=(client, server, False),
                         daemon=True).start()
        pump(server, client, eat)
        client.close()
        server.close()


class RetryTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = sqlq_server.Server()
        self.admin = sqlq.Client(self.server.url,
                                 token=sqlq_server.ADMIN_TOKEN)
        self.admin.queue("jobs").create()

    def tearDown(self) -> None:
        self.admin.close()
        self.server.close()

    def test_a_send_whose_reply_was_lost_is_retried_and_stored_once(self):
        proxy = ReplyEater(self.server.port)
        try:
            c = sqlq.Client(f"http://127.0.0.1:{proxy.port}",
                            token=sqlq_server.ADMIN_TOKEN, backoff=0.01)
            msg_id = c.queue("jobs").send("once")
            c.close()
        finally:
            proxy.close()
        self.assertEqual(proxy.replies_eaten, 1)
        self.assertEqual(self.admin.queue("jobs").stats()["stats"]["ready"], 1)
        [m] = self.admin.queue("jobs").claim(1)
        self.assertEqual(m.id, msg_id)
        self.assertEqual(m.payload, "once")

    def test_a_send_while_the_server_is_down_for_a_while_gets_through(self):
        # The server is down for longer than the first few tries take: the
        # client goes on trying (a failover takes 10 to 15 s) and the send
        # is carried out once the server is back.
        self.server.kill()
        tries = threading.Semaphore(0)

        class CountRetries(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "retrying" in record.getMessage():
                    tries.release()

        handler = CountRetries()
        logging.getLogger("sqlq").addHandler(handler)
        result: dict[str, object] = {}
        c = sqlq.Client(self.server.url, token=sqlq_server.ADMIN_TOKEN,
                        backoff=0.05, max_backoff=0.2)

        def send() -> None:
            try:
                result["id"] = c.queue("jobs").send("through")
            except Exception as e:  # noqa: BLE001  (reported below)
                result["error"] = e

        t = threading.Thread(target=send)
        t.start()
        try:
            for _ in range(5):
                self.assertTrue(tries.acquire(timeout=30),
                                f"the client stopped trying: {result}")
        finally:
            logging.getLogger("sqlq").removeHandler(handler)
            self.server.start()
        t.join(60)
        c.close()
        self.assertIn("id", result, result)
        [m] = self.admin.queue("jobs").claim(1)
        self.assertEqual(m.id, result["id"])

    def test_retry_for_bounds_the_tries(self):
        self.server.kill()
        c = sqlq.Client(self.server.url, retries=1000, retry_for=0.5,
                        backoff=0.01, max_backoff=0.05)
        with self.assertRaises(sqlq.ConnectionFailed) as cm:
            c.queue("jobs").send("never")
        self.assertFalse(cm.exception.sent)
        c.close()
        self.server.start()


if __name__ == "__main__":
    unittest.main()
