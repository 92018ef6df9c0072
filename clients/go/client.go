package sqlq

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A kept-alive connection idle this long is closed rather than reused: the
// server closes idle ones (--idle-timeout, 120 s by default).
const maxIdle = 50 * time.Second

// Logger receives the client's and the worker's log lines; *log.Logger
// satisfies it. Each line starts with its level: "INFO", "WARN" or "ERROR".
type Logger interface {
	Printf(format string, v ...any)
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// Discard is a Logger that drops everything.
var Discard Logger = discard{}

// Client is a client of one `sqlq serve`. It is safe for concurrent use;
// its kept-alive connections are shared by the goroutines that use it.
type Client struct {
	base           *url.URL
	token          string
	timeout        time.Duration
	retries        int
	retryFor       time.Duration
	backoff        time.Duration
	maxBackoff     time.Duration
	idempotentSend bool
	logger         Logger
	propagator     TracePropagator // nil: none
	tlsConfig      *tls.Config
	httpClient     *http.Client
	transport      *http.Transport // ours, closed by Close; nil when given
}

// Option sets an option of New.
type Option func(*Client)

// WithToken sends Authorization: Bearer token with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTimeout bounds the wait for one reply (a claim adds its wait);
// 30 s by default.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetries sets at most how often a request is sent again when that is
// safe (see the package documentation); 20 by default, 0 for never.
func WithRetries(n int) Option { return func(c *Client) { c.retries = n } }

// WithRetryFor sets how long after its first try a request may still be
// retried; 30 s by default, longer than a database failover or a server
// restart.
func WithRetryFor(d time.Duration) Option { return func(c *Client) { c.retryFor = d } }

// WithBackoff sets the capped exponential backoff between retries: the
// first at most base (100 ms by default), doubling up to max (5 s), with
// full jitter.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) { c.backoff, c.maxBackoff = base, max }
}

// WithIdempotentSends turns the dedup keys of the client's own on or off
// (on by default): every message sent without a Dedup key gets a random
// "idem:..." key, so that a send whose reply was lost is sent again and
// stored once.
func WithIdempotentSends(on bool) Option { return func(c *Client) { c.idempotentSend = on } }

// WithLogger logs each retry as a warning (nothing is logged by default).
func WithLogger(l Logger) Option { return func(c *Client) { c.logger = l } }

// WithTLSConfig sets the TLS configuration of an https:// server (a
// private CA in RootCAs, say).
func WithTLSConfig(cfg *tls.Config) Option { return func(c *Client) { c.tlsConfig = cfg } }

// WithHTTPClient sends the requests through hc instead of a client of the
// package's own; its Transport should keep connections alive. Close then
// leaves hc alone.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.httpClient = hc } }

// New returns a client of the server at baseURL (http://host:port or
// https://host:port). It sends no request.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sqlq: not an http(s) URL: %q", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	c := &Client{
		base: u, timeout: 30 * time.Second, retries: 20, retryFor: 30 * time.Second,
		backoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second,
		idempotentSend: true, logger: Discard,
	}
	for _, o := range opts {
		o(c)
	}
	if c.logger == nil {
		c.logger = Discard
	}
	if c.httpClient == nil {
		c.transport = &http.Transport{
			Proxy:               nil, // a queue server is reached directly
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     c.tlsConfig,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     maxIdle,
			DisableCompression:  true,
		}
		c.httpClient = &http.Client{Transport: c.transport}
	}
	return c, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// Close closes the client's idle connections.
func (c *Client) Close() {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
}

// withRetries is a client sharing c's connections that retries at most n
// times.
func (c *Client) withRetries(n int) *Client {
	d := *c
	d.retries = n
	return &d
}

// backoffDelay is capped exponential backoff with full jitter: uniform in
// [0, min(max, base*2^attempt)], at least a millisecond.
func backoffDelay(attempt int, base, max time.Duration) time.Duration {
	if attempt > 30 {
		attempt = 30
	}
	limit := float64(base) * float64(uint64(1)<<uint(attempt))
	if limit > float64(max) {
		limit = float64(max)
	}
	d := time.Duration(mathrand.Float64() * limit)
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return d
}

// call is one request of the API.
type call struct {
	method string
	path   string
	query  url.Values
	body   any // JSON-encoded; nil: none (an empty object for POST and PATCH)
	// idempotent: the request may be sent again when its connection broke
	// after it was sent, or the server answered outcome_unknown (default:
	// GET only).
	idempotent bool
	wait       time.Duration // a long poll's wait, added to the timeout
	noRetry    bool          // sent once, whatever the client's retries
	raw        bool          // the reply is text (metrics), not JSON
	// When the caller's context ends once the request went out, close the
	// sending side only and read the reply (a long-poll claim: see once).
	halfClose bool
}

// do sends a call, retrying what is safe, and decodes the reply's JSON into
// out (when not nil).
func (c *Client) do(ctx context.Context, cl call, out any) error {
	target := c.base.String() + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	var data []byte
	if cl.method == http.MethodPost || cl.method == http.MethodPatch {
		var err error
		if data, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("sqlq: %s %s: %w", cl.method, cl.path, err)
		}
		if string(data) == "null" { // no body, or a nil map
			data = []byte("{}")
		}
	}
	tries := c.retries
	if cl.noRetry {
		tries = 0
	}
	if cl.method == http.MethodGet {
		cl.idempotent = true
	}
	deadline := time.Now().Add(c.retryFor)
	for attempt := 0; ; attempt++ {
		status, header, reply, err := c.once(ctx, cl.method, target, data, c.timeout+cl.wait, cl.halfClose)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				return err // the caller's context ended
			}
			delay := backoffDelay(attempt, c.backoff, c.maxBackoff)
			if attempt >= tries || time.Now().Add(delay).After(deadline) || (e.Sent && !cl.idempotent) {
				return e
			}
			c.logger.Printf("WARN sqlq: %s; retrying in %v", e.Message, delay.Round(time.Millisecond))
			if err := sleep(ctx, delay); err != nil {
				return err
			}
			continue
		}
		if status < 300 {
			if out == nil || len(reply) == 0 {
				return nil
			}
			if cl.raw {
				*(out.(*string)) = string(reply)
				return nil
			}
			if err := json.Unmarshal(reply, out); err != nil {
				return fmt.Errorf("sqlq: %s %s: reply: %w", cl.method, cl.path, err)
			}
			return nil
		}
		e := replyError(cl.method, cl.path, status, header, reply)
		safe := ((status == 429 || status == 503) && e.Code != "too_many_auth_failures") ||
			(cl.idempotent && e.Code == "outcome_unknown")
		delay := backoffDelay(attempt, c.backoff, c.maxBackoff)
		if e.RetryAfter > delay {
			delay = e.RetryAfter
		}
		if !safe || attempt >= tries || time.Now().Add(delay).After(deadline) {
			return e
		}
		c.logger.Printf("WARN sqlq: %s %s: %v; retrying in %v", cl.method, cl.path, e, delay.Round(time.Millisecond))
		if err := sleep(ctx, delay); err != nil {
			return err
		}
	}
}

// How long a server has to answer a request whose sending side was closed
// (once, halfClose) before the connection is cut.
const abortGrace = 2 * time.Second

// once is one round trip. A failure without a reply is an *Error of kind
// ErrConnectionFailed, unless ctx ended (then ctx's error, wrapped).
//
// With halfClose, the request does not end with ctx: when ctx ends once
// the request went out whole, only the connection's sending side is
// closed and the reply is read as usual. The server then ends a waiting
// claim at once and answers with what it took, so that a message it was
// claiming as ctx ended is not left leased to no one. A server that does
// not answer within abortGrace is cut off.
func (c *Client) once(ctx context.Context, method, target string, data []byte, timeout time.Duration, halfClose bool) (int, http.Header, []byte, error) {
	base := ctx
	if halfClose {
		base = valuesOnly{ctx}
	}
	actx, cancel := context.WithTimeout(base, timeout)
	defer cancel()
	// From the moment the request's headers are written the server may
	// have seen it.
	var sent, wrote, cut atomic.Bool
	var conn atomic.Value // net.Conn
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		GotConn:      func(info httptrace.GotConnInfo) { conn.Store(info.Conn) },
		WroteHeaders: func() { sent.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	if halfClose {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
				return
			case <-ctx.Done():
			}
			if cw, ok := conn.Load().(interface{ CloseWrite() error }); ok && wrote.Load() &&
				cw.CloseWrite() == nil {
				cut.Store(true)
				t := time.NewTimer(abortGrace)
				defer t.Stop()
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
			cancel()
		}()
	}
	var body io.Reader
	if data != nil {
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(actx, method, target, body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("sqlq: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	what := method + " " + req.URL.Path
	fail := func(err error) (int, http.Header, []byte, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, nil, nil, fmt.Errorf("sqlq: %s: %w", what, ctxErr)
		}
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			msg = ue.Err.Error() // without the method and URL said already
		}
		if actx.Err() == context.DeadlineExceeded {
			msg = fmt.Sprintf("no reply within %v", timeout)
		}
		s := sent.Load()
		// A refused connection never reached the server.
		if errors.Is(err, syscall.ECONNREFUSED) {
			s = false
		}
		return 0, nil, nil, &Error{Kind: ErrConnectionFailed, Code: "connection_failed",
			Message: what + ": " + msg, Sent: s, Err: err}
	}
	if halfClose && ctx.Err() != nil {
		return fail(ctx.Err()) // ended before anything went out
	}
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if cut.Load() {
		// Its answer may say keep-alive (sent before the server saw the
		// cut), but a connection whose sending side is closed must not
		// serve another request.
		if nc, ok := conn.Load().(net.Conn); ok {
			nc.Close()
		}
	}
	if err != nil {
		return fail(err)
	}
	return resp.StatusCode, resp.Header, reply, nil
}

func replyError(method, path string, status int, h http.Header, reply []byte) *Error {
	var retryAfter time.Duration
	if ra := h.Get("Retry-After"); ra != "" {
		if s, err := strconv.ParseFloat(ra, 64); err == nil && s >= 0 {
			retryAfter = time.Duration(s * float64(time.Second))
		}
	}
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(reply, &e) == nil && e.Error != nil && e.Error.Code != "" {
		return errorFor(status, e.Error.Code, e.Error.Message, retryAfter)
	}
	text := string(reply)
	if len(text) > 200 {
		text = text[:200]
	}
	return errorFor(status, "http_"+strconv.Itoa(status),
		fmt.Sprintf("%s %s: HTTP %d: %s", method, path, status, text), retryAfter)
}

// sleep waits d, or until ctx ends (then its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// seg is a name, id or key as one path segment.
func seg(s string) string { return url.PathEscape(s) }

// idemKey is a dedup key of the client's own: "idem:" and 32 hex digits.
func idemKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("sqlq: no randomness: " + err.Error())
	}
	return "idem:" + hex.EncodeToString(b[:])
}

// The server-wide calls.

// Health is GET /healthz: nil while the server answers {"status":"ok"}.
func (c *Client) Health(ctx context.Context) error {
	var r struct{ Status string }
	if err := c.do(ctx, call{method: "GET", path: "/healthz"}, &r); err != nil {
		return err
	}
	if r.Status != "ok" {
		return fmt.Errorf("sqlq: /healthz: status %q", r.Status)
	}
	return nil
}

// Ready is GET /readyz: nil when the database takes writes; an error of
// kind ErrUnavailable (503) when it does not. Not retried.
func (c *Client) Ready(ctx context.Context) error {
	var r struct{ Status string }
	return c.do(ctx, call{method: "GET", path: "/readyz", noRetry: true}, &r)
}

// Metrics is GET /metrics: the Prometheus text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var s string
	err := c.do(ctx, call{method: "GET", path: "/metrics", raw: true}, &s)
	return s, err
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, call{method: "GET", path: path, query: q}, out)
}

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	return c.do(ctx, call{method: "POST", path: path, body: body}, out)
}

func (c *Client) del(ctx context.Context, path string, out any) error {
	return c.do(ctx, call{method: "DELETE", path: path}, out)
}

// doAs sends cl and returns its reply decoded as a T.
func doAs[T any](ctx context.Context, c *Client, cl call) (*T, error) {
	var out T
	if err := c.do(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// getAs is doAs of a GET.
func getAs[T any](ctx context.Context, c *Client, path string, q url.Values) (*T, error) {
	return doAs[T](ctx, c, call{method: "GET", path: path, query: q})
}

// postAs is doAs of a POST.
func postAs[T any](ctx context.Context, c *Client, path string, body any) (*T, error) {
	return doAs[T](ctx, c, call{method: "POST", path: path, body: body})
}
