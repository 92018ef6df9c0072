package sqlq_test

// Every operation of the Go client against a real `sqlq serve`.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sqlq.dev/go/sqlq"
)

func TestClientQueueLifecycle(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	q := c.Queue("life")
	made := must[*sqlq.QueueInfo](t)(q.Create(bg(), sqlq.Options{"max_attempts": 3, "lease_ms": 60000,
		"labels": map[string]string{"team": "a"}}))
	if made.Name != "life" || made.MaxAttempts != 3 || made.LeaseMs != 60000 || made.Labels["team"] != "a" {
		t.Fatalf("created %+v", made)
	}
	_, err := q.Create(bg(), nil)
	var e *sqlq.Error
	if !errors.Is(err, sqlq.ErrAlreadyExists) || !errors.As(err, &e) || e.Status != 409 || e.Code != "already_exists" {
		t.Fatalf("second create: %v", err)
	}
	names := func(qs []sqlq.QueueInfo) (out []string) {
		for _, x := range qs {
			out = append(out, x.Name)
		}
		return out
	}
	if got := names(must[[]sqlq.QueueInfo](t)(c.Queues(bg()))); !contains(got, "life") {
		t.Fatalf("queues: %v", got)
	}
	all := must[*sqlq.All](t)(c.All(bg()))
	if !contains(names(all.Queues), "life") {
		t.Fatalf("all: %+v", all)
	}
	if got := must[*sqlq.QueueInfo](t)(q.Change(bg(), sqlq.Options{"max_attempts": 10})); got.MaxAttempts != 10 {
		t.Fatalf("change: %+v", got)
	}
	if got := must[*sqlq.QueueInfo](t)(q.Change(bg(), sqlq.Options{"max_leased": 5})); got.MaxLeased == nil || *got.MaxLeased != 5 {
		t.Fatalf("max_leased: %+v", got)
	}
	if got := must[*sqlq.QueueInfo](t)(q.Change(bg(), sqlq.Options{"max_leased": nil})); got.MaxLeased != nil {
		t.Fatalf("max_leased lifted: %+v", got)
	}
	if !must[*sqlq.QueueInfo](t)(q.Pause(bg())).Paused || !stats(t, q).Paused {
		t.Fatal("not paused")
	}
	if got := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{})); !got.Paused || len(got.Messages) != 0 {
		t.Fatalf("claim of a paused queue: %+v", got)
	}
	// Ready, but behind its group's leased head: the claim says why.
	o := c.Queue("ordered")
	must[*sqlq.QueueInfo](t)(o.Create(bg(), sqlq.Options{"groups": "ordered"}))
	for _, p := range []string{"a1", "a2"} {
		must[int64](t)(o.Send(bg(), sqlq.Outgoing{Payload: p, Group: "g"}))
	}
	if got := must[*sqlq.ClaimResult](t)(o.Claim(bg(), sqlq.ClaimOptions{Max: 10})); len(got.Messages) != 1 || got.GroupsBusy {
		t.Fatalf("first claim of the ordered queue: %+v", got)
	}
	if got := must[*sqlq.ClaimResult](t)(o.Claim(bg(), sqlq.ClaimOptions{Max: 10})); !got.GroupsBusy || len(got.Messages) != 0 {
		t.Fatalf("claim behind a leased head: %+v", got)
	}
	if must[*sqlq.QueueInfo](t)(q.Resume(bg())).Paused {
		t.Fatal("still paused")
	}
	if got := must[*sqlq.QueueInfo](t)(q.Get(bg())); got.MaxAttempts != 10 || got.Paused || got.Name != "life" {
		t.Fatalf("get: %+v", got)
	}
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "a"}))
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "b"}))
	if n := must[int64](t)(q.Purge(bg())); n != 2 {
		t.Fatalf("purged %d", n)
	}
	if st := stats(t, q); st.Ready != 0 || st.Sends != 2 {
		t.Fatalf("stats %+v", st)
	}
	if h := must[*sqlq.History](t)(q.History(bg())); h.StepS <= 0 {
		t.Fatalf("history %+v", h)
	}
	// The overview is read at most once a second.
	waitFor(t, "the queue in the overview", 5*time.Second, func() (bool, bool) {
		o := must[map[string]any](t)(c.Overview(bg()))
		return true, strings.Contains(mustJSON(t, o["queues"]), `"name":"life"`)
	})
	if err := q.Drop(bg()); err != nil {
		t.Fatal(err)
	}
	_, err = q.Stats(bg())
	if !errors.Is(err, sqlq.ErrNotFound) || !errors.As(err, &e) || e.Code != "not_found" || e.Status != 404 ||
		!strings.Contains(e.Message, "life") {
		t.Fatalf("stats of a dropped queue: %v", err)
	}
}

func TestClientSendClaimAckNackExtend(t *testing.T) {
	_, _, q := newQueue(t, "msgs", sqlq.Options{"max_attempts": 2, "lease_ms": 30000})
	send := func(m sqlq.Outgoing) int64 { return must[int64](t)(q.Send(bg(), m)) }
	i1 := send(sqlq.Outgoing{Payload: "hello", Headers: map[string]string{"tenant": "acme"}})
	i2 := send(sqlq.Outgoing{Payload: []byte{0xff, 0, 1}, Priority: 5})
	i3 := send(sqlq.Outgoing{Payload: map[string]any{"to": "ada", "n": 3}, Group: "g1"})
	i4 := send(sqlq.Outgoing{Payload: "later", Delay: 10 * time.Minute})
	i5 := send(sqlq.Outgoing{Payload: "once", Dedup: "k1"})
	if again := send(sqlq.Outgoing{Payload: "twice", Dedup: "k1"}); again != i5 {
		t.Fatalf("dedup: %d != %d", again, i5)
	}
	r := must[*sqlq.SendResult](t)(q.SendBatch(bg(), []sqlq.Outgoing{{Payload: "x"}, {Payload: "y", Dedup: "k1"}}))
	if !reflect.DeepEqual(r.Duplicate, []bool{false, true}) || r.IDs[1] != i5 {
		t.Fatalf("batch: %+v", r)
	}
	got := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Max: 10}))
	msgs := got.Messages
	byID := map[int64]*sqlq.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
		if m.Attempt != 1 {
			t.Fatalf("attempt %d", m.Attempt)
		}
	}
	if len(msgs) != 5 || msgs[0].ID != i2 {
		t.Fatalf("claimed %d, first %d (highest priority first)", len(msgs), msgs[0].ID)
	}
	if _, ok := byID[i4]; ok {
		t.Fatal("a delayed message was claimed")
	}
	if !bytes.Equal(byID[i2].Payload, []byte{0xff, 0, 1}) {
		t.Fatalf("bytes: %v", byID[i2].Payload)
	}
	if byID[i1].Payload.String() != "hello" || byID[i1].Headers["tenant"] != "acme" {
		t.Fatalf("text: %+v", byID[i1])
	}
	var v struct {
		To string `json:"to"`
		N  int    `json:"n"`
	}
	if err := byID[i3].Payload.Decode(&v); err != nil || v.To != "ada" || v.N != 3 || byID[i3].Group != "g1" ||
		byID[i3].Headers["content-type"] != "application/json" {
		t.Fatalf("json: %+v %v", byID[i3], err)
	}
	before := byID[i1].LeaseExpiresAt
	if after := must[time.Time](t)(byID[i1].Extend(bg(), 2*time.Minute)); !after.After(before) {
		t.Fatalf("extend: %v !> %v", after, before)
	}
	if err := byID[i1].Ack(bg()); err != nil {
		t.Fatal(err)
	}
	if err := byID[i1].Ack(bg()); !errors.Is(err, sqlq.ErrNotFound) {
		t.Fatalf("second ack: %v", err)
	}
	if out := must[string](t)(q.NackAfter(bg(), byID[i2].Receipt, "smtp 451", 0)); out != "retry" {
		t.Fatalf("nack: %s", out)
	}
	m := must[*sqlq.MessageInfo](t)(q.Message(bg(), i2))
	if m.LastError != "smtp 451" || m.Errors[0].Error != "smtp 451" || m.Errors[0].Attempt != 1 {
		t.Fatalf("message: %+v", m)
	}
	// The second attempt is the last: its nack dead-letters.
	again := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Wait: 2 * time.Second})).Messages
	if len(again) != 1 || again[0].ID != i2 || again[0].Attempt != 2 {
		t.Fatalf("again: %+v", again)
	}
	if out := must[string](t)(again[0].Nack(bg(), "no")); out != "dead" {
		t.Fatalf("last nack: %s", out)
	}
	// A batch ack answers per receipt.
	results := must[[]sqlq.AckResult](t)(q.AckMany(bg(), []string{byID[i3].Receipt, "bogus"}))
	if !results[0].OK || results[1].OK || results[1].Err.Code != "invalid_argument" ||
		!errors.Is(results[1].Err, sqlq.ErrBadRequest) {
		t.Fatalf("ack many: %+v", results)
	}
	// Ack and claim the next in one request.
	var rest []*sqlq.Message
	for _, x := range msgs {
		if x.ID != i1 && x.ID != i2 && x.ID != i3 {
			rest = append(rest, x)
		}
	}
	next := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Ack: rest[0].Receipt}))
	if len(next.Messages) != 0 { // only the delayed one is left
		t.Fatalf("next: %+v", next.Messages)
	}
	if err := q.Ack(bg(), rest[0].Receipt); !errors.Is(err, sqlq.ErrNotFound) {
		t.Fatalf("ack after ack-and-claim: %v", err)
	}
	must[time.Time](t)(q.Extend(bg(), rest[1].Receipt, time.Second))
	if err := q.Ack(bg(), rest[1].Receipt); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q); st.Leased != 0 || st.Delayed != 1 || st.Dead != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestClientIdempotentSendsCarryKeys(t *testing.T) {
	s, _, q := newQueue(t, "idem", nil)
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "a"}))
	m := must[*sqlq.MessageInfo](t)(q.Message(bg(), id))
	if !strings.HasPrefix(m.Dedup, "idem:") || len(m.Dedup) != len("idem:")+32 {
		t.Fatalf("dedup key %q", m.Dedup)
	}
	plain := s.client(t, sqlq.WithIdempotentSends(false))
	id = must[int64](t)(plain.Queue("idem").Send(bg(), sqlq.Outgoing{Payload: "b"}))
	if m := must[*sqlq.MessageInfo](t)(q.Message(bg(), id)); m.Dedup != "" {
		t.Fatalf("dedup key %q without idempotent sends", m.Dedup)
	}
}

func TestClientStaleReceipt(t *testing.T) {
	s := startServer(t)
	q := s.client(t).Queue("stale")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), sqlq.Options{"lease_ms": 1}))
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "x"}))
	first := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{})).Messages[0]
	second := waitFor(t, "the message again after its lease", 10*time.Second, func() (*sqlq.Message, bool) {
		r := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{}))
		if len(r.Messages) == 0 {
			return nil, false
		}
		return r.Messages[0], true
	})
	if second.Attempt != 2 {
		t.Fatalf("attempt %d", second.Attempt)
	}
	err := first.Ack(bg())
	var e *sqlq.Error
	if !errors.Is(err, sqlq.ErrStaleReceipt) || !errors.As(err, &e) || e.Status != 409 || e.Code != "failed_precondition" {
		t.Fatalf("stale ack: %v", err)
	}
	_ = second.Ack(bg()) // its 1 ms lease may have run out again
}

func TestClientLongPollWaitsForASend(t *testing.T) {
	_, c, q := newQueue(t, "poll", nil)
	got := make(chan *sqlq.ClaimResult, 1)
	go func() {
		r, err := q.Claim(bg(), sqlq.ClaimOptions{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	waitFor(t, "the claim to wait", 10*time.Second, func() (bool, bool) {
		o := must[map[string]any](t)(c.Overview(bg()))
		n, _ := o["waiting_consumers"].(float64)
		return true, n >= 1
	})
	must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "wake"}))
	select {
	case r := <-got:
		if len(r.Messages) != 1 || r.Messages[0].Payload.String() != "wake" {
			t.Fatalf("claimed %+v", r.Messages)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim got nothing")
	}
	if r := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Wait: 50 * time.Millisecond})); len(r.Messages) != 0 {
		t.Fatalf("claimed %+v", r.Messages)
	}
}

// Regression: a waiting claim whose context ended as the server took a
// message for it lost the answer, and the message stayed leased to no one
// until its lease ran out (with max_attempts 1, a dead letter). Now the
// claim is still answered: each time, the message is in its answer or
// still ready.
func TestClientCutLongPollAnswersWithWhatTheServerTook(t *testing.T) {
	_, c, q := newQueue(t, "cut", sqlq.Options{"max_attempts": 1})
	waiting := regexp.MustCompile(`(?m)^sqlq_server_waiting_consumers (\d+)`)
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithCancel(bg())
		got := make(chan *sqlq.ClaimResult, 1)
		go func() {
			r, err := q.Claim(ctx, sqlq.ClaimOptions{Wait: 30 * time.Second})
			if err != nil {
				t.Errorf("the cut claim failed: %v", err)
			}
			got <- r
		}()
		waitFor(t, "the claim to wait", 10*time.Second, func() (bool, bool) {
			text := must[string](t)(c.Metrics(bg()))
			m := waiting.FindStringSubmatch(text)
			return true, m != nil && m[1] == "1"
		})
		payload := fmt.Sprintf("m%d", i)
		must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: payload}))
		cancel()
		var r *sqlq.ClaimResult
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the cut claim never returned")
		}
		if r == nil {
			t.FailNow()
		}
		if len(r.Messages) == 1 {
			if r.Messages[0].Payload.String() != payload {
				t.Fatalf("claimed %+v", r.Messages)
			}
			if err := r.Messages[0].Ack(bg()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		st := must[*sqlq.QueueStatus](t)(q.Stats(bg()))
		if st.Stats.Leased != 0 {
			t.Fatalf("left leased: %+v", st.Stats)
		}
		again := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{}))
		if len(again.Messages) != 1 || again.Messages[0].Payload.String() != payload {
			t.Fatalf("claimed %+v", again.Messages)
		}
		if err := again.Messages[0].Ack(bg()); err != nil {
			t.Fatal(err)
		}
	}
	st := must[*sqlq.QueueStatus](t)(q.Stats(bg()))
	if st.Stats.Acks != 10 || st.Stats.Ready+st.Stats.Leased != 0 || st.Stats.Dead != 0 {
		t.Fatalf("after the cuts: %+v", st.Stats)
	}
	// Ended before it went out: its context's error.
	ctx, cancel := context.WithCancel(bg())
	cancel()
	if _, err := q.Claim(ctx, sqlq.ClaimOptions{Wait: 30 * time.Second}); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with an ended context: %v", err)
	}
}

func TestClientMessagesListingAndChanges(t *testing.T) {
	s := startServer(t)
	q := s.client(t).Queue("admin")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), sqlq.Options{"max_attempts": 1}))
	var ids []int64
	for i := 0; i < 6; i++ {
		tenant := "x"
		if i%2 == 1 {
			tenant = "acme"
		}
		ids = append(ids, must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: "p" + string(rune('0'+i)),
			Headers: map[string]string{"tenant": tenant}})))
	}
	page := must[*sqlq.Page](t)(q.Messages(bg(), sqlq.Filter{State: "ready"}, 2, ""))
	if len(page.Messages) != 2 || page.NextCursor == "" || page.Messages[0].Payload.String() != "p0" {
		t.Fatalf("page: %+v", page)
	}
	var seen []int64
	if err := q.EachMessage(bg(), sqlq.Filter{}, 2, func(m sqlq.MessageInfo) error {
		seen = append(seen, m.ID)
		return nil
	}); err != nil || !reflect.DeepEqual(seen, ids) {
		t.Fatalf("each: %v %v", seen, err)
	}
	if n := must[int64](t)(q.Count(bg(), sqlq.Filter{HeaderName: "tenant", HeaderValue: "acme"})); n != 3 {
		t.Fatalf("count by header: %d", n)
	}
	if n := must[int64](t)(q.Count(bg(), sqlq.Filter{PayloadPrefix: "p1"})); n != 1 {
		t.Fatalf("count by prefix: %d", n)
	}
	if n := must[int64](t)(q.SetPriority(bg(), ids[0], 9)); n != 1 || must[*sqlq.MessageInfo](t)(q.Message(bg(), ids[0])).Priority != 9 {
		t.Fatal("set priority")
	}
	must[int64](t)(q.RescheduleMessage(bg(), ids[1], time.Now().Add(30*24*time.Hour)))
	if st := must[*sqlq.MessageInfo](t)(q.Message(bg(), ids[1])).State; st != "delayed" {
		t.Fatalf("rescheduled: %s", st)
	}
	must[int64](t)(q.RetryMessage(bg(), ids[1]))
	if st := must[*sqlq.MessageInfo](t)(q.Message(bg(), ids[1])).State; st != "ready" {
		t.Fatalf("retried: %s", st)
	}
	must[int64](t)(q.CancelMessage(bg(), ids[2]))
	if st := must[*sqlq.MessageInfo](t)(q.Message(bg(), ids[2])).State; st != "dead" {
		t.Fatalf("cancelled: %s", st)
	}
	if n := must[int64](t)(q.DeleteMessage(bg(), ids[3])); n != 1 {
		t.Fatalf("deleted %d", n)
	}
	if _, err := q.Message(bg(), ids[3]); !errors.Is(err, sqlq.ErrNotFound) {
		t.Fatalf("deleted message: %v", err)
	}
	if n := must[int64](t)(q.Bulk(bg(), "priority", sqlq.Bulk{IDs: []int64{ids[4], ids[5]}, Priority: -1})); n != 2 {
		t.Fatalf("bulk priority: %d", n)
	}
	low := int32(-1)
	if n := must[int64](t)(q.Bulk(bg(), "cancel", sqlq.Bulk{Filter: &sqlq.Filter{State: "ready", MaxPriority: &low}})); n != 2 {
		t.Fatalf("bulk cancel: %d", n)
	}
	dead := must[[]sqlq.MessageInfo](t)(q.Dead(bg(), 10, 0))
	var deadIDs []int64
	for _, d := range dead {
		deadIDs = append(deadIDs, d.ID)
	}
	sort.Slice(deadIDs, func(i, j int) bool { return deadIDs[i] < deadIDs[j] })
	if !reflect.DeepEqual(deadIDs, []int64{ids[2], ids[4], ids[5]}) || dead[0].LastError == "" {
		t.Fatalf("dead: %+v", dead)
	}
	if n := must[int64](t)(q.Redrive(bg(), []int64{ids[2]})); n != 1 {
		t.Fatalf("redrive: %d", n)
	}
	if n := must[int64](t)(q.Bulk(bg(), "retry", sqlq.Bulk{Filter: &sqlq.Filter{State: "dead"}})); n != 2 {
		t.Fatalf("bulk retry: %d", n)
	}
	if d := must[[]sqlq.MessageInfo](t)(q.Dead(bg(), 0, 0)); len(d) != 0 {
		t.Fatalf("dead: %+v", d)
	}
	nackOne := func(text string) {
		r := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{}))
		if out := must[string](t)(r.Messages[0].Nack(bg(), text)); out != "dead" {
			t.Fatalf("nack: %s", out)
		}
	}
	nackOne("x")
	if n := must[int64](t)(q.RedriveAll(bg())); n != 1 {
		t.Fatalf("redrive all: %d", n)
	}
	nackOne("y")
	if n := must[int64](t)(q.PurgeDead(bg())); n != 1 {
		t.Fatalf("purge dead: %d", n)
	}
	if n := must[int64](t)(q.Bulk(bg(), "delete", sqlq.Bulk{Filter: &sqlq.Filter{}})); n != 4 {
		t.Fatalf("bulk delete: %d", n)
	}
	if _, err := q.Bulk(bg(), "explode", sqlq.Bulk{IDs: []int64{1}}); err == nil {
		t.Fatal("an unknown bulk action passed")
	}
}

func TestClientArchive(t *testing.T) {
	s := startServer(t)
	q := s.client(t).Queue("arch")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), sqlq.Options{"archive": true}))
	id := must[int64](t)(q.Send(bg(), sqlq.Outgoing{Payload: []byte("\xffbytes")}))
	m := must[*sqlq.ClaimResult](t)(q.Claim(bg(), sqlq.ClaimOptions{Worker: "w-1"})).Messages[0]
	if err := m.Ack(bg()); err != nil {
		t.Fatal(err)
	}
	a := must[[]sqlq.MessageInfo](t)(q.Archive(bg(), 10, 0))
	if len(a) != 1 || a[0].ID != id || string(a[0].Payload) != "\xffbytes" || a[0].Worker != "w-1" {
		t.Fatalf("archive: %+v", a)
	}
}

func TestClientRings(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	r := c.Ring("views")
	if info := must[*sqlq.RingInfo](t)(r.Create(bg(), sqlq.Options{"capacity": 2})); info.Capacity != 2 {
		t.Fatalf("ring: %+v", info)
	}
	rings := must[[]sqlq.RingInfo](t)(c.Rings(bg()))
	if len(rings) != 1 || rings[0].Name != "views" {
		t.Fatalf("rings: %+v", rings)
	}
	var e *sqlq.RingEntry
	for _, who := range []string{"ada", "bob", "cy"} {
		e = must[*sqlq.RingEntry](t)(r.Push(bg(), "article 1", who))
	}
	if e.Group != "article 1" {
		t.Fatalf("entry: %+v", e)
	}
	entries := must[[]sqlq.RingEntry](t)(r.Read(bg(), "article 1", sqlq.ReadOptions{Order: "newest"}))
	if len(entries) != 2 || entries[0].Payload.String() != "cy" || entries[1].Payload.String() != "bob" {
		t.Fatalf("read: %+v", entries)
	}
	if g := must[[]sqlq.RingGroup](t)(r.Groups(bg())); !reflect.DeepEqual(g, []sqlq.RingGroup{{Group: "article 1", Entries: 2}}) {
		t.Fatalf("groups: %+v", g)
	}
	if n := must[int64](t)(r.DeleteEntry(bg(), "article 1", e.Seq)); n != 1 {
		t.Fatalf("delete entry: %d", n)
	}
	if st := must[*sqlq.RingStats](t)(r.Stats(bg())); st.Pushes != 3 {
		t.Fatalf("stats: %+v", st)
	}
	if n := must[int64](t)(r.DeleteGroup(bg(), "article 1")); n != 1 {
		t.Fatalf("delete group: %d", n)
	}
	if err := r.Drop(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestClientRotations(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	rot := c.Rotation("relays")
	must[*sqlq.RotationInfo](t)(rot.Create(bg(), sqlq.Options{"max_failures": 1}))
	if rs := must[[]sqlq.RotationInfo](t)(c.Rotations(bg())); len(rs) != 1 || rs[0].Name != "relays" {
		t.Fatalf("rotations: %+v", rs)
	}
	if err := rot.Add(bg(), "smtp1", "10.0.0.1:25"); err != nil {
		t.Fatal(err)
	}
	if err := rot.Add(bg(), "smtp2", []byte{1}); err != nil {
		t.Fatal(err)
	}
	if items := must[[]sqlq.RotationItem](t)(rot.Items(bg())); len(items) != 2 {
		t.Fatalf("items: %+v", items)
	}
	if served := must[[]sqlq.RotationItem](t)(rot.Next(bg(), 1)); len(served) != 1 {
		t.Fatalf("next: %+v", served)
	}
	if it := must[*sqlq.RotationItem](t)(rot.Fail(bg(), "smtp1")); !it.Parked {
		t.Fatalf("fail: %+v", it)
	}
	if served := must[[]sqlq.RotationItem](t)(rot.Next(bg(), 2)); len(served) != 1 || served[0].Key != "smtp2" ||
		!bytes.Equal(served[0].Payload, []byte{1}) {
		t.Fatalf("next: %+v", served)
	}
	if it := must[*sqlq.RotationItem](t)(rot.Reset(bg(), "smtp1")); it.Parked {
		t.Fatalf("reset: %+v", it)
	}
	if it := must[*sqlq.RotationItem](t)(rot.OK(bg(), "smtp1")); it.Failures != 0 || it.Payload.String() != "10.0.0.1:25" {
		t.Fatalf("ok: %+v", it)
	}
	if st := must[*sqlq.RotationStats](t)(rot.Stats(bg())); st.Items != 2 {
		t.Fatalf("stats: %+v", st)
	}
	if err := rot.Remove(bg(), "smtp2"); err != nil {
		t.Fatal(err)
	}
	if items := must[[]sqlq.RotationItem](t)(rot.Items(bg())); len(items) != 1 || items[0].Key != "smtp1" {
		t.Fatalf("items: %+v", items)
	}
	if err := rot.Drop(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestClientSchedules(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	must[*sqlq.QueueInfo](t)(c.Queue("reports").Create(bg(), nil))
	sc := c.Schedule("daily")
	made := must[*sqlq.ScheduleInfo](t)(sc.Create(bg(), sqlq.ScheduleOptions{Cron: "0 9 * * *", Queue: "reports",
		Payload: map[string]string{"report": "daily"}, TimeZone: "UTC"}))
	if made.Payload.String() != `{"report":"daily"}` || made.NextTick.IsZero() {
		t.Fatalf("schedule: %+v", made)
	}
	if ss := must[[]sqlq.ScheduleInfo](t)(c.Schedules(bg())); len(ss) != 1 || ss[0].Name != "daily" {
		t.Fatalf("schedules: %+v", ss)
	}
	if !must[*sqlq.ScheduleInfo](t)(sc.Pause(bg())).Paused || must[*sqlq.ScheduleInfo](t)(sc.Resume(bg())).Paused {
		t.Fatal("pause, resume")
	}
	if got := must[*sqlq.ScheduleInfo](t)(sc.Get(bg())); got.Cron != "0 9 * * *" {
		t.Fatalf("get: %+v", got)
	}
	if err := sc.Drop(bg()); err != nil {
		t.Fatal(err)
	}
}

func TestClientHealthAndMetrics(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	if err := c.Health(bg()); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(bg()); err != nil {
		t.Fatal(err)
	}
	if m := must[string](t)(c.Metrics(bg())); !strings.Contains(m, "sqlq_") {
		t.Fatalf("metrics: %.200s", m)
	}
}

func TestClientErrorsCarryCodeMessageStatus(t *testing.T) {
	s := startServer(t)
	c := s.client(t)
	anon := must[*sqlq.Client](t)(sqlq.New(s.url()))
	defer anon.Close()
	_, err := anon.Queues(bg())
	var e *sqlq.Error
	if !errors.Is(err, sqlq.ErrUnauthorized) || !errors.As(err, &e) || e.Status != 401 || e.Code != "unauthorized" {
		t.Fatalf("anonymous: %v", err)
	}
	claimer := must[*sqlq.Client](t)(sqlq.New(s.url(), sqlq.WithToken(claimToken)))
	defer claimer.Close()
	if _, err := claimer.Queue("jobs-x").Create(bg(), nil); !errors.Is(err, sqlq.ErrForbidden) {
		t.Fatalf("forbidden: %v", err)
	}
	if _, err := c.Queue("bad name!").Create(bg(), nil); !errors.Is(err, sqlq.ErrBadRequest) ||
		!errors.As(err, &e) || e.Code != "invalid_argument" {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := c.Queue("x").Create(bg(), sqlq.Options{"no_such_option": 1}); !errors.As(err, &e) || e.Code != "unknown_field" {
		t.Fatalf("unknown field: %v", err)
	}
	q := c.Queue("errs")
	must[*sqlq.QueueInfo](t)(q.Create(bg(), nil))
	if _, err := q.Claim(bg(), sqlq.ClaimOptions{Wait: time.Hour}); !errors.Is(err, sqlq.ErrBadRequest) ||
		!errors.As(err, &e) || e.Code != "wait_too_long" {
		t.Fatalf("wait too long: %v", err)
	}
	if !strings.Contains(e.Error(), "400 wait_too_long") {
		t.Fatalf("text: %s", e.Error())
	}
}

func TestClientUnreachableServerIsConnectionFailed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now
	c := must[*sqlq.Client](t)(sqlq.New("http://"+addr, sqlq.WithRetries(2), sqlq.WithBackoff(10*time.Millisecond, 50*time.Millisecond)))
	err = c.Health(bg())
	var e *sqlq.Error
	if !errors.Is(err, sqlq.ErrConnectionFailed) || !errors.As(err, &e) || e.Sent || e.Code != "connection_failed" {
		t.Fatalf("unreachable: %#v", err)
	}
	if _, err := sqlq.New("ftp://x"); err == nil {
		t.Fatal("an ftp URL passed")
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
