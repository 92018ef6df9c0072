// W3C trace context on messages: a send carries the current trace in the
// headers `traceparent` (and `tracestate`), and a worker continues it
// around the handler.
//
// With OpenTelemetry's API (`@opentelemetry/api`) installed where the
// application's modules find it (an optional peer dependency: imported at
// the first send or handled message, never required), a send injects the
// current context through the registered propagator, and the worker runs
// the handler in a consumer span `process QUEUE` whose parent is the
// context extracted from the message. Without it (or before an SDK
// registered a propagator), the trace headers of the message being
// handled are kept in an AsyncLocalStorage while its handler runs, so
// that what the handler sends carries them on; a `traceparent` the caller
// gives in `headers` is always sent as it is.

import { AsyncLocalStorage } from "node:async_hooks";

export const TRACE_HEADERS = ["traceparent", "tracestate"];

// version-traceid-parentid-flags, lowercase hex; all-zero ids are invalid.
const TRACEPARENT = /^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

// The trace headers of the message whose handler runs in this context.
const carried = new AsyncLocalStorage();

let otel;  // a promise of the API's module, or of null without it

// OpenTelemetry's API when the application has it, else null; imported
// once, lazily.
export function api() {
  otel ??= import("@opentelemetry/api").then((m) => (m.trace ? m : m.default ?? null),
                                             () => null);
  return otel;
}

export const validTraceparent = (v) => typeof v === "string" && TRACEPARENT.test(v);

// The trace headers of a message (a valid traceparent and the tracestate
// with it), or null.
export function traceHeaders(headers) {
  if (!headers || !validTraceparent(headers.traceparent)) return null;
  const out = {};
  for (const k of TRACE_HEADERS) if (typeof headers[k] === "string") out[k] = headers[k];
  return out;
}

// The trace headers a send made here would carry: the current
// OpenTelemetry context's, else those of the message being handled.
export async function current() {
  const o = await api();
  const out = {};
  if (o) o.propagation.inject(o.context.active(), out);
  if (validTraceparent(out.traceparent)) return out;
  return { ...carried.getStore() };
}

// Adds the current trace headers to messages to send (in the API's form)
// that have no traceparent of their own.
export async function inject(messages) {
  if (messages.every((m) => m.headers?.traceparent !== undefined)) return;
  const extra = await current();
  if (!extra.traceparent) return;
  for (const m of messages) {
    if (m.headers?.traceparent === undefined) m.headers = { ...extra, ...m.headers };
  }
}

// Runs fn, a message's handler, with the message's trace as the current
// one (for OpenTelemetry, in a consumer span `process QUEUE` that records
// the handler's error). `otelApi` is what api() gave.
export function handling(otelApi, queue, msg, fn) {
  return carried.run(traceHeaders(msg.headers) ?? undefined, () => {
    if (!otelApi) return fn();
    const { context, propagation, trace, SpanKind, SpanStatusCode } = otelApi;
    const parent = propagation.extract(context.active(), { ...msg.headers });
    return trace.getTracer("sqlq").startActiveSpan(`process ${queue}`, {
      kind: SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "sqlq",
        "messaging.destination.name": queue,
        "messaging.operation.type": "process",
        "messaging.message.id": String(msg.id),
      },
    }, parent, async (span) => {
      try {
        return await fn();
      } catch (err) {
        span.recordException(err);
        span.setStatus({ code: SpanStatusCode.ERROR, message: String(err?.message ?? err) });
        throw err;
      } finally {
        span.end();
      }
    });
  });
}
