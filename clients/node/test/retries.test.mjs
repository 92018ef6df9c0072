// What the client does when the server or the network fails for a while,
// as during a database failover or a server restart: it keeps trying for
// long enough, and a send it tries again is stored once.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Client, ConnectionFailed } from "../index.js";
import { startServer, waitFor } from "./server.mjs";

// A TCP proxy in front of the server that, on its first connection, passes
// the request on and lets the server answer, but closes the client's side
// instead of passing the reply back: the request was carried out and its
// reply lost, as when the network breaks at the wrong moment. Later
// connections pass through.
async function replyEater(upstreamPort) {
  const state = { connections: 0, repliesEaten: 0 };
  const proxy = net.createServer((client) => {
    const eat = ++state.connections === 1;
    const server = net.connect(upstreamPort, "127.0.0.1");
    client.on("data", (d) => server.write(d));
    server.on("data", (d) => {
      if (eat) {
        state.repliesEaten++;
        client.destroy();
        server.destroy();
      } else {
        client.write(d);
      }
    });
    const end = () => { client.destroy(); server.destroy(); };
    client.on("close", end);
    server.on("close", end);
    client.on("error", end);
    server.on("error", end);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  state.port = proxy.address().port;
  state.close = () => new Promise((r) => proxy.close(r));
  return state;
}

test("a send whose reply was lost is retried and stored once", async () => {
  const server = await startServer();
  const admin = new Client(server.url);
  const proxy = await replyEater(server.port);
  const c = new Client(`http://127.0.0.1:${proxy.port}`);
  try {
    await admin.queue("jobs").create();
    const id = await c.queue("jobs").send("once");
    assert.equal(proxy.repliesEaten, 1);
    const stats = await admin.queue("jobs").stats();
    assert.equal(stats.stats.ready, 1);
    const [m] = await admin.queue("jobs").claim({ max: 1 });
    assert.equal(m.id, id);
    assert.equal(m.payload, "once");
  } finally {
    c.close();
    admin.close();
    await proxy.close();
    await server.stop();
  }
});

test("a send while the server is down for a while gets through", async () => {
  let server = await startServer();
  const admin = new Client(server.url);
  const c = new Client(server.url);
  try {
    await admin.queue("jobs").create();
    await server.kill();
    const started = Date.now();
    let outcome = null;
    const sending = c.queue("jobs").send("through").then(
      (id) => { outcome = { id }; }, (error) => { outcome = { error }; });
    // Still trying after 3 s (a failover takes 10 to 15 s): the old budget
    // of three tries gave up within one.
    await waitFor("3 s of tries", () => outcome !== null || Date.now() - started > 3000);
    assert.equal(outcome, null, `the client stopped trying: ${outcome?.error}`);
    server = await server.restart();
    await sending;
    assert.ok(outcome.id, String(outcome.error));
    const [m] = await admin.queue("jobs").claim({ max: 1 });
    assert.equal(m.id, outcome.id);
  } finally {
    c.close();
    admin.close();
    await server.stop();
  }
});

test("retryForMs bounds the tries", async () => {
  const server = await startServer();
  await server.kill();
  const c = new Client(server.url, { retries: 1000, retryForMs: 500 });
  try {
    await assert.rejects(c.queue("jobs").send("never"), (e) => e instanceof ConnectionFailed);
  } finally {
    c.close();
  }
});
