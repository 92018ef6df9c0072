package sqlq

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// MaxErrorBytes is the most of an error text the server keeps.
const MaxErrorBytes = 4096

// Handler works on one message. Returning nil acks it; returning an error
// (or panicking) nacks it with the error's text. ctx is cancelled when the
// message's lease was lost (another worker may have it now) or when the
// worker released the message at its shutdown deadline: long work should
// watch it. ctx carries the message's trace (the package documentation's
// Tracing): what the handler sends with it continues the trace.
type Handler func(ctx context.Context, m *Message) error

// WorkerOptions are the options of a Worker; the zero value of each is its
// default.
type WorkerOptions struct {
	// Concurrency: handlers running at once; 1 by default.
	Concurrency int
	// Wait: the long poll of each claim; 20 s by default.
	Wait time.Duration
	// Lease: the lease of each claimed message; by default the queue's,
	// read once at start.
	Lease time.Duration
	// ShutdownTimeout: how long running handlers may finish after Run's
	// context ended, before their messages are released; 30 s by default.
	ShutdownTimeout time.Duration
	// Name: kept in the archive as the message's worker, and in the log;
	// by default host-pid.
	Name string
	// MaxBackoff: the cap of the backoff while the server is away; 5 s by
	// default.
	MaxBackoff time.Duration
	// Logger: where the worker logs what it does (the package
	// documentation's Logging); by default log.Default(), Discard for
	// silence.
	Logger Logger
}

// WorkerStats are a worker's counts: messages acked, nacked (handler
// failed), released (unfinished at the shutdown deadline), and lost (the
// outcome was refused: the lease had run out and another worker had the
// message).
type WorkerStats struct {
	Acked, Nacked, Released, Lost int64
}

// Worker runs a Handler for each message of a queue. See Run.
type Worker struct {
	client  *Client
	queue   *Queue
	handler Handler
	opts    WorkerOptions
	lease   time.Duration
	log     Logger

	acked, nacked, released, lost atomic.Int64

	mu       sync.Mutex
	running  map[*running]struct{}
	freed    chan struct{}
	wg       sync.WaitGroup
	deadline atomic.Int64 // unix nanoseconds of the shutdown deadline; 0 before
}

// running is a message whose handler runs, or whose outcome is on its way.
type running struct {
	msg      *Message
	ctx      context.Context // the handler's
	cancel   context.CancelFunc
	beatStop chan struct{}
	beatOnce sync.Once
	mu       sync.Mutex // one outcome: ack, nack or release
	released bool
}

func (r *running) stopBeat() { r.beatOnce.Do(func() { close(r.beatStop) }) }

// NewWorker returns a worker of the queue named queue of c. It sends no
// request until Run.
func NewWorker(c *Client, queue string, h Handler, opts WorkerOptions) *Worker {
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	if opts.Wait <= 0 {
		opts.Wait = 20 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	if opts.Name == "" {
		host, _ := os.Hostname()
		opts.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	lg := opts.Logger
	if lg == nil {
		lg = log.Default()
	}
	// The worker retries by itself, with its own backoff and log.
	wc := c.withRetries(0)
	return &Worker{client: wc, queue: wc.Queue(queue), handler: h, opts: opts,
		log: lg, running: map[*running]struct{}{},
		freed: make(chan struct{}, opts.Concurrency)}
}

// Stats returns the worker's counts so far.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Acked: w.acked.Load(), Nacked: w.nacked.Load(),
		Released: w.released.Load(), Lost: w.lost.Load()}
}

func (w *Worker) logf(level, format string, v ...any) {
	w.log.Printf(level+" sqlq worker "+w.opts.Name+": "+format, v...)
}

// Run claims and handles messages until ctx ends, then stops gracefully,
// and returns nil once stopped (an error only when the queue cannot be
// used at all: it does not exist, the token may not claim from it, the
// server refuses the options).
//
//   - One loop claims as many messages as there are free handlers, with a
//     long poll of Wait, so an idle worker costs one waiting request.
//   - While a handler runs, its message's lease is extended each time a
//     third of it has passed (sooner again after a failed extension), so
//     a handler may run far longer than the lease.
//   - A handler that returns nil acks its message; one that returns an
//     error or panics nacks it with the error's text (a panic's with its
//     stack), and the queue's backoff applies: on its last attempt the
//     message becomes a dead letter.
//   - When the server is unreachable, restarting or busy, claims, acks,
//     nacks and extensions are tried again after a capped exponential
//     backoff with jitter (honouring Retry-After); the log says so.
//   - When ctx ends the worker claims nothing more (its waiting claim is
//     cut short), lets running handlers finish within ShutdownTimeout,
//     and then releases the messages of those still running: a nack with
//     no delay, so another worker gets them at once (the attempt counts),
//     and their handlers' contexts are cancelled.
//
// Stop a worker on SIGTERM with signal.NotifyContext.
func (w *Worker) Run(ctx context.Context) error {
	w.lease = w.opts.Lease
	if w.lease <= 0 {
		var st *QueueStatus
		err := w.withRetry(ctx, "stats", func() (err error) {
			st, err = w.queue.Stats(ctx)
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		w.lease = time.Duration(st.Options.LeaseMs) * time.Millisecond
	}
	w.logf("INFO", "started on queue %s (concurrency %d, lease %d ms)", w.queue.name,
		w.opts.Concurrency, w.lease.Milliseconds())
	err := w.claimLoop(ctx)
	w.shutdown()
	return err
}

// withRetry calls fn until it succeeds, fails for good, or ctx ends;
// transient failures are logged and retried with backoff.
func (w *Worker) withRetry(ctx context.Context, what string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !transient(err) || ctx.Err() != nil {
			if err == nil && attempt > 0 {
				w.worksAgain(what, attempt)
			}
			return err
		}
		if !w.pause(ctx, attempt, what, err) {
			return ctx.Err()
		}
	}
}

// pause waits the backoff of a failed attempt; false when ctx ended.
func (w *Worker) pause(ctx context.Context, attempt int, what string, err error) bool {
	delay := backoffDelay(attempt, 50*time.Millisecond, w.opts.MaxBackoff)
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > delay {
		delay = e.RetryAfter
	}
	w.retrying(what, err, delay, attempt)
	return sleep(ctx, delay) == nil
}

// logEvery: a call that keeps failing is logged on its first failure and
// then every this many tries, not at each one.
const logEvery = 10

// retrying logs a call that failed for want of the server, on its first
// failure and every logEvery tries after it.
func (w *Worker) retrying(what string, err error, delay time.Duration, attempt int) {
	if attempt%logEvery == 0 {
		w.logf("WARN", "%s failed (%v); retrying in %.2fs (try %d)", what, err, delay.Seconds(), attempt+1)
	}
}

// worksAgain logs a call that went through after attempts failed tries.
func (w *Worker) worksAgain(what string, attempts int) {
	w.logf("INFO", "%s works again after %d failed tries", what, attempts)
}

func (w *Worker) claimLoop(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		w.mu.Lock()
		free := w.opts.Concurrency - len(w.running)
		w.mu.Unlock()
		if free <= 0 {
			select {
			case <-w.freed:
			case <-ctx.Done():
			}
			continue
		}
		res, err := w.queue.Claim(ctx, ClaimOptions{Max: free, Wait: w.opts.Wait,
			Lease: w.lease, Worker: w.opts.Name})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !transient(err) {
				if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) ||
					errors.Is(err, ErrForbidden) || errors.Is(err, ErrBadRequest) {
					return err
				}
				w.logf("ERROR", "claim failed: %v", err)
			}
			if !w.pause(ctx, failures, "claim", err) {
				break
			}
			failures++
			continue
		}
		if failures > 0 {
			w.worksAgain("claim", failures)
			failures = 0
		}
		for _, m := range res.Messages {
			if ctx.Err() != nil {
				// Claimed as the worker stopped: given back unworked.
				w.release(&running{msg: m, cancel: func() {}}, "the worker stopped as it claimed the message", true)
				continue
			}
			w.start(ctx, m)
		}
		if len(res.Messages) == 0 && res.RetryAfter > 0 {
			// A limit of the queue (rate, max_leased) held the claim back.
			_ = sleep(ctx, res.RetryAfter)
		}
	}
	return nil
}

// valuesOnly is a context with the values of another but never done: the
// handlers' contexts keep the values of Run's (loggers, ...) but are not
// cancelled with it.
type valuesOnly struct{ context.Context }

func (valuesOnly) Deadline() (time.Time, bool) { return time.Time{}, false }
func (valuesOnly) Done() <-chan struct{}       { return nil }
func (valuesOnly) Err() error                  { return nil }

func (w *Worker) start(ctx context.Context, m *Message) {
	// The handler continues the message's trace: what it sends carries it.
	hctx, cancel := context.WithCancel(w.client.handlerContext(valuesOnly{ctx}, m))
	r := &running{msg: m, ctx: hctx, cancel: cancel, beatStop: make(chan struct{})}
	w.mu.Lock()
	w.running[r] = struct{}{}
	w.mu.Unlock()
	w.wg.Add(1)
	go w.heartbeat(r)
	go func() {
		defer w.wg.Done()
		err := callHandler(w.handler, hctx, m)
		w.finish(r, err)
		r.stopBeat()
		cancel()
		w.mu.Lock()
		delete(w.running, r)
		w.mu.Unlock()
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}()
}

// callHandler runs h, turning a panic into an error with its stack.
func callHandler(h Handler, ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: panicStack()}
		}
	}()
	return h(ctx, m)
}

type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", p.value, p.stack) }

// panicStack is the top of the stack of a recovered panic: the frames from
// the one that panicked on, at most 8.
func panicStack() string {
	lines := strings.Split(strings.TrimSpace(string(debug.Stack())), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+2 < len(lines) {
			lines = lines[i+2:]
			break
		}
	}
	if len(lines) > 16 {
		lines = lines[:16]
	}
	return strings.Join(lines, "\n")
}

// ErrorText is the text a failed handler leaves on its message: the
// error's text (a panic's value and stack), at most MaxErrorBytes bytes of
// UTF-8 (the head and the end of a longer one).
func ErrorText(err error) string {
	text := err.Error()
	if len(text) <= MaxErrorBytes {
		return text
	}
	head := text[:1024]
	tail := text[len(text)-(MaxErrorBytes-1024-5):]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + "\n...\n" + tail
}

// heartbeat extends r's lease each third of it until the handler's outcome
// is settled.
func (w *Worker) heartbeat(r *running) {
	every := w.lease / 3
	soon := w.lease / 10
	if soon > 500*time.Millisecond {
		soon = 500 * time.Millisecond
	}
	next := every
	for {
		t := time.NewTimer(next)
		select {
		case <-r.beatStop:
			t.Stop()
			return
		case <-t.C:
		}
		_, err := r.msg.Extend(context.Background(), w.lease)
		switch {
		case err == nil:
			next = every
		case errors.Is(err, ErrStaleReceipt) || errors.Is(err, ErrNotFound):
			w.logf("WARN", "lease of message %d lost, another worker may have it "+
				"(the handler still runs; its outcome will be refused): %v", r.msg.ID, err)
			r.cancel()
			return
		default: // for want of the server, or refused: tried again soon
			w.logf("WARN", "extending the lease of message %d failed (%v); retrying", r.msg.ID, err)
			next = soon
		}
	}
}

// finish acks (err nil) or nacks the message, retrying while the server is
// away; the heartbeat keeps the lease meanwhile.
func (w *Worker) finish(r *running, herr error) {
	m := r.msg
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		w.logf("WARN", "message %d finished after it was released at the shutdown deadline; its outcome is dropped", m.ID)
		return
	}
	what := "ack"
	var text string
	if herr != nil {
		what = "nack"
		text = ErrorText(herr)
	}
	sentBefore := false
	var outcome string
	err := w.retryOutcome(fmt.Sprintf("%s of message %d", what, m.ID), func() error {
		var err error
		if herr == nil {
			err = m.Ack(context.Background())
		} else {
			outcome, err = m.Nack(context.Background(), text)
		}
		var e *Error
		if errors.As(err, &e) && e.Kind == ErrConnectionFailed && e.Sent {
			sentBefore = true
		}
		return err
	})
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound) && sentBefore:
		// An earlier try went through before its connection broke.
		w.logf("INFO", "%s of message %d: %v (an earlier try went through)", what, m.ID, err)
		outcome = "done"
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrStaleReceipt):
		w.logf("WARN", "%s of message %d refused, its lease was lost: %v", what, m.ID, err)
		w.lost.Add(1)
		return
	case errDeadline == err:
		return
	default:
		w.logf("ERROR", "%s of message %d failed: %v; it is delivered again when its lease ends", what, m.ID, err)
		return
	}
	if herr == nil {
		w.acked.Add(1)
		return
	}
	w.nacked.Add(1)
	w.handlerFailed(m, text, outcome)
}

// handlerFailed logs a handler's failure once its message was nacked;
// outcome is the nack's: "retry", "dead", or anything else when not known.
// The line is the error text's first line; the rest (a panic's stack)
// follows it.
func (w *Worker) handlerFailed(m *Message, text, outcome string) {
	first, rest, _ := strings.Cut(text, "\n")
	if rest != "" {
		rest = "\n" + rest
	}
	head := fmt.Sprintf("message %d of %s failed on attempt %d", m.ID, w.queue.name, m.Attempt)
	if outcome == "dead" {
		w.logf("ERROR", "%s, now a dead letter: %s%s", head, first, rest)
		return
	}
	then := "nacked"
	if outcome == "retry" {
		then = "retried after the queue's backoff"
	}
	w.logf("WARN", "%s, %s: %s%s", head, then, first, rest)
}

var errDeadline = errors.New("the shutdown deadline passed")

// retryOutcome calls fn until it succeeds or fails for good; transient
// failures are retried with backoff until the shutdown deadline (then the
// message comes back when its lease ends).
func (w *Worker) retryOutcome(what string, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !transient(err) {
			if err == nil && attempt > 0 {
				w.worksAgain(what, attempt)
			}
			return err
		}
		delay := backoffDelay(attempt, 50*time.Millisecond, w.opts.MaxBackoff)
		if d := w.deadline.Load(); d != 0 {
			left := time.Until(time.Unix(0, d))
			if left <= 0 {
				w.logf("ERROR", "%s failed at the shutdown deadline (%v); the message comes back when its lease ends", what, err)
				return errDeadline
			}
			if delay > left {
				delay = left
			}
		}
		w.retrying(what, err, delay, attempt)
		time.Sleep(delay)
	}
}

// shutdown lets the running handlers finish until the deadline, then
// releases the messages of those still running.
func (w *Worker) shutdown() {
	deadline := time.Now().Add(w.opts.ShutdownTimeout)
	w.deadline.Store(deadline.UnixNano())
	w.mu.Lock()
	n := len(w.running)
	w.mu.Unlock()
	w.logf("INFO", "stopping: no more claims, %d handler(s) running", n)
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	w.mu.Lock()
	var left []*running
	for r := range w.running {
		left = append(left, r)
	}
	w.mu.Unlock()
	for _, r := range left {
		if !r.mu.TryLock() {
			continue // the handler finished: its ack or nack is under way
		}
		if !r.released {
			r.released = true
			r.stopBeat()
			w.release(r, fmt.Sprintf("worker %s stopped before the handler finished (shutdown timeout %v)",
				w.opts.Name, w.opts.ShutdownTimeout), false)
			r.cancel()
		}
		r.mu.Unlock()
	}
	s := w.Stats()
	w.logf("INFO", "stopped (acked=%d nacked=%d released=%d lost=%d)", s.Acked, s.Nacked, s.Released, s.Lost)
}

// ReleasedPrefix starts the error text of a message a worker gave back
// unfinished.
const ReleasedPrefix = "released: "

// release gives a message back unfinished: ready again at once, for another
// consumer. The HTTP API has no release that leaves the attempt uncounted,
// so this is a nack with no delay and an error text that says why.
// unworked: claimed as the worker stopped, its handler never ran.
func (w *Worker) release(r *running, why string, unworked bool) {
	_, err := r.msg.NackAfter(context.Background(), ReleasedPrefix+why, 0)
	if err != nil {
		w.logf("ERROR", "release of message %d failed (it comes back when its lease ends): %v", r.msg.ID, err)
		return
	}
	w.released.Add(1)
	if unworked {
		w.logf("WARN", "message %d released unworked: it was claimed as the worker stopped", r.msg.ID)
		return
	}
	w.logf("WARN", "message %d released unfinished at the shutdown deadline", r.msg.ID)
}
