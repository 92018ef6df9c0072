// A worker of the queue "emails" that stops gracefully on SIGTERM or
// SIGINT, and a producer that sends it a few messages:
//
//	sqlq serve &                       # http://127.0.0.1:8080
//	go run ./examples/worker -send 10  # from clients/go
//
// SQLQ_URL and SQLQ_TOKEN name the server and its token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sqlq.dev/go/sqlq"
)

type mail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func main() {
	send := flag.Int("send", 0, "send this many messages first")
	concurrency := flag.Int("concurrency", 4, "handlers at once")
	flag.Parse()
	url := os.Getenv("SQLQ_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	c, err := sqlq.New(url, sqlq.WithToken(os.Getenv("SQLQ_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	emails := c.Queue("emails")
	_, err = emails.Create(ctx, sqlq.Options{"max_attempts": 3, "lease_ms": 30000})
	if err != nil && !errors.Is(err, sqlq.ErrAlreadyExists) {
		log.Fatal(err)
	}
	if *send > 0 {
		batch := make([]sqlq.Outgoing, *send)
		for i := range batch {
			batch[i] = sqlq.Outgoing{Payload: mail{To: fmt.Sprintf("user%d@example.com", i), Subject: "hello"}}
		}
		r, err := emails.SendBatch(ctx, batch)
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("sent %d messages, ids %d..%d", len(r.IDs), r.IDs[0], r.IDs[len(r.IDs)-1])
	}

	w := sqlq.NewWorker(c, "emails", func(ctx context.Context, m *sqlq.Message) error {
		var x mail
		if err := m.Payload.Decode(&x); err != nil {
			return fmt.Errorf("not a mail: %w", err) // nacked; a dead letter after 3 attempts
		}
		select { // the work; ctx ends when the lease is lost or the message released
		case <-time.After(time.Duration(rand.Intn(200)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		log.Printf("sent mail to %s (message %d, attempt %d)", x.To, m.ID, m.Attempt)
		return nil // acked
	}, sqlq.WorkerOptions{Concurrency: *concurrency})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	s := w.Stats()
	log.Printf("stopped: %d acked, %d nacked, %d released", s.Acked, s.Nacked, s.Released)
}
