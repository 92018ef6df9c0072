package sqlq_test

// What a worker logs, as its Logger receives it: the lines of the Python
// and Node.js workers (docs/clients.md, "What the workers log"), each
// starting with its level. A failing handler (its error, a panic's stack
// under the line, the dead letter, start and stop), a lost lease and the
// refused ack, the server away and back.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

// logged keeps the lines a worker logs.
type logged struct {
	mu    sync.Mutex
	lines []string
}

func (l *logged) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *logged) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// with returns the lines that contain text.
func (l *logged) with(text string) []string {
	var out []string
	for _, line := range l.all() {
		if strings.Contains(line, text) {
			out = append(out, line)
		}
	}
	return out
}

// wait waits for a line that contains text and returns it.
func (l *logged) wait(t *testing.T, text string) string {
	t.Helper()
	return waitFor(t, strconv.Quote(text)+" in the log", 30*time.Second, func() (string, bool) {
		lines := l.with(text)
		if len(lines) == 0 {
			return "", false
		}
		return lines[0], true
	})
}

func TestWorkerLogAFailingHandler(t *testing.T) {
	_, c, q := newQueue(t, "fails", sqlq.Options{"max_attempts": 2, "backoff_base_ms": 0})
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "x"}))
	l := &logged{}
	_, stop := runWorker(t, c, "fails", func(ctx context.Context, m *sqlq.Message) error {
		if m.Attempt == 1 {
			return errors.New("smtp 451 on attempt 1")
		}
		panic("smtp 451 on attempt 2")
	}, sqlq.WorkerOptions{Name: "w1", Logger: l})
	l.wait(t, "now a dead letter")
	stop()
	lines := l.all()
	want := []string{
		"INFO sqlq worker w1: started on queue fails (concurrency 1, lease 30000 ms)",
		fmt.Sprintf("WARN sqlq worker w1: message %d of fails failed on attempt 1, "+
			"retried after the queue's backoff: smtp 451 on attempt 1", id),
	}
	if len(lines) != 5 || lines[0] != want[0] || lines[1] != want[1] {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	// A panic's line is followed by its stack, where the handler is.
	dead := fmt.Sprintf("ERROR sqlq worker w1: message %d of fails failed on attempt 2, "+
		"now a dead letter: panic: smtp 451 on attempt 2\n", id)
	if !strings.HasPrefix(lines[2], dead) || !strings.Contains(lines[2], "worker_log_test.go:") {
		t.Fatalf("the dead letter's line:\n%s", lines[2])
	}
	// The handler whose nack was just logged may not have left the
	// running ones yet: the stop counts it or not.
	stopping := regexp.MustCompile(`^INFO sqlq worker w1: stopping: no more claims, [01] handler\(s\) running$`)
	if !stopping.MatchString(lines[3]) || lines[4] != "INFO sqlq worker w1: stopped (acked=0 nacked=2 released=0 lost=0)" {
		t.Fatalf("the last lines:\n%s", strings.Join(lines[3:], "\n"))
	}
}

func TestWorkerLogALostLeaseAndTheRefusedAck(t *testing.T) {
	_, c, q := newQueue(t, "lost", sqlq.Options{"lease_ms": 1000})
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "x"}))
	started, finish := make(chan struct{}), make(chan struct{})
	l := &logged{}
	w, _ := runWorker(t, c, "lost", func(ctx context.Context, m *sqlq.Message) error {
		close(started)
		<-finish
		return nil
	}, sqlq.WorkerOptions{Name: "w1", Logger: l})
	<-started
	// Someone deletes the message under the running handler: its next
	// extension is refused.
	if n := must[int64](t)(q.DeleteMessage(bg(), id)); n != 1 {
		t.Fatalf("deleted %d", n)
	}
	lost := l.wait(t, "lease of message")
	close(finish)
	refused := l.wait(t, "ack of message")
	wantLost := fmt.Sprintf("WARN sqlq worker w1: lease of message %d lost, another worker may have it "+
		"(the handler still runs; its outcome will be refused): sqlq: 404 not_found: ", id)
	wantRefused := fmt.Sprintf("WARN sqlq worker w1: ack of message %d refused, its lease was lost: sqlq: 404 not_found: ", id)
	if !strings.HasPrefix(lost, wantLost) || !strings.HasPrefix(refused, wantRefused) {
		t.Fatalf("lines:\n%s\n%s", lost, refused)
	}
	if ws := w.Stats(); ws.Lost != 1 || ws.Acked != 0 {
		t.Fatalf("worker stats: %+v", ws)
	}
}

func TestWorkerLogTheServerAwayAndBack(t *testing.T) {
	s, c, q := newQueue(t, "away", nil)
	l := &logged{}
	w, _ := runWorker(t, c, "away", func(ctx context.Context, m *sqlq.Message) error { return nil },
		sqlq.WorkerOptions{Name: "w1", Logger: l, Wait: 200 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	l.wait(t, "started on queue")
	s.kill()
	l.wait(t, "claim failed")
	// Ten tries later it says so again, and no more often.
	waitFor(t, "the eleventh try", 30*time.Second, func() (bool, bool) {
		return true, len(l.with("claim failed")) == 2
	})
	s.start()
	back := l.wait(t, "claim works again")
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "after"}))
	waitFor(t, "the ack", 20*time.Second, func() (bool, bool) { return true, w.Stats().Acked == 1 })
	failed := l.with("claim failed")
	first := regexp.MustCompile(`^WARN sqlq worker w1: claim failed \(sqlq: connection_failed: ` +
		`POST /v1/queues/away/claim: .*\); retrying in [0-9]+\.[0-9]{2}s \(try 1\)$`)
	if !first.MatchString(failed[0]) {
		t.Fatalf("first failure: %q", failed[0])
	}
	for i, line := range failed {
		if !strings.HasSuffix(line, fmt.Sprintf(" (try %d)", 1+10*i)) {
			t.Fatalf("failure %d: %q", i, line)
		}
	}
	if !regexp.MustCompile(`^INFO sqlq worker w1: claim works again after [0-9]+ failed tries$`).MatchString(back) {
		t.Fatalf("back: %q", back)
	}
}
