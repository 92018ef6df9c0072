package sqlq_test

// What the client does when the server or the network fails for a while,
// as during a database failover or a server restart: it keeps trying for
// long enough, and a send it tries again is stored once.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

// replyEater is a TCP proxy in front of the server that, on its first
// connection, passes the request on and lets the server answer, but closes
// the client's side instead of passing the reply back: the request was
// carried out and its reply lost, as when the network breaks at the wrong
// moment. Later connections pass through.
type replyEater struct {
	l            net.Listener
	connections  atomic.Int64
	repliesEaten atomic.Int64
}

func newReplyEater(t *testing.T, upstream string) *replyEater {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyEater{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			eat := p.connections.Add(1) == 1
			go p.serve(client, upstream, eat)
		}
	}()
	return p
}

func (p *replyEater) url() string { return "http://" + p.l.Addr().String() }

func (p *replyEater) serve(client net.Conn, upstream string, eat bool) {
	defer client.Close()
	server, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		io.Copy(server, client)
		server.Close()
	}()
	if !eat {
		io.Copy(client, server)
		return
	}
	buf := make([]byte, 1)
	if n, _ := server.Read(buf); n > 0 {
		p.repliesEaten.Add(1)
	}
}

func TestRetryASendWhoseReplyWasLostIsStoredOnce(t *testing.T) {
	s := startServer(t)
	admin := s.client(t)
	q := admin.Queue("jobs")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), nil))
	proxy := newReplyEater(t, fmt.Sprintf("127.0.0.1:%d", s.port))
	c := must[*sqlq.Client](t)(sqlq.New(proxy.url(), sqlq.WithToken(adminToken),
		sqlq.WithBackoff(10*time.Millisecond, 100*time.Millisecond)))
	defer c.Close()
	id := must[int64](t)(c.Queue("jobs").Send(bg(), sqlq.Outgoing{Payload: "once"}))
	if n := proxy.repliesEaten.Load(); n != 1 {
		t.Fatalf("%d replies eaten", n)
	}
	if st := stats(t, q); st.Ready != 1 {
		t.Fatalf("stats: %+v", st)
	}
	m := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{})).Messages
	if len(m) != 1 || m[0].ID != id || m[0].Payload.String() != "once" {
		t.Fatalf("claimed %+v, sent %d", m, id)
	}
}

func TestRetryAClaimWhoseReplyWasLostIsNotRetried(t *testing.T) {
	s := startServer(t)
	admin := s.client(t)
	q := admin.Queue("jobs")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), nil))
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "x"}))
	proxy := newReplyEater(t, fmt.Sprintf("127.0.0.1:%d", s.port))
	c := must[*sqlq.Client](t)(sqlq.New(proxy.url(), sqlq.WithToken(adminToken)))
	defer c.Close()
	_, err := c.Queue("jobs").Claim(bg(), sqlq.ClaimOptions{})
	var e *sqlq.Error
	if !errors.As(err, &e) || e.Kind != sqlq.ErrConnectionFailed || !e.Sent {
		t.Fatalf("claim through the proxy: %v", err)
	}
	if st := stats(t, q); st.Leased != 1 || st.Claims != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// logLines counts the lines logged with a word in them.
type logLines struct {
	mu    sync.Mutex
	word  string
	count int
	seen  chan struct{}
}

func (l *logLines) Printf(format string, v ...any) {
	if strings.Contains(fmt.Sprintf(format, v...), l.word) {
		l.mu.Lock()
		l.count++
		l.mu.Unlock()
		select {
		case l.seen <- struct{}{}:
		default:
		}
	}
}

func TestRetryASendWhileTheServerIsDownForAWhileGetsThrough(t *testing.T) {
	s := startServer(t)
	admin := s.client(t)
	q := admin.Queue("jobs")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), nil))
	s.kill()
	// The server is down for longer than the first few tries take: the
	// client goes on trying (a failover takes 10 to 15 s) and the send is
	// carried out once the server is back.
	logged := &logLines{word: "retrying", seen: make(chan struct{}, 100)}
	c := must[*sqlq.Client](t)(sqlq.New(s.url(), sqlq.WithToken(adminToken),
		sqlq.WithBackoff(50*time.Millisecond, 200*time.Millisecond), sqlq.WithLogger(logged)))
	defer c.Close()
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := c.Queue("jobs").Send(bg(), sqlq.Outgoing{Payload: "through"})
		done <- result{id, err}
	}()
	for i := 0; i < 5; i++ {
		select {
		case <-logged.seen:
		case r := <-done:
			t.Fatalf("the client stopped trying: %+v", r)
		case <-time.After(30 * time.Second):
			t.Fatal("no retry logged")
		}
	}
	s.start()
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the send did not get through")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	m := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{})).Messages
	if len(m) != 1 || m[0].ID != r.id {
		t.Fatalf("claimed %+v, sent %d", m, r.id)
	}
}

func TestRetryForBoundsTheTries(t *testing.T) {
	s := startServer(t)
	s.kill()
	c := must[*sqlq.Client](t)(sqlq.New(s.url(), sqlq.WithRetries(1000), sqlq.WithRetryFor(500*time.Millisecond),
		sqlq.WithBackoff(10*time.Millisecond, 50*time.Millisecond)))
	defer c.Close()
	start := time.Now()
	_, err := c.Queue("jobs").Send(bg(), sqlq.Outgoing{Payload: "never"})
	var e *sqlq.Error
	if !errors.As(err, &e) || e.Kind != sqlq.ErrConnectionFailed || e.Sent {
		t.Fatalf("send to a dead server: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("gave up after %v", time.Since(start))
	}
}

func TestRetryUnavailableIsRetriedUntilRetryFor(t *testing.T) {
	// A server that answers 503 with Retry-After: the client waits at
	// least that long between tries, and gives up after retry-for.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var requests atomic.Int64
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
					requests.Add(1)
					body := `{"error":{"code":"unavailable","message":"the database is away"}}`
					fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"+
						"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
			}()
		}
	}()
	c := must[*sqlq.Client](t)(sqlq.New("http://"+l.Addr().String(), sqlq.WithRetryFor(2900*time.Millisecond)))
	defer c.Close()
	start := time.Now()
	_, err = c.Queues(bg())
	var e *sqlq.Error
	if !errors.Is(err, sqlq.ErrUnavailable) || !errors.As(err, &e) || e.RetryAfter != time.Second || e.Status != 503 {
		t.Fatalf("queues: %v", err)
	}
	// Tries at 0, >=1 s and >=2 s; a fourth would start after retry-for.
	if n := requests.Load(); n != 3 {
		t.Fatalf("%d requests in %v", n, time.Since(start))
	}
}
