package sqlq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sqlq.dev/go/sqlq"
)

// Examples: compiled with the tests, not run (they need a server).

func Example() {
	ctx := context.Background()
	c, err := sqlq.New("http://127.0.0.1:8080", sqlq.WithToken(os.Getenv("SQLQ_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	emails := c.Queue("emails")
	if _, err := emails.Create(ctx, sqlq.Options{"max_attempts": 3}); err != nil && !errors.Is(err, sqlq.ErrAlreadyExists) {
		log.Fatal(err)
	}
	id, err := emails.Send(ctx, sqlq.Outgoing{Payload: map[string]string{"to": "ada@example.com"}, Priority: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent", id)
}

func ExampleQueue_Claim() {
	ctx := context.Background()
	c, _ := sqlq.New("http://127.0.0.1:8080")
	q := c.Queue("emails")
	r, err := q.Claim(ctx, sqlq.ClaimOptions{Max: 10, Wait: 20 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range r.Messages {
		var mail struct {
			To string `json:"to"`
		}
		if err := m.Payload.Decode(&mail); err != nil {
			_, _ = m.Nack(ctx, "not a mail: "+err.Error())
			continue
		}
		fmt.Println("sending to", mail.To, "attempt", m.Attempt)
		if err := m.Ack(ctx); errors.Is(err, sqlq.ErrStaleReceipt) {
			fmt.Println("too late: the lease ran out and another consumer has it")
		}
	}
}

func ExampleWorker() {
	c, err := sqlq.New("http://127.0.0.1:8080", sqlq.WithToken(os.Getenv("SQLQ_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// SIGTERM or SIGINT ends the context: the worker claims nothing more,
	// lets running handlers finish (ShutdownTimeout) and releases the rest.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w := sqlq.NewWorker(c, "emails", func(ctx context.Context, m *sqlq.Message) error {
		fmt.Println("sending", m.Payload) // return nil: acked; an error: nacked with its text
		return nil
	}, sqlq.WorkerOptions{Concurrency: 4})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleWithTraceHeaders() {
	c, _ := sqlq.New("http://127.0.0.1:8080")
	// An HTTP handler hands its work to a queue: the message carries the
	// request's trace, and so does what the message's handler sends.
	http.HandleFunc("/signup", func(w http.ResponseWriter, r *http.Request) {
		ctx := sqlq.WithTraceHeaders(r.Context(), r.Header.Get("traceparent"), r.Header.Get("tracestate"))
		if _, err := c.Queue("emails").Send(ctx, sqlq.Outgoing{Payload: r.FormValue("email")}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
}

func ExampleError() {
	c, _ := sqlq.New("http://127.0.0.1:8080")
	_, err := c.Queue("emails").Stats(context.Background())
	var e *sqlq.Error
	switch {
	case err == nil:
	case errors.Is(err, sqlq.ErrNotFound):
		fmt.Println("no such queue")
	case errors.As(err, &e):
		fmt.Println(e.Status, e.Code, e.Message)
	}
}
