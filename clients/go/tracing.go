package sqlq

// W3C trace context on messages: a send carries the current trace in the
// headers traceparent (and tracestate), and a worker continues it around
// the handler. As in the Python and Node.js clients, a traceparent the
// caller gives in a message's Headers is always sent as it is, and a
// malformed one is never carried on.

import "context"

// The headers of W3C Trace Context.
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// TracePropagator moves a trace between a context.Context and a message's
// headers: OpenTelemetry's propagation.TextMapPropagator fits it in a few
// lines (see the package documentation). Set it with WithTracePropagator.
type TracePropagator interface {
	// Inject writes the trace of ctx into headers (traceparent,
	// tracestate, and whatever else the propagator carries, baggage for
	// instance).
	Inject(ctx context.Context, headers map[string]string)
	// Extract returns ctx with the trace that headers carry.
	Extract(ctx context.Context, headers map[string]string) context.Context
}

// WithTracePropagator makes sends inject the trace of their context
// through p, and workers run each handler with the context p extracts from
// the message's headers. Without one (or when p finds no valid
// traceparent in a context) a send carries the trace headers the context
// holds: those of the message whose handler it runs in, or those given to
// WithTraceHeaders.
func WithTracePropagator(p TracePropagator) Option {
	return func(c *Client) { c.propagator = p }
}

// traceKey is the key of the trace headers a context carries (a
// traceHeaders; an empty one ends an outer trace).
type traceKey struct{}

type traceHeaders struct{ traceparent, tracestate string }

// WithTraceHeaders returns a context that carries the W3C trace headers
// traceparent and tracestate (empty for none): a send made with it carries
// them unless its message has a traceparent of its own, as a send made in
// a worker's handler carries those of the message being handled. A
// traceparent that is not valid W3C Trace Context (version, trace id,
// parent id, flags, in lowercase hex; ids not all zero) is not carried,
// and the context then carries no trace at all.
func WithTraceHeaders(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, traceKey{}, carried(map[string]string{
		headerTraceparent: traceparent, headerTracestate: tracestate}))
}

// carried is the trace of a message's headers: a valid traceparent and the
// tracestate with it, or nothing.
func carried(headers map[string]string) traceHeaders {
	tp := headers[headerTraceparent]
	if !ValidTraceparent(tp) {
		return traceHeaders{}
	}
	return traceHeaders{tp, headers[headerTracestate]}
}

// ValidTraceparent says whether v is a traceparent of W3C Trace Context as
// the clients carry it: "VV-TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTT-PPPPPPPPPPPPPPPP-FF"
// in lowercase hex, the trace id (32 digits) and the parent id (16) not all
// zeros.
func ValidTraceparent(v string) bool {
	if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	for _, f := range [][2]int{{0, 2}, {3, 35}, {36, 52}, {53, 55}} {
		for _, ch := range v[f[0]:f[1]] {
			if !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f') {
				return false
			}
		}
	}
	return !allZeros(v[3:35]) && !allZeros(v[36:52])
}

func allZeros(s string) bool {
	for _, ch := range s {
		if ch != '0' {
			return false
		}
	}
	return true
}

// TraceHeaders returns the trace headers a send made with ctx would carry
// (none: an empty map): what the client's TracePropagator injects when it
// injects a valid traceparent, else the trace headers ctx carries (from the
// message whose handler runs with it, or WithTraceHeaders).
func (c *Client) TraceHeaders(ctx context.Context) map[string]string {
	out := map[string]string{}
	if c.propagator != nil {
		c.propagator.Inject(ctx, out)
		if ValidTraceparent(out[headerTraceparent]) {
			return out
		}
		out = map[string]string{}
	}
	if th, ok := ctx.Value(traceKey{}).(traceHeaders); ok && th.traceparent != "" {
		out[headerTraceparent] = th.traceparent
		if th.tracestate != "" {
			out[headerTracestate] = th.tracestate
		}
	}
	return out
}

// withTrace returns msgs as a send with ctx sends them: each message that
// has no traceparent of its own gets the current trace headers (its own
// headers win). The caller's slice and maps are never changed.
func (c *Client) withTrace(ctx context.Context, msgs []Outgoing) []Outgoing {
	var out []Outgoing
	var extra map[string]string
	for i, m := range msgs {
		if _, own := m.Headers[headerTraceparent]; own {
			continue
		}
		if out == nil {
			if extra = c.TraceHeaders(ctx); len(extra) == 0 {
				return msgs // outside any trace
			}
			out = append([]Outgoing(nil), msgs...)
		}
		h := make(map[string]string, len(extra)+len(m.Headers))
		for k, v := range extra {
			h[k] = v
		}
		for k, v := range m.Headers {
			h[k] = v
		}
		out[i].Headers = h
	}
	if out == nil {
		return msgs // each has a traceparent of its own
	}
	return out
}

// handlerContext is ctx as a handler of m runs with it: carrying m's trace
// headers (or none: a trace of ctx's own ends there), and with the
// propagator's Extract of m's headers applied when the client has one.
func (c *Client) handlerContext(ctx context.Context, m *Message) context.Context {
	ctx = context.WithValue(ctx, traceKey{}, carried(m.Headers))
	if c.propagator == nil {
		return ctx
	}
	h := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		h[k] = v
	}
	return c.propagator.Extract(ctx, h)
}
