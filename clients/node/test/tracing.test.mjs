// Trace context from a send to the handler, against a real `sqlq serve`:
// without OpenTelemetry installed (a copy of the package where no
// node_modules is), with its API but no SDK, and with the SDK
// (@opentelemetry/sdk-trace-base, the W3C propagator of @opentelemetry/core
// and the AsyncLocalStorage context manager; development dependencies).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import * as sqlq from "../index.js";
import { useServer, server, client, waitFor } from "./server.mjs";
import { carriedScenario, handleAll, TP, TS } from "./tracing_scenario.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
useServer((url) => new sqlq.Client(url));

test("without OpenTelemetry installed: the caller's traceparent is carried from send to handler", async () => {
  // The package as an application without OpenTelemetry has it: copied
  // where no node_modules is above it.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-nootel-"));
  try {
    const pkg = path.join(dir, "sqlq");
    fs.mkdirSync(pkg);
    for (const f of ["package.json", "index.js", "src"]) {
      fs.cpSync(path.join(here, "..", f), path.join(pkg, f), { recursive: true });
    }
    fs.writeFileSync(path.join(dir, "run.mjs"), `
      import assert from "node:assert/strict";
      import { api } from "./sqlq/src/tracing.js";
      import * as sqlq from "./sqlq/index.js";
      import { carriedScenario } from ${JSON.stringify(path.join(here, "tracing_scenario.mjs"))};
      assert.equal(await api(), null, "OpenTelemetry must not be found here");
      const c = new sqlq.Client(process.argv[2], { logger: null });
      await carriedScenario(sqlq, c, "nootel-");
      c.close();
      console.log("carried");
    `);
    const { stdout } = await promisify(execFile)(process.execPath,
                                                 [path.join(dir, "run.mjs"), server.url]);
    assert.match(stdout, /carried/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("OpenTelemetry's API without an SDK: the same", async () => {
  const { api } = await import("../src/tracing.js");
  assert.ok(await api(), "@opentelemetry/api (a development dependency) is found");
  await carriedScenario(sqlq, client, "api-");
});

test("with OpenTelemetry: sends carry the active span; handlers run in a consumer span under it", async () => {
  const otel = await import("@opentelemetry/api");
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } =
    await import("@opentelemetry/sdk-trace-base");
  const { W3CTraceContextPropagator } = await import("@opentelemetry/core");
  const { AsyncLocalStorageContextManager } = await import("@opentelemetry/context-async-hooks");
  const exporter = new InMemorySpanExporter();
  otel.trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  otel.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  otel.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  try {
    const tracer = otel.trace.getTracer("app");
    const qin = client.queue("otel-in");
    const qout = client.queue("otel-out");
    await qin.create({ maxAttempts: 1 });
    await qout.create();
    // The application sends within a span of its own ...
    const request = await tracer.startActiveSpan("request", async (span) => {
      await qin.sendBatch([{ payload: "ok" }, { payload: "fail" }]);
      span.end();
      return span.spanContext();
    });
    // ... and once with a traceparent of its own, which wins.
    await qin.send("given", { headers: { traceparent: TP, tracestate: TS } });
    const inside = {};
    await handleAll(sqlq.Worker, client, "otel-in", 3, async (msg) => {
      inside[msg.payload] = { id: msg.id, headers: msg.headers,
                              span: otel.trace.getActiveSpan().spanContext() };
      await tracer.startActiveSpan("handler work", async (s) => {
        await qout.send(msg.payload);
        s.end();
      });
      if (msg.payload === "fail") throw new Error("smtp 451");
    });
    const traceparent = (sc) => `00-${sc.traceId}-${sc.spanId}-01`;
    assert.equal(inside.ok.headers.traceparent, traceparent(request));
    assert.equal(inside.fail.headers.traceparent, traceparent(request));
    assert.deepEqual(inside.given.headers, { traceparent: TP, tracestate: TS });

    const spans = exporter.getFinishedSpans();
    const byId = new Map(spans.map((s) => [s.spanContext().spanId, s]));
    const parentOf = (s) => s.parentSpanContext?.spanId;
    const sent = Object.fromEntries((await qout.claim({ max: 10 })).map((m) => [m.payload, m]));
    for (const [payload, parent] of [["ok", request], ["fail", request],
                                     ["given", { traceId: TP.split("-")[1], spanId: TP.split("-")[2] }]]) {
      // The handler ran in the consumer span `process otel-in`, a child of
      // the span the message was sent from, in the same trace.
      const proc = byId.get(inside[payload].span.spanId);
      assert.equal(proc.name, "process otel-in");
      assert.equal(proc.kind, otel.SpanKind.CONSUMER);
      assert.equal(proc.spanContext().traceId, parent.traceId);
      assert.equal(parentOf(proc), parent.spanId);
      assert.equal(proc.attributes["messaging.system"], "sqlq");
      assert.equal(proc.attributes["messaging.destination.name"], "otel-in");
      assert.equal(proc.attributes["messaging.message.id"], String(inside[payload].id));
      // What the handler sent carries its own span on, in the same trace.
      const [, traceId, spanId] = sent[payload].headers.traceparent.split("-");
      assert.equal(traceId, parent.traceId);
      assert.equal(byId.get(spanId).name, "handler work");
      assert.equal(parentOf(byId.get(spanId)), proc.spanContext().spanId);
    }
    const failed = byId.get(inside.fail.span.spanId);
    assert.equal(failed.status.code, otel.SpanStatusCode.ERROR);
    assert.equal(failed.status.message, "smtp 451");
    assert.equal(failed.events[0].name, "exception");
    assert.equal(byId.get(inside.ok.span.spanId).status.code, otel.SpanStatusCode.UNSET);
  } finally {
    otel.trace.disable();
    otel.context.disable();
    otel.propagation.disable();
  }
});
