package sqlq_test

// The worker runtime against a real `sqlq serve`: concurrency, acks, nacks
// with the error's text, leases kept while a handler runs, a server killed
// mid-run, a worker process killed mid-message, SIGTERM.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

// TestMain runs the test binary as a worker process when the tests start
// one (workerProc).
func TestMain(m *testing.M) {
	if os.Getenv("SQLQ_GO_WORKER_PROC") != "" {
		os.Exit(workerProcMain())
	}
	os.Exit(m.Run())
}

// runWorker runs a worker of c until the test stops it (stop) or ends.
func runWorker(t *testing.T, c *sqlq.Client, queue string, h sqlq.Handler, opts sqlq.WorkerOptions) (*sqlq.Worker, func()) {
	t.Helper()
	if opts.Wait == 0 {
		opts.Wait = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = log.New(os.Stderr, t.Name()+" ", log.Lmicroseconds)
	}
	w := sqlq.NewWorker(c, queue, h, opts)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), runKey{}, t.Name()))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Errorf("the worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// runKey names a value of the context given to Run, which handlers see.
type runKey struct{}

func TestWorkerConcurrentHandlersAckEachMessageOnce(t *testing.T) {
	_, c, q := newQueue(t, "conc", nil)
	const n = 40
	batch := make([]sqlq.Outgoing, n)
	for i := range batch {
		batch[i].Payload = fmt.Sprintf("job %d", i)
	}
	ids := must[*sqlq.SendResult](t)(q.SendBatch(bg(), batch)).IDs
	var mu sync.Mutex
	seen := map[int64]int{}
	active, peak := 0, 0
	four := make(chan struct{})
	w, stop := runWorker(t, c, "conc", func(ctx context.Context, m *sqlq.Message) error {
		mu.Lock()
		seen[m.ID]++
		active++
		if active > peak {
			peak = active
			if peak == 4 {
				close(four)
			}
		}
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		if ctx.Value(runKey{}) != t.Name() {
			return errors.New("the handler's context lost the values of Run's")
		}
		// The first handlers meet: with fewer than four running at once
		// they fail, and their messages are nacked.
		select {
		case <-four:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("four handlers never ran at once")
		}
	}, sqlq.WorkerOptions{Concurrency: 4})
	waitFor(t, "every ack", 30*time.Second, func() (bool, bool) { return true, stats(t, q).Acks == n })
	stop()
	st := stats(t, q)
	if st.Ready != 0 || st.Leased != 0 || st.Nacks != 0 || st.Claims != n {
		t.Fatalf("stats: %+v", st)
	}
	if peak != 4 || len(seen) != n {
		t.Fatalf("peak %d, %d messages seen", peak, len(seen))
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("message %d handled %d times", id, seen[id])
		}
	}
	if ws := w.Stats(); ws.Acked != n || ws.Nacked != 0 {
		t.Fatalf("worker stats: %+v", ws)
	}
}

func TestWorkerFailingHandlerIsNackedThenDeadLettered(t *testing.T) {
	_, c, q := newQueue(t, "fails", sqlq.Options{"max_attempts": 2, "backoff_base_ms": 0})
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "x"}))
	var mu sync.Mutex
	var calls []int
	w, stop := runWorker(t, c, "fails", func(ctx context.Context, m *sqlq.Message) error {
		mu.Lock()
		calls = append(calls, m.Attempt)
		mu.Unlock()
		if m.Attempt == 1 {
			return fmt.Errorf("bad thing on attempt %d", m.Attempt)
		}
		panic(fmt.Sprintf("bad thing on attempt %d", m.Attempt))
	}, sqlq.WorkerOptions{Concurrency: 2})
	waitFor(t, "the dead letter", 20*time.Second, func() (bool, bool) { return true, stats(t, q).Dead == 1 })
	stop() // the worker counts a nack once its reply came
	m := must[*sqlq.MessageInfo](t)(q.Message(bg(), id))
	if m.State != "dead" || m.Attempts != 2 || len(m.Errors) != 2 {
		t.Fatalf("message: %+v", m)
	}
	if m.Errors[0].Error != "bad thing on attempt 1" {
		t.Fatalf("first error: %q", m.Errors[0].Error)
	}
	// A panic's text is its value and the top of its stack.
	if e := m.Errors[1].Error; !strings.HasPrefix(e, "panic: bad thing on attempt 2\n") || !strings.Contains(e, "worker_test.go") {
		t.Fatalf("second error: %q", e)
	}
	dead := must[[]sqlq.MessageInfo](t)(q.Dead(bg(), 0, 0))
	if len(dead) != 1 || dead[0].LastError != m.Errors[1].Error {
		t.Fatalf("dead letters: %+v", dead)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0] != 1 || calls[1] != 2 {
		t.Fatalf("calls: %v", calls)
	}
	if ws := w.Stats(); ws.Nacked != 2 {
		t.Fatalf("worker stats: %+v", ws)
	}
}

func TestWorkerErrorTextIsBounded(t *testing.T) {
	text := sqlq.ErrorText(errors.New("é" + strings.Repeat("x", 10000) + "the end"))
	if len(text) > sqlq.MaxErrorBytes || !strings.HasPrefix(text, "éxxx") || !strings.HasSuffix(text, "the end") {
		t.Fatalf("%d bytes: %.40q...%q", len(text), text, text[len(text)-10:])
	}
	if sqlq.ErrorText(errors.New("short")) != "short" {
		t.Fatal("a short text changed")
	}
}

func TestWorkerLongHandlerKeepsItsLease(t *testing.T) {
	// Long enough that a loaded machine delays no extension past a lease.
	const lease = 2 * time.Second
	_, c, q := newQueue(t, "slow", sqlq.Options{"lease_ms": lease.Milliseconds()})
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "long"}))
	started, finish := make(chan struct{}), make(chan struct{})
	var runs sync.Map
	w, stop := runWorker(t, c, "slow", func(ctx context.Context, m *sqlq.Message) error {
		n, _ := runs.LoadOrStore(m.ID, new(int))
		*(n.(*int))++
		close(started)
		<-finish
		return nil
	}, sqlq.WorkerOptions{Concurrency: 2, Wait: 500 * time.Millisecond})
	<-started
	// For four leases' time, another consumer finds nothing to claim.
	looks := 0
	for until := time.Now().Add(4 * lease); time.Now().Before(until); looks++ {
		if r := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Wait: 200 * time.Millisecond})); len(r.Messages) != 0 {
			t.Fatalf("claimed %+v while its handler ran", r.Messages)
		}
	}
	if m := must[*sqlq.MessageInfo](t)(q.Message(bg(), id)); m.State != "leased" || m.Attempts != 1 {
		t.Fatalf("message: %+v", m)
	}
	close(finish)
	waitFor(t, "the ack", 20*time.Second, func() (bool, bool) { return true, stats(t, q).Acks == 1 })
	stop()
	if st := stats(t, q); st.Claims != 1 || st.Expirations != 0 || st.Nacks != 0 || looks < 4 {
		t.Fatalf("stats %+v after %d looks", st, looks)
	}
	if ws := w.Stats(); ws.Lost != 0 || ws.Acked != 1 {
		t.Fatalf("worker stats: %+v", ws)
	}
}

func TestWorkerServerKilledMidRun(t *testing.T) {
	// Longer than a restart of the server takes on a loaded machine.
	const lease = 4 * time.Second
	s, c, q := newQueue(t, "crash", sqlq.Options{"lease_ms": lease.Milliseconds()})
	const n = 30
	batch := make([]sqlq.Outgoing, n)
	for i := range batch {
		batch[i].Payload = strconv.Itoa(i)
	}
	ids := must[*sqlq.SendResult](t)(q.SendBatch(bg(), batch)).IDs
	var mu sync.Mutex
	seen := map[int64]int{}
	holding, restarted := make(chan struct{}), make(chan struct{})
	_, stop := runWorker(t, c, "crash", func(ctx context.Context, m *sqlq.Message) error {
		mu.Lock()
		seen[m.ID]++
		mu.Unlock()
		if m.ID != ids[10] {
			return nil
		}
		// In flight across the crash: its lease must be extended again
		// once the server is back, and its ack go through.
		close(holding)
		select {
		case <-restarted:
		case <-time.After(30 * time.Second):
			return errors.New("no restart")
		}
		// Two leases more: only extensions made to the restarted server
		// keep it.
		time.Sleep(2*lease + 500*time.Millisecond)
		return nil
	}, sqlq.WorkerOptions{Concurrency: 3, Wait: time.Second})
	select {
	case <-holding:
	case <-time.After(20 * time.Second):
		t.Fatal("message 10 never came")
	}
	s.kill()
	s.start() // same port, same database
	close(restarted)
	waitFor(t, "every message handled", 60*time.Second, func() (bool, bool) {
		mu.Lock()
		defer mu.Unlock()
		return true, len(seen) == n
	})
	waitFor(t, "the queue empty", 60*time.Second, func() (bool, bool) {
		st := stats(t, q)
		return true, st.Ready == 0 && st.Leased == 0 && st.Delayed == 0
	})
	st := stats(t, q)
	mu.Lock()
	held := seen[ids[10]]
	mu.Unlock()
	if st.Dead != 0 || held != 1 {
		t.Fatalf("stats %+v, the held message handled %d times", st, held)
	}
	// A claim the server committed but whose reply the kill cut off holds
	// its messages until their lease runs out (at most the two free
	// handlers'); nothing else may expire.
	if st.Expirations > 2 {
		t.Fatalf("%d expirations", st.Expirations)
	}
	stop()
}

// workerProc is a worker in a child process (this test binary, see
// TestMain). It appends what it does to DIR/events: "started ID ATTEMPT",
// "stopping" when SIGTERM came, "done ID", "exited acked=N released=N".
// MODE "hang": handlers run until released; "slow": until the file
// DIR/finish-ID exists.
func workerProc(t *testing.T, url, queue, mode string, concurrency int, shutdown time.Duration) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SQLQ_GO_WORKER_PROC=1", "SQLQ_URL="+url, "SQLQ_QUEUE="+queue,
		"SQLQ_MODE="+mode, "SQLQ_DIR="+dir, "SQLQ_CONCURRENCY="+strconv.Itoa(concurrency),
		"SQLQ_SHUTDOWN="+shutdown.String())
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("worker process log:\n%s", b)
		}
	})
	return cmd, dir
}

func events(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "events"))
	return string(b)
}

func waitEvent(t *testing.T, dir, event string) {
	t.Helper()
	waitFor(t, "the worker process to say "+strconv.Quote(event), 20*time.Second, func() (bool, bool) {
		return true, strings.Contains(events(dir), event+"\n")
	})
}

func workerProcMain() int {
	dir := os.Getenv("SQLQ_DIR")
	var mu sync.Mutex
	event := func(format string, v ...any) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(filepath.Join(dir, "events"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(f, format+"\n", v...)
		f.Close()
	}
	c, err := sqlq.New(os.Getenv("SQLQ_URL"), sqlq.WithToken(adminToken))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	concurrency, _ := strconv.Atoi(os.Getenv("SQLQ_CONCURRENCY"))
	shutdown, _ := time.ParseDuration(os.Getenv("SQLQ_SHUTDOWN"))
	mode := os.Getenv("SQLQ_MODE")
	w := sqlq.NewWorker(c, os.Getenv("SQLQ_QUEUE"), func(ctx context.Context, m *sqlq.Message) error {
		event("started %d %d", m.ID, m.Attempt)
		finish := filepath.Join(dir, fmt.Sprintf("finish-%d", m.ID))
		for {
			if _, err := os.Stat(finish); err == nil && mode == "slow" {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		event("done %d", m.ID)
		return nil
	}, sqlq.WorkerOptions{Concurrency: concurrency, Wait: 2 * time.Second, ShutdownTimeout: shutdown})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		event("stopping")
	}()
	if err := w.Run(ctx); err != nil {
		event("failed %v", err)
		return 1
	}
	s := w.Stats()
	event("exited acked=%d released=%d", s.Acked, s.Released)
	return 0
}

func TestWorkerKilledMidMessageIsRedelivered(t *testing.T) {
	const lease = 1500 * time.Millisecond
	s, _, q := newQueue(t, "killed", sqlq.Options{"lease_ms": lease.Milliseconds()})
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "survive me"}))
	cmd, dir := workerProc(t, s.url(), "killed", "hang", 1, 30*time.Second)
	waitEvent(t, dir, fmt.Sprintf("started %d 1", id))
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if m := must[*sqlq.MessageInfo](t)(q.Message(bg(), id)); m.State != "leased" {
		t.Fatalf("after the kill: %+v", m)
	}
	// Delivered again once the lease the dead worker last extended ran out.
	got := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Wait: 10 * time.Second})).Messages
	if len(got) != 1 || got[0].ID != id || got[0].Attempt != 2 || got[0].Payload.String() != "survive me" {
		t.Fatalf("claimed %+v", got)
	}
	if err := got[0].Ack(bg()); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q); st.Ready != 0 || st.Leased != 0 || st.Acks != 1 || st.Expirations != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestWorkerSigtermFinishesOrReleasesAndClaimsNothingMore(t *testing.T) {
	s, _, q := newQueue(t, "term", sqlq.Options{"lease_ms": 60000})
	ids := must[*sqlq.SendResult](t)(q.SendBatch(bg(), []sqlq.Outgoing{{Payload: "a"}, {Payload: "b"}, {Payload: "c"}})).IDs
	a, b, cID := ids[0], ids[1], ids[2]
	cmd, dir := workerProc(t, s.url(), "term", "slow", 2, 3*time.Second)
	waitEvent(t, dir, fmt.Sprintf("started %d 1", a))
	waitEvent(t, dir, fmt.Sprintf("started %d 1", b))
	cmd.Process.Signal(syscall.SIGTERM)
	waitEvent(t, dir, "stopping")
	// One handler finishes within the shutdown timeout, the other does not.
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("finish-%d", a)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the worker process: %v\n%s", err, events(dir))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker process did not exit")
	}
	ev := events(dir)
	if !strings.Contains(ev, "exited acked=1 released=1\n") || strings.Contains(ev, fmt.Sprintf("started %d", cID)) {
		t.Fatalf("events:\n%s", ev)
	}
	st := stats(t, q)
	if st.Leased != 0 || st.Ready != 2 || st.Acks != 1 || st.Claims != 2 {
		t.Fatalf("stats: %+v", st)
	}
	// Released: ready again at once, not at the end of its minute-long
	// lease.
	mb := must[*sqlq.MessageInfo](t)(q.Message(bg(), b))
	if mb.State != "ready" || !strings.HasPrefix(mb.LastError, sqlq.ReleasedPrefix) {
		t.Fatalf("b: %+v", mb)
	}
	if mc := must[*sqlq.MessageInfo](t)(q.Message(bg(), cID)); mc.Attempts != 0 {
		t.Fatalf("c: %+v", mc)
	}
	if _, err := q.Message(bg(), a); !errors.Is(err, sqlq.ErrNotFound) {
		t.Fatalf("a: %v", err)
	}
}

func TestWorkerThatCannotClaimReturnsTheError(t *testing.T) {
	s, c, _ := newQueue(t, "jobs", nil)
	nop := func(context.Context, *sqlq.Message) error { return nil }
	w := sqlq.NewWorker(c, "nope", nop, sqlq.WorkerOptions{Logger: sqlq.Discard})
	if err := w.Run(bg()); !errors.Is(err, sqlq.ErrNotFound) {
		t.Fatalf("Run on a missing queue: %v", err)
	}
	w = sqlq.NewWorker(c, "jobs", nop, sqlq.WorkerOptions{Wait: time.Hour, Logger: sqlq.Discard})
	var e *sqlq.Error
	if err := w.Run(bg()); !errors.As(err, &e) || e.Code != "wait_too_long" {
		t.Fatalf("Run with a wait over the server's: %v", err)
	}
	anon := must[*sqlq.Client](t)(sqlq.New(s.url()))
	defer anon.Close()
	w = sqlq.NewWorker(anon, "jobs", nop, sqlq.WorkerOptions{Lease: time.Second, Logger: sqlq.Discard})
	if err := w.Run(bg()); !errors.Is(err, sqlq.ErrUnauthorized) {
		t.Fatalf("Run without a token: %v", err)
	}
}
