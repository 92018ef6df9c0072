// Package sqlq is the Go client of `sqlq serve`, the HTTP server of sqlq
// (durable queues in SQL tables), with a worker runtime. It uses the
// standard library only and needs Go 1.19 or later.
//
// # Connecting
//
//	c, err := sqlq.New("http://127.0.0.1:8080", sqlq.WithToken(os.Getenv("SQLQ_TOKEN")))
//	if err != nil { ... }
//	defer c.Close()
//
// A Client is safe for concurrent use; its kept-alive connections are
// shared. Every call takes a context.Context: cancelling it ends the call
// (a waiting claim included: the server then hands it no message).
//
// # Queues and messages
//
//	q := c.Queue("emails") // a handle; no request yet
//	_, err = q.Create(ctx, sqlq.Options{"max_attempts": 3, "lease_ms": 60000})
//	if err != nil && !errors.Is(err, sqlq.ErrAlreadyExists) { ... }
//	id, err := q.Send(ctx, sqlq.Outgoing{Payload: map[string]string{"to": "ada@example.com"}, Priority: 5})
//	r, err := q.Claim(ctx, sqlq.ClaimOptions{Max: 10, Wait: 20 * time.Second})
//	for _, m := range r.Messages {
//		// m.Payload: the bytes; m.Payload.Decode(&v) for a JSON payload
//		err = m.Ack(ctx) // or m.Nack(ctx, "smtp 451"), m.Extend(ctx, time.Minute)
//	}
//
// A payload is sent as text (a string), as bytes ([]byte) or as a JSON
// value (json.RawMessage, or any other value, through encoding/json); a
// JSON value comes back as the same JSON with the header content-type:
// application/json. Options of Create and Change are the HTTP API's names
// (docs/http-api.md in the sqlq repository); a nil value in Change lifts a
// limit.
//
// # Workers
//
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
//	defer stop()
//	w := sqlq.NewWorker(c, "emails", func(ctx context.Context, m *sqlq.Message) error {
//		return sendMail(ctx, m.Payload) // nil: acked; an error (or a panic): nacked with its text
//	}, sqlq.WorkerOptions{Concurrency: 4})
//	err = w.Run(ctx) // until SIGTERM/SIGINT: finishes or releases in-flight work
//
// Worker.Run claims with a long poll, runs handlers concurrently, extends
// the lease of each message while its handler runs, acks or nacks, waits
// out a server that is away, and stops gracefully when its context ends.
//
// # Tracing
//
// Messages carry W3C Trace Context (https://www.w3.org/TR/trace-context/)
// in their headers traceparent and tracestate, as with the Python and
// Node.js clients. A send (Send, SendBatch) adds the trace of its
// context.Context to each message that has no traceparent header of its
// own (one given in Headers is sent as it is); a send outside any trace
// adds nothing. The trace of a context is what the client's
// TracePropagator injects (WithTracePropagator; none by default), else
// the trace headers the context carries: a worker runs each handler with
// those of its message, so what the handler sends continues the trace,
// and WithTraceHeaders puts an incoming request's in a context. A
// traceparent that is not valid W3C Trace Context (lowercase hex, ids not
// all zero) is never carried. Client.TraceHeaders says what a send would
// carry.
//
//	ctx = sqlq.WithTraceHeaders(ctx, r.Header.Get("traceparent"), r.Header.Get("tracestate"))
//	_, err = q.Send(ctx, sqlq.Outgoing{Payload: "..."}) // carries them
//
// With OpenTelemetry, its propagator fits TracePropagator in a few lines
// (this module does not import OpenTelemetry). Sends then inject the span
// of their context, and the worker runs each handler with the context
// extracted from the message, so a span the handler starts is a child of
// the sender's:
//
//	import (
//		"go.opentelemetry.io/otel"
//		"go.opentelemetry.io/otel/propagation"
//		"go.opentelemetry.io/otel/trace"
//	)
//
//	// otelPropagation adapts OpenTelemetry's propagator to sqlq's.
//	type otelPropagation struct{ p propagation.TextMapPropagator }
//
//	func (o otelPropagation) Inject(ctx context.Context, headers map[string]string) {
//		o.p.Inject(ctx, propagation.MapCarrier(headers))
//	}
//
//	func (o otelPropagation) Extract(ctx context.Context, headers map[string]string) context.Context {
//		return o.p.Extract(ctx, propagation.MapCarrier(headers))
//	}
//
//	c, err := sqlq.New(url, sqlq.WithTracePropagator(otelPropagation{otel.GetTextMapPropagator()}))
//	w := sqlq.NewWorker(c, "emails", func(ctx context.Context, m *sqlq.Message) error {
//		ctx, span := otel.Tracer("mailer").Start(ctx, "process emails",
//			trace.WithSpanKind(trace.SpanKindConsumer))
//		defer span.End()
//		return sendMail(ctx, m.Payload)
//	}, sqlq.WorkerOptions{})
//
// # Logging
//
// A worker logs what the Python and Node.js workers log, in their words,
// to WorkerOptions.Logger (log.Default() unless set; anything with Printf;
// Discard for silence): each line starts with its level (INFO, WARN or
// ERROR) and "sqlq worker NAME: ". It says when it started and stopped
// (with its counts), when a handler failed (WARN: the message is retried
// after the queue's backoff; ERROR: it is now a dead letter; a panic's
// stack follows the line), when a lease was lost and the ack or nack then
// refused, when a call failed for want of the server (on its first try and
// every tenth, with the delay) and when it works again, and what it
// released at the shutdown deadline. Nothing is logged for a message
// handled without trouble. A Client logs its own retries as warnings with
// WithLogger (nothing by default).
//
// # Errors
//
// Every failed call returns an *Error with the server's Code (stable:
// branch on it), Message, HTTP Status and RetryAfter. Its Kind is one of
// ErrBadRequest, ErrUnauthorized, ErrForbidden, ErrNotFound,
// ErrAlreadyExists, ErrStaleReceipt, ErrConflict, ErrTooManyRequests,
// ErrUnavailable, ErrServerTimeout, ErrOutcomeUnknown, ErrServerError and
// ErrConnectionFailed (no reply; Sent says whether the request may have
// reached the server), the classes of the Python and Node.js clients:
//
//	if errors.Is(err, sqlq.ErrStaleReceipt) { ... } // the lease was lost
//	var e *sqlq.Error
//	if errors.As(err, &e) { log.Print(e.Status, e.Code, e.Message) }
//
// # Retries
//
// A call is sent again (at most 20 times, WithRetries; none later than
// 30 s after its first try, WithRetryFor: longer than a database failover
// or a server restart), after capped exponential backoff with full jitter
// (100 ms doubling to 5 s, WithBackoff) and at least the server's
// Retry-After, only when that cannot do anything twice: the connection
// could not be made; the server answered 503 or 429 (it did nothing;
// except too_many_auth_failures); and, for calls safe to repeat (every
// GET, Change, Extend, Pause, Resume, and a send whose messages all carry a
// dedup key), a connection that broke after the request was sent or an
// outcome_unknown reply.
//
// Sends are idempotent by default: every message sent without a Dedup key
// gets one of the client's own ("idem:" and 32 hex digits), made once per
// call and kept across its retries, so a send whose reply was lost is
// stored once. WithIdempotentSends(false) sends without keys. A claim, ack
// or nack whose reply was lost is not retried: the error says so
// (ErrConnectionFailed with Sent true) and the caller decides.
package sqlq
