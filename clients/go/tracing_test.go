package sqlq_test

// Trace context from a send to the handler, against a real `sqlq serve`:
// the trace headers a message carries reach its handler's context, what
// the handler sends carries them on, a traceparent of the sender's own
// wins, a malformed one is never carried, and a TracePropagator set on the
// client injects and extracts.

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

const (
	tp    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ts    = "vendor=opaque"
	other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// traceHeaders is the headers of hs that the tests look at (traceparent,
// tracestate, baggage, tenant), nil when it has none of them.
func traceHeaders(hs map[string]string) map[string]string {
	var out map[string]string
	for k, v := range hs {
		if k == "traceparent" || k == "tracestate" || k == "baggage" || k == "tenant" {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// sentHeaders claims every message of q and returns the trace headers of
// each by its payload.
func sentHeaders(t *testing.T, q *sqlq.Queue, n int) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	waitFor(t, "the sent messages", 20*time.Second, func() (bool, bool) {
		r := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Max: n}))
		for _, m := range r.Messages {
			out[m.Payload.String()] = traceHeaders(m.Headers)
		}
		return true, len(out) == n
	})
	return out
}

// handleAll runs a worker of queue on c until n messages were acked.
func handleAll(t *testing.T, c *sqlq.Client, q *sqlq.Queue, n int64, h sqlq.Handler) {
	t.Helper()
	_, stop := runWorker(t, c, q.Name(), h, sqlq.WorkerOptions{Wait: 500 * time.Millisecond})
	waitFor(t, "the acks", 30*time.Second, func() (bool, bool) { return true, stats(t, q).Acks == n })
	stop()
	if st := stats(t, q); st.Nacks != 0 {
		t.Fatalf("a handler failed: %+v", st)
	}
}

func TestTraceASendOutsideATraceAddsNoHeader(t *testing.T) {
	_, c, _ := newQueue(t, "out", nil)
	q := c.Queue("out")
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "plain"}))
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "mine", Headers: map[string]string{"tenant": "acme"}}))
	got := sentHeaders(t, q, 2)
	want := map[string]map[string]string{"plain": nil, "mine": {"tenant": "acme"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	if h := c.TraceHeaders(bg()); len(h) != 0 {
		t.Fatalf("TraceHeaders outside a trace: %v", h)
	}
}

func TestTraceTheHandledMessagesTraceGoesOnWithWhatTheHandlerSends(t *testing.T) {
	_, c, in := newQueue(t, "in", nil)
	out := c.Queue("out")
	must[*sqlq.QueueInfo](t)(out.Create(bg(), nil))
	must[int64](t)(in.Send(bg(), sqlq.Outgoing{Payload: "traced",
		Headers: map[string]string{"traceparent": tp, "tracestate": ts, "tenant": "acme"}}))
	must[int64](t)(in.Send(bg(), sqlq.Outgoing{Payload: "untraced"}))
	must[int64](t)(in.Send(bg(), sqlq.Outgoing{Payload: "malformed",
		Headers: map[string]string{"traceparent": "00-xyz-01"}}))
	var mu sync.Mutex
	inside := map[string]map[string]string{}
	handleAll(t, c, in, 3, func(ctx context.Context, m *sqlq.Message) error {
		p := m.Payload.String()
		mu.Lock()
		inside[p] = c.TraceHeaders(ctx)
		mu.Unlock()
		if _, err := out.Send(ctx, sqlq.Outgoing{Payload: p}); err != nil {
			return err
		}
		if p != "traced" {
			return nil
		}
		// A batch: each message without a traceparent of its own gets
		// the trace, its own headers kept; one with its own keeps it.
		own := map[string]string{"traceparent": other}
		tenant := map[string]string{"tenant": "acme"}
		_, err := out.SendBatch(ctx, []sqlq.Outgoing{
			{Payload: "batch plain"}, {Payload: "batch own", Headers: own},
			{Payload: "batch tenant", Headers: tenant}})
		if len(own) != 1 || len(tenant) != 1 {
			t.Errorf("the caller's headers changed: %v %v", own, tenant)
		}
		return err
	})
	carried := map[string]string{"traceparent": tp, "tracestate": ts}
	want := map[string]map[string]string{"traced": carried, "untraced": {}, "malformed": {}}
	if !reflect.DeepEqual(inside, want) {
		t.Fatalf("the handlers' TraceHeaders: %v, want %v", inside, want)
	}
	got := sentHeaders(t, out, 6)
	wantSent := map[string]map[string]string{
		"traced":       carried,
		"untraced":     nil,
		"malformed":    nil,
		"batch plain":  carried,
		"batch own":    {"traceparent": other},
		"batch tenant": {"traceparent": tp, "tracestate": ts, "tenant": "acme"},
	}
	if !reflect.DeepEqual(got, wantSent) {
		t.Fatalf("sent headers %v, want %v", got, wantSent)
	}
}

func TestTraceHeadersGivenByTheApplication(t *testing.T) {
	_, c, q := newQueue(t, "out", nil)
	ctx := sqlq.WithTraceHeaders(bg(), tp, ts)
	if h := c.TraceHeaders(ctx); !reflect.DeepEqual(h, map[string]string{"traceparent": tp, "tracestate": ts}) {
		t.Fatalf("TraceHeaders: %v", h)
	}
	must[int64](t)(q.Send(ctx, sqlq.Outgoing{Payload: "given"}))
	// A traceparent of the message's own is sent as it is, even one that
	// is not valid, and takes no tracestate from the context.
	must[int64](t)(q.Send(ctx, sqlq.Outgoing{Payload: "own", Headers: map[string]string{"traceparent": other}}))
	must[int64](t)(q.Send(ctx, sqlq.Outgoing{Payload: "own bad", Headers: map[string]string{"traceparent": "bad"}}))
	// A context whose traceparent is not valid W3C Trace Context carries
	// no trace at all, not even an outer one.
	bad := map[string]string{
		"malformed":   "00-xyz-01",
		"uppercase":   strings.ToUpper(tp),
		"zero trace":  "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"zero parent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"long":        tp + "-00",
	}
	for name, v := range bad {
		if sqlq.ValidTraceparent(v) {
			t.Errorf("%s %q is valid", name, v)
		}
		must[int64](t)(q.Send(sqlq.WithTraceHeaders(ctx, v, ts), sqlq.Outgoing{Payload: name}))
	}
	got := sentHeaders(t, q, 3+len(bad))
	want := map[string]map[string]string{
		"given":   {"traceparent": tp, "tracestate": ts},
		"own":     {"traceparent": other},
		"own bad": {"traceparent": "bad"},
	}
	for name := range bad {
		want[name] = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sent headers %v, want %v", got, want)
	}
}

// span is the trace of the test propagator: what an OpenTelemetry span
// context is to its propagator.
type span struct{ traceID, spanID string }

type spanKey struct{}

// testPropagator keeps a span in the context and injects it with a
// baggage header; it records the headers it extracts from.
type testPropagator struct {
	mu        sync.Mutex
	extracted []map[string]string
}

func (p *testPropagator) Inject(ctx context.Context, h map[string]string) {
	if s, ok := ctx.Value(spanKey{}).(span); ok {
		h["traceparent"] = "00-" + s.traceID + "-" + s.spanID + "-01"
		h["baggage"] = "user=ada"
	}
}

func (p *testPropagator) Extract(ctx context.Context, h map[string]string) context.Context {
	p.mu.Lock()
	p.extracted = append(p.extracted, h)
	p.mu.Unlock()
	parts := strings.Split(h["traceparent"], "-")
	if len(parts) != 4 {
		return ctx
	}
	return context.WithValue(ctx, spanKey{}, span{parts[1], parts[2]})
}

func TestTraceAPropagatorInjectsAndExtracts(t *testing.T) {
	s, _, in := newQueue(t, "in", nil)
	p := &testPropagator{}
	c := s.client(t, sqlq.WithTracePropagator(p))
	out := c.Queue("out")
	must[*sqlq.QueueInfo](t)(out.Create(bg(), nil))
	request := span{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"}
	must[int64](t)(c.Queue("in").Send(context.WithValue(bg(), spanKey{}, request), sqlq.Outgoing{Payload: "injected"}))
	// Where the propagator finds no trace, the context's trace headers
	// are sent.
	must[int64](t)(c.Queue("in").Send(sqlq.WithTraceHeaders(bg(), other, ts), sqlq.Outgoing{Payload: "carried"}))
	var mu sync.Mutex
	inside := map[string]span{}
	received := map[string]map[string]string{}
	handleAll(t, c, in, 2, func(ctx context.Context, m *sqlq.Message) error {
		p := m.Payload.String()
		parent, _ := ctx.Value(spanKey{}).(span)
		mu.Lock()
		inside[p] = parent
		received[p] = traceHeaders(m.Headers)
		mu.Unlock()
		// The handler's work in a child span: what it sends carries that.
		child := context.WithValue(ctx, spanKey{}, span{parent.traceID, "b7ad6b7169203331"})
		_, err := out.Send(child, sqlq.Outgoing{Payload: p})
		return err
	})
	wantReceived := map[string]map[string]string{
		"injected": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "baggage": "user=ada"},
		"carried":  {"traceparent": other, "tracestate": ts},
	}
	if !reflect.DeepEqual(received, wantReceived) {
		t.Fatalf("the messages' headers %v, want %v", received, wantReceived)
	}
	// The worker extracted from each message's headers, and its handler
	// ran with the span extracted.
	p.mu.Lock()
	extracted := map[string]map[string]string{}
	for _, h := range p.extracted {
		for name, want := range wantReceived {
			if reflect.DeepEqual(traceHeaders(h), want) {
				extracted[name] = want
			}
		}
	}
	n := len(p.extracted)
	p.mu.Unlock()
	if n != 2 || !reflect.DeepEqual(extracted, wantReceived) {
		t.Fatalf("extracted %d times, from %v", n, extracted)
	}
	wantInside := map[string]span{"injected": request, "carried": {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"}}
	if !reflect.DeepEqual(inside, wantInside) {
		t.Fatalf("the handlers' spans %v, want %v", inside, wantInside)
	}
	got := sentHeaders(t, out, 2)
	want := map[string]map[string]string{
		"injected": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01", "baggage": "user=ada"},
		"carried":  {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": "user=ada"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sent headers %v, want %v", got, want)
	}
}
