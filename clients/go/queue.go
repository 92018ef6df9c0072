package sqlq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Options are the options of a queue (or ring, rotation) as the API names
// them, for Create and Change: "max_attempts", "lease_ms",
// "backoff_base_ms", "unique_for_ms", "max_leased", "labels", ... (the
// HTTP API's reference lists them all). A nil value in Change lifts a
// limit. The server refuses names it does not know (unknown_field), so a
// typo never passes silently.
type Options map[string]any

// QueueInfo is a queue and its options.
type QueueInfo struct {
	Name            string            `json:"name"`
	Kind            string            `json:"kind"`
	MaxAttempts     int               `json:"max_attempts"`
	LeaseMs         int64             `json:"lease_ms"`
	BackoffBaseMs   int64             `json:"backoff_base_ms"`
	BackoffMaxMs    int64             `json:"backoff_max_ms"`
	Archive         bool              `json:"archive"`
	RetentionMs     int64             `json:"retention_ms"`
	MaxPayloadBytes int64             `json:"max_payload_bytes"`
	DeadRetentionMs int64             `json:"dead_retention_ms"`
	UniqueForMs     int64             `json:"unique_for_ms"`
	Groups          string            `json:"groups"`
	MaxLeased       *int64            `json:"max_leased"`
	RateLimit       *float64          `json:"rate_limit"`
	RateBurst       *int64            `json:"rate_burst"`
	GroupLimit      *int64            `json:"group_limit"`
	DeadLetterQueue *string           `json:"dead_letter_queue"`
	Labels          map[string]string `json:"labels"`
	CreatedAt       time.Time         `json:"created_at"`
	Paused          bool              `json:"paused"`
}

// QueueStats are a queue's counts.
type QueueStats struct {
	Name             string `json:"name"`
	Ready            int64  `json:"ready"`
	Delayed          int64  `json:"delayed"`
	Leased           int64  `json:"leased"`
	Dead             int64  `json:"dead"`
	Archived         int64  `json:"archived"`
	OldestReadyAgeMs int64  `json:"oldest_ready_age_ms"`
	Sends            int64  `json:"sends"`
	Claims           int64  `json:"claims"`
	Acks             int64  `json:"acks"`
	Nacks            int64  `json:"nacks"`
	Expirations      int64  `json:"expirations"`
	DeadLettered     int64  `json:"dead_lettered"`
	Expired          int64  `json:"expired"` // jobs not started by their expiry, dead-lettered or dropped
	Paused           bool   `json:"paused"`
}

// QueueStatus is the reply of GET /v1/queues/{name}.
type QueueStatus struct {
	Name    string     `json:"name"`
	Kind    string     `json:"kind"`
	Stats   QueueStats `json:"stats"`
	Options QueueInfo  `json:"options"`
}

// Queue is a work queue of the server: a handle, making one sends nothing.
type Queue struct {
	client *Client
	name   string
	path   string
}

// Queue returns a handle of the queue name.
func (c *Client) Queue(name string) *Queue {
	return &Queue{client: c, name: name, path: "/v1/queues/" + seg(name)}
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Queues lists the queues the token may see.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	var r struct {
		Queues []QueueInfo `json:"queues"`
	}
	err := c.get(ctx, "/v1/queues", nil, &r)
	return r.Queues, err
}

// Create creates the queue with the options given (nil: the defaults).
func (q *Queue) Create(ctx context.Context, opts Options) (*QueueInfo, error) {
	return postAs[QueueInfo](ctx, q.client, q.path, opts)
}

// Stats reads the queue's counts and options.
func (q *Queue) Stats(ctx context.Context) (*QueueStatus, error) {
	return getAs[QueueStatus](ctx, q.client, q.path, nil)
}

// Get reads the queue's options (CreatedAt left out).
func (q *Queue) Get(ctx context.Context) (*QueueInfo, error) {
	s, err := q.Stats(ctx)
	if err != nil {
		return nil, err
	}
	// The options of GET /v1/queues/{name} leave out what stats says.
	info := s.Options
	info.Name, info.Kind, info.Paused = s.Name, s.Kind, s.Stats.Paused
	return &info, nil
}

// Change changes the options given; the others stay. A nil value lifts a
// limit.
func (q *Queue) Change(ctx context.Context, opts Options) (*QueueInfo, error) {
	return doAs[QueueInfo](ctx, q.client, call{method: "PATCH", path: q.path, body: opts, idempotent: true})
}

func (q *Queue) info(ctx context.Context, sub string) (*QueueInfo, error) {
	return doAs[QueueInfo](ctx, q.client, call{method: "POST", path: q.path + sub, idempotent: true})
}

// Pause stops claims (they get nothing); sends go on.
func (q *Queue) Pause(ctx context.Context) (*QueueInfo, error) { return q.info(ctx, "/pause") }

// Resume lets claims take messages again.
func (q *Queue) Resume(ctx context.Context) (*QueueInfo, error) { return q.info(ctx, "/resume") }

// Drop deletes the queue with its messages, dead letters and archive.
func (q *Queue) Drop(ctx context.Context) error { return q.client.del(ctx, q.path, nil) }

// Delete is Drop.
func (q *Queue) Delete(ctx context.Context) error { return q.Drop(ctx) }

// Purge deletes every message (ready, delayed, leased) and returns how
// many; dead letters and archive stay.
func (q *Queue) Purge(ctx context.Context) (int64, error) {
	var r struct {
		Purged int64 `json:"purged"`
	}
	err := q.client.post(ctx, q.path+"/purge", nil, &r)
	return r.Purged, err
}

// Rates are counts per second.
type Rates struct {
	Sends        float64 `json:"sends"`
	Claims       float64 `json:"claims"`
	Acks         float64 `json:"acks"`
	DeadLettered float64 `json:"dead_lettered"`
}

// History is a queue's depth every StepS seconds over the last hour.
type History struct {
	StepS  float64 `json:"step_s"`
	Points []struct {
		At      time.Time `json:"at"`
		Ready   int64     `json:"ready"`
		Delayed int64     `json:"delayed"`
		Leased  int64     `json:"leased"`
		Dead    int64     `json:"dead"`
		Rates   Rates     `json:"rates"`
	} `json:"points"`
}

// History reads the queue's depth over the last hour, as this server kept
// it.
func (q *Queue) History(ctx context.Context) (*History, error) {
	return getAs[History](ctx, q.client, q.path+"/history", nil)
}

// Outgoing is a message to send. The zero value of each field but Payload
// is the server's default.
type Outgoing struct {
	// Payload: a string is sent as text, []byte as bytes, json.RawMessage
	// as the JSON value it holds, and any other value as its JSON
	// encoding (it comes back as the same JSON, with the header
	// content-type: application/json).
	Payload any
	// Priority: higher first.
	Priority int32
	// Delay: ready this long after the send (milliseconds on the wire).
	Delay time.Duration
	// RunAt: ready at this time (not with Delay).
	RunAt time.Time
	// Dedup: the message's dedup key; without one the client gives it a
	// key of its own (WithIdempotentSends).
	Dedup string
	// Group: the message's group (ordered and fair queues).
	Group string
	// Headers: text headers kept with the message (traceparent, ...).
	Headers map[string]string
}

func (m Outgoing) wire() (map[string]any, error) {
	w := map[string]any{}
	if err := payloadFields(m.Payload, w); err != nil {
		return nil, fmt.Errorf("sqlq: payload: %w", err)
	}
	if m.Priority != 0 {
		w["priority"] = m.Priority
	}
	if m.Delay != 0 {
		w["delay_ms"] = m.Delay.Milliseconds()
	}
	if !m.RunAt.IsZero() {
		w["run_at"] = formatTime(m.RunAt)
	}
	if m.Dedup != "" {
		w["dedup"] = m.Dedup
	}
	if m.Group != "" {
		w["group"] = m.Group
	}
	if len(m.Headers) > 0 {
		w["headers"] = m.Headers
	}
	return w, nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// SendResult says what a batch send stored: the ids in request order, and
// for each whether its dedup key matched a message already there (then
// the id is that message's and nothing was stored for it).
type SendResult struct {
	IDs       []int64 `json:"ids"`
	Duplicate []bool  `json:"duplicate"`
}

// Send sends one message and returns its id (that of the message already
// there when its dedup key matched one). It returns once the server
// committed it. Unless m.Headers has a traceparent of its own, the
// message carries the trace of ctx: see Client.TraceHeaders.
func (q *Queue) Send(ctx context.Context, m Outgoing) (int64, error) {
	r, err := q.SendBatch(ctx, []Outgoing{m})
	if err != nil {
		return 0, err
	}
	return r.IDs[0], nil
}

// SendBatch sends many messages in one commit: all are stored, or none.
// Each message without a traceparent header of its own carries the trace
// of ctx (Client.TraceHeaders; as Send does).
func (q *Queue) SendBatch(ctx context.Context, msgs []Outgoing) (*SendResult, error) {
	msgs = q.client.withTrace(ctx, msgs)
	wire := make([]map[string]any, len(msgs))
	idem := len(msgs) > 0
	for i, m := range msgs {
		w, err := m.wire()
		if err != nil {
			return nil, err
		}
		if _, ok := w["dedup"]; !ok && q.client.idempotentSend {
			w["dedup"] = idemKey() // made once, kept across the retries
		}
		if _, ok := w["dedup"]; !ok {
			idem = false
		}
		wire[i] = w
	}
	var r SendResult
	// With a dedup key on every message a repeat stores nothing twice.
	err := q.client.do(ctx, call{method: "POST", path: q.path + "/messages",
		body: map[string]any{"messages": wire}, idempotent: idem}, &r)
	if err != nil {
		return nil, err
	}
	if len(r.IDs) != len(msgs) {
		return nil, fmt.Errorf("sqlq: send: %d ids for %d messages", len(r.IDs), len(msgs))
	}
	return &r, nil
}

// Message is a claimed message.
type Message struct {
	ID             int64
	Receipt        string
	Attempt        int
	Priority       int32
	Payload        Payload
	Headers        map[string]string
	Group          string
	EnqueuedAt     time.Time
	LeaseExpiresAt time.Time
	// Raw is the server's object of the message.
	Raw json.RawMessage

	queue *Queue
}

type messageFields struct {
	ID             int64             `json:"id"`
	Receipt        string            `json:"receipt"`
	Attempt        int               `json:"attempt"`
	Priority       int32             `json:"priority"`
	Headers        map[string]string `json:"headers"`
	Group          string            `json:"group"`
	EnqueuedAt     time.Time         `json:"enqueued_at"`
	LeaseExpiresAt time.Time         `json:"lease_expires_at"`
}

// Queue is the queue the message was claimed from.
func (m *Message) Queue() *Queue { return m.queue }

// Ack acknowledges the message: done, gone from the queue.
func (m *Message) Ack(ctx context.Context) error { return m.queue.Ack(ctx, m.Receipt) }

// Nack fails this attempt with the error text errText: the message comes
// back after the queue's backoff, or becomes a dead letter on its last
// attempt. It returns "retry" or "dead".
func (m *Message) Nack(ctx context.Context, errText string) (string, error) {
	return m.queue.Nack(ctx, m.Receipt, errText)
}

// NackAfter is Nack with the message ready again after delay rather than
// the queue's backoff.
func (m *Message) NackAfter(ctx context.Context, errText string, delay time.Duration) (string, error) {
	return m.queue.NackAfter(ctx, m.Receipt, errText, delay)
}

// Extend renews the lease to lease from now and returns its new end.
func (m *Message) Extend(ctx context.Context, lease time.Duration) (time.Time, error) {
	t, err := m.queue.Extend(ctx, m.Receipt, lease)
	if err == nil {
		m.LeaseExpiresAt = t
	}
	return t, err
}

// ClaimOptions are the options of a claim. The zero value claims one
// message, without waiting, for the queue's lease.
type ClaimOptions struct {
	// Max: at most this many messages (1..1000); 0 is 1.
	Max int
	// Wait: how long to wait for a message when none is ready (a long
	// poll); 0 answers at once.
	Wait time.Duration
	// Lease: each message's lease; 0 is the queue's.
	Lease time.Duration
	// Worker: text kept in the archive.
	Worker string
	// Ack: a receipt to ack in the same request and commit.
	Ack string
}

// ClaimResult is what a claim got. LimitedBy and RetryAfter are set when
// a limit of the queue gave fewer messages than asked for, Limited when
// the reply's size cut it short (claim again), Paused when the queue is
// paused (nothing is handed out until it is resumed), GroupsBusy when
// nothing came while messages were ready because their groups held them
// back (an earlier message of the group in flight or waiting for its retry,
// or the group at its group_limit).
type ClaimResult struct {
	Messages   []*Message
	LimitedBy  string
	RetryAfter time.Duration
	Limited    bool
	Paused     bool
	GroupsBusy bool
}

// Claim claims up to opts.Max messages, waiting up to opts.Wait for one.
// Cancelling ctx ends a waiting claim early: once the request went out,
// the claim is still answered, with the messages the server took for it
// at that moment, if any (the caller's to work or give back), else none;
// before that, the claim fails with ctx's error.
func (q *Queue) Claim(ctx context.Context, opts ClaimOptions) (*ClaimResult, error) {
	body := map[string]any{}
	if opts.Max > 0 {
		body["max"] = opts.Max
	}
	if opts.Wait > 0 {
		body["wait_ms"] = opts.Wait.Milliseconds()
	}
	if opts.Lease > 0 {
		body["lease_ms"] = opts.Lease.Milliseconds()
	}
	if opts.Worker != "" {
		body["worker"] = opts.Worker
	}
	if opts.Ack != "" {
		body["ack"] = opts.Ack
	}
	var r struct {
		Messages     []json.RawMessage `json:"messages"`
		LimitedBy    string            `json:"limited_by"`
		RetryAfterMs int64             `json:"retry_after_ms"`
		Limited      bool              `json:"limited"`
		Paused       bool              `json:"paused"`
		GroupsBusy   bool              `json:"groups_busy"`
	}
	err := q.client.do(ctx, call{method: "POST", path: q.path + "/claim", body: body, wait: opts.Wait,
		halfClose: opts.Wait > 0}, &r)
	if err != nil {
		return nil, err
	}
	out := &ClaimResult{LimitedBy: r.LimitedBy, Limited: r.Limited, Paused: r.Paused,
		GroupsBusy: r.GroupsBusy, RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond}
	for _, raw := range r.Messages {
		var f messageFields
		var p Payload
		if err := decodeWithPayload(raw, &f, &p); err != nil {
			return nil, fmt.Errorf("sqlq: claim: reply: %w", err)
		}
		out.Messages = append(out.Messages, &Message{ID: f.ID, Receipt: f.Receipt,
			Attempt: f.Attempt, Priority: f.Priority, Payload: p, Headers: f.Headers,
			Group: f.Group, EnqueuedAt: f.EnqueuedAt, LeaseExpiresAt: f.LeaseExpiresAt,
			Raw: raw, queue: q})
	}
	return out, nil
}

// Ack acknowledges the message of receipt.
func (q *Queue) Ack(ctx context.Context, receipt string) error {
	return q.client.post(ctx, q.path+"/ack", map[string]any{"receipt": receipt}, nil)
}

// AckResult is the outcome of one receipt of AckMany: OK, or Err.
type AckResult struct {
	OK  bool
	Err *Error
}

// AckMany acks many receipts in one commit and returns one result per
// receipt, in order.
func (q *Queue) AckMany(ctx context.Context, receipts []string) ([]AckResult, error) {
	var r struct {
		Results []struct {
			OK    bool `json:"ok"`
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"results"`
	}
	if err := q.client.post(ctx, q.path+"/ack", map[string]any{"receipts": receipts}, &r); err != nil {
		return nil, err
	}
	out := make([]AckResult, len(r.Results))
	for i, x := range r.Results {
		out[i].OK = x.OK
		if x.Error != nil {
			out[i].Err = errorFor(0, x.Error.Code, x.Error.Message, 0)
		}
	}
	return out, nil
}

func (q *Queue) nack(ctx context.Context, body map[string]any) (string, error) {
	var r struct {
		Outcome string `json:"outcome"`
	}
	err := q.client.post(ctx, q.path+"/nack", body, &r)
	return r.Outcome, err
}

// Nack fails the attempt of receipt with the error text errText (kept on
// the message; "" for none). It returns "retry" or "dead" (attempts used
// up).
func (q *Queue) Nack(ctx context.Context, receipt, errText string) (string, error) {
	body := map[string]any{"receipt": receipt}
	if errText != "" {
		body["error"] = errText
	}
	return q.nack(ctx, body)
}

// NackAfter is Nack with the message ready again after delay (0: at once)
// rather than after the queue's backoff.
func (q *Queue) NackAfter(ctx context.Context, receipt, errText string, delay time.Duration) (string, error) {
	body := map[string]any{"receipt": receipt, "delay_ms": delay.Milliseconds()}
	if errText != "" {
		body["error"] = errText
	}
	return q.nack(ctx, body)
}

// Extend renews the lease of receipt to lease from now and returns its new
// end.
func (q *Queue) Extend(ctx context.Context, receipt string, lease time.Duration) (time.Time, error) {
	var r struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	err := q.client.do(ctx, call{method: "POST", path: q.path + "/extend",
		body: map[string]any{"receipt": receipt, "lease_ms": lease.Milliseconds()}, idempotent: true}, &r)
	return r.LeaseExpiresAt, err
}

// ErrorEntry is one attempt's error in a message's history.
type ErrorEntry struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// MessageInfo is a message as GET .../messages/{id}, the listings, the
// dead letters and the archive show it; each field is set when the
// message has it.
type MessageInfo struct {
	ID             int64             `json:"id"`
	State          string            `json:"state"`
	Priority       int32             `json:"priority"`
	Attempts       int               `json:"attempts"`
	Payload        Payload           `json:"-"`
	Headers        map[string]string `json:"headers"`
	Dedup          string            `json:"dedup"`
	Group          string            `json:"group"`
	EnqueuedAt     time.Time         `json:"enqueued_at"`
	ReadyAt        time.Time         `json:"ready_at"`
	LeaseExpiresAt time.Time         `json:"lease_expires_at"`
	Worker         string            `json:"worker"`
	LastError      string            `json:"last_error"`
	Errors         []ErrorEntry      `json:"errors"`
	DiedAt         time.Time         `json:"died_at"`
	CompletedAt    time.Time         `json:"completed_at"`
}

// UnmarshalJSON decodes the server's object, payload included.
func (m *MessageInfo) UnmarshalJSON(b []byte) error {
	type fields MessageInfo
	return decodeWithPayload(b, (*fields)(m), &m.Payload)
}

// Filter selects messages for Messages, Count and Bulk; its zero value
// selects every message.
type Filter struct {
	State          string // ready, delayed, leased, dead, archived, ...
	MinPriority    *int32
	MaxPriority    *int32
	Dedup          string
	Group          string
	HeaderName     string // with HeaderValue: messages with this header
	HeaderValue    string
	PayloadPrefix  string
	EnqueuedAfter  time.Time
	EnqueuedBefore time.Time
}

func (f Filter) query() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("state", f.State)
	if f.MinPriority != nil {
		v.Set("min_priority", strconv.Itoa(int(*f.MinPriority)))
	}
	if f.MaxPriority != nil {
		v.Set("max_priority", strconv.Itoa(int(*f.MaxPriority)))
	}
	set("dedup", f.Dedup)
	set("group", f.Group)
	if f.HeaderName != "" {
		v.Set("header", f.HeaderName+"="+f.HeaderValue)
	}
	set("payload_prefix", f.PayloadPrefix)
	if !f.EnqueuedAfter.IsZero() {
		v.Set("enqueued_after", formatTime(f.EnqueuedAfter))
	}
	if !f.EnqueuedBefore.IsZero() {
		v.Set("enqueued_before", formatTime(f.EnqueuedBefore))
	}
	return v
}

func (f Filter) body() map[string]any {
	b := map[string]any{}
	for k, vs := range f.query() {
		if k != "header" && k != "min_priority" && k != "max_priority" {
			b[k] = vs[0]
		}
	}
	if f.MinPriority != nil {
		b["min_priority"] = *f.MinPriority
	}
	if f.MaxPriority != nil {
		b["max_priority"] = *f.MaxPriority
	}
	if f.HeaderName != "" {
		b["header"] = map[string]string{"name": f.HeaderName, "value": f.HeaderValue}
	}
	return b
}

// Page is one page of a listing; pass NextCursor back (with the same
// filter) until it is "".
type Page struct {
	Messages   []MessageInfo `json:"messages"`
	NextCursor string        `json:"next_cursor"`
}

// Message reads the message id, wherever it is (queue, dead letters,
// archive).
func (q *Queue) Message(ctx context.Context, id int64) (*MessageInfo, error) {
	return getAs[MessageInfo](ctx, q.client, q.path+"/messages/"+strconv.FormatInt(id, 10), nil)
}

// Messages lists one page of the messages f selects, in id order: at most
// limit (0: the server's 100), from cursor ("" for the first page).
func (q *Queue) Messages(ctx context.Context, f Filter, limit int, cursor string) (*Page, error) {
	v := f.query()
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	return getAs[Page](ctx, q.client, q.path+"/messages", v)
}

// EachMessage calls fn with every message f selects, page after page of
// limit (0: the server's default), until fn returns an error (then
// EachMessage returns it).
func (q *Queue) EachMessage(ctx context.Context, f Filter, limit int, fn func(MessageInfo) error) error {
	cursor := ""
	for {
		p, err := q.Messages(ctx, f, limit, cursor)
		if err != nil {
			return err
		}
		for _, m := range p.Messages {
			if err := fn(m); err != nil {
				return err
			}
		}
		if p.NextCursor == "" {
			return nil
		}
		cursor = p.NextCursor
	}
}

// Count is how many messages f selects.
func (q *Queue) Count(ctx context.Context, f Filter) (int64, error) {
	var r struct {
		Count int64 `json:"count"`
	}
	err := q.client.get(ctx, q.path+"/messages/count", f.query(), &r)
	return r.Count, err
}

// DeleteMessage deletes the message id from the queue, the dead letters or
// the archive; it returns how many were deleted.
func (q *Queue) DeleteMessage(ctx context.Context, id int64) (int64, error) {
	var r struct {
		Deleted int64 `json:"deleted"`
	}
	err := q.client.del(ctx, q.path+"/messages/"+strconv.FormatInt(id, 10), &r)
	return r.Deleted, err
}

func (q *Queue) change(ctx context.Context, tail string, body any) (int64, error) {
	var r struct {
		Changed int64 `json:"changed"`
	}
	err := q.client.post(ctx, q.path+"/messages"+tail, body, &r)
	return r.Changed, err
}

func idTail(id int64, action string) string {
	return "/" + strconv.FormatInt(id, 10) + "/" + action
}

// RetryMessage makes a delayed message ready now, or redrives a dead
// letter.
func (q *Queue) RetryMessage(ctx context.Context, id int64) (int64, error) {
	return q.change(ctx, idTail(id, "retry"), nil)
}

// CancelMessage makes the message a dead letter with the error
// "cancelled", whatever its state.
func (q *Queue) CancelMessage(ctx context.Context, id int64) (int64, error) {
	return q.change(ctx, idTail(id, "cancel"), nil)
}

// RescheduleMessage makes the message ready at runAt.
func (q *Queue) RescheduleMessage(ctx context.Context, id int64, runAt time.Time) (int64, error) {
	return q.change(ctx, idTail(id, "reschedule"), map[string]any{"run_at": formatTime(runAt)})
}

// SetPriority changes the message's priority.
func (q *Queue) SetPriority(ctx context.Context, id int64, priority int32) (int64, error) {
	return q.change(ctx, idTail(id, "priority"), map[string]any{"priority": priority})
}

// Bulk selects the messages of a bulk change: IDs (with State: where they
// are, "dead" or "archived", the queue when "") or Filter.
type Bulk struct {
	IDs    []int64
	State  string
	Filter *Filter
	// RunAt for "reschedule", Priority for "priority".
	RunAt    time.Time
	Priority int32
}

// Bulk applies action ("delete", "cancel", "retry", "reschedule" or
// "priority") to many messages and returns how many changed.
func (q *Queue) Bulk(ctx context.Context, action string, b Bulk) (int64, error) {
	switch action {
	case "delete", "cancel", "retry", "reschedule", "priority":
	default:
		return 0, fmt.Errorf("sqlq: unknown bulk action %q", action)
	}
	body := map[string]any{}
	if b.IDs != nil {
		body["ids"] = b.IDs
	}
	if b.State != "" {
		body["state"] = b.State
	}
	if b.Filter != nil {
		body["filter"] = b.Filter.body()
	}
	if action == "reschedule" {
		body["run_at"] = formatTime(b.RunAt)
	}
	if action == "priority" {
		body["priority"] = b.Priority
	}
	return q.change(ctx, "/"+action, body)
}

// Dead lists the queue's dead letters in id order: at most limit (0: the
// server's 100) after the id afterID.
func (q *Queue) Dead(ctx context.Context, limit int, afterID int64) ([]MessageInfo, error) {
	var r struct {
		Dead []MessageInfo `json:"dead"`
	}
	err := q.client.get(ctx, q.path+"/dead", pageQuery(limit, afterID), &r)
	return r.Dead, err
}

func pageQuery(limit int, afterID int64) url.Values {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if afterID > 0 {
		v.Set("after_id", strconv.FormatInt(afterID, 10))
	}
	return v
}

func (q *Queue) redrive(ctx context.Context, body any) (int64, error) {
	var r struct {
		Redriven int64 `json:"redriven"`
	}
	err := q.client.post(ctx, q.path+"/dead/redrive", body, &r)
	return r.Redriven, err
}

// Redrive puts the dead letters ids back in the queue, ready now with fresh
// attempts, and returns how many went back.
func (q *Queue) Redrive(ctx context.Context, ids []int64) (int64, error) {
	if ids == nil {
		ids = []int64{}
	}
	return q.redrive(ctx, map[string]any{"ids": ids})
}

// RedriveAll puts every dead letter back in the queue.
func (q *Queue) RedriveAll(ctx context.Context) (int64, error) {
	return q.redrive(ctx, map[string]any{"all": true})
}

// PurgeDead deletes every dead letter and returns how many.
func (q *Queue) PurgeDead(ctx context.Context) (int64, error) {
	var r struct {
		Purged int64 `json:"purged"`
	}
	err := q.client.del(ctx, q.path+"/dead", &r)
	return r.Purged, err
}

// Archive lists the archived messages of a queue created with "archive":
// true, in id order: at most limit (0: 100) after afterID.
func (q *Queue) Archive(ctx context.Context, limit int, afterID int64) ([]MessageInfo, error) {
	var r struct {
		Archive []MessageInfo `json:"archive"`
	}
	err := q.client.get(ctx, q.path+"/archive", pageQuery(limit, afterID), &r)
	return r.Archive, err
}
