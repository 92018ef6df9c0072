package sqlq_test

// A real `sqlq serve` for the tests: SQLQ_BIN (else the dev build's) on a
// fresh SQLite database in a temporary directory, with a token file; it can
// be killed and started again on the same port and database.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

const (
	adminToken = "go-admin-0123456789abcdef"
	claimToken = "go-claimer-0123456789abcdef"
)

type server struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func serverBin(t *testing.T) string {
	if b := os.Getenv("SQLQ_BIN"); b != "" {
		return b
	}
	b, err := filepath.Abs(filepath.Join("..", "..", "build", "dev", "sqlq"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("no sqlq program: set SQLQ_BIN or build the dev preset (%v)", err)
	}
	return b
}

// startServer starts a server for the test; it is stopped when the test
// ends.
func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{t: t, bin: serverBin(t), dir: t.TempDir()}
	tokens := fmt.Sprintf("%s admin:*\n%s claim:jobs*\n", adminToken, claimToken)
	if err := os.WriteFile(filepath.Join(s.dir, "tokens"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) url() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the server, on the port it had after a restart.
func (s *server) start() {
	s.t.Helper()
	portFile := filepath.Join(s.dir, "port")
	os.Remove(portFile)
	logf, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(s.bin, "--db", "sqlite:"+filepath.Join(s.dir, "db"), "serve",
		"--port", strconv.Itoa(s.port), "--port-file", portFile,
		"--tokens", filepath.Join(s.dir, "tokens"), "--shutdown-timeout", "2s")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) { cmd.Wait(); close(done) }(s.cmd)
	port := waitFor(s.t, "the server's port file", 15*time.Second, func() (int, bool) {
		select {
		case <-done:
			s.t.Fatalf("sqlq serve exited: %s", s.log())
		default:
		}
		b, err := os.ReadFile(portFile)
		if err != nil {
			return 0, false
		}
		p, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return p, err == nil && p > 0
	})
	s.port = port
}

// kill sends SIGKILL: no shutdown at all.
func (s *server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.kill()
	}
}

func (s *server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return string(b)
}

// client is an admin client of s, closed when the test ends.
func (s *server) client(t *testing.T, opts ...sqlq.Option) *sqlq.Client {
	t.Helper()
	c, err := sqlq.New(s.url(), append([]sqlq.Option{sqlq.WithToken(adminToken)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitFor polls cond until it says true, and fails the test after timeout.
func waitFor[T any](t *testing.T, what string, timeout time.Duration, cond func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if v, ok := cond(); ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// must fails the test on an error.
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func bg() context.Context { return context.Background() }

func stats(t *testing.T, q *sqlq.Queue) sqlq.QueueStats {
	t.Helper()
	st, err := q.Stats(bg())
	if err != nil {
		t.Fatal(err)
	}
	return st.Stats
}

// newQueue starts a server and creates the queue name on it with opts.
func newQueue(t *testing.T, name string, opts sqlq.Options) (*server, *sqlq.Client, *sqlq.Queue) {
	t.Helper()
	s := startServer(t)
	c := s.client(t)
	q := c.Queue(name)
	if _, err := q.Create(bg(), opts); err != nil {
		t.Fatal(err)
	}
	return s, c, q
}
