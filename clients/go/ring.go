package sqlq

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// All is every queue, ring and rotation the token may see.
type All struct {
	Queues    []QueueInfo    `json:"queues"`
	Rings     []RingInfo     `json:"rings"`
	Rotations []RotationInfo `json:"rotations"`
}

// All reads every queue, ring and rotation the token may see, in one
// request.
func (c *Client) All(ctx context.Context) (*All, error) {
	return getAs[All](ctx, c, "/v1/all", nil)
}

// Overview reads what a dashboard shows (GET /v1/overview) as the JSON
// object of the HTTP API.
func (c *Client) Overview(ctx context.Context) (map[string]any, error) {
	var r map[string]any
	err := c.get(ctx, "/v1/overview", nil, &r)
	return r, err
}

// RingInfo is a ring.
type RingInfo struct {
	Name            string `json:"name"`
	Kind            string `json:"kind"`
	Capacity        int64  `json:"capacity"`
	MaxPayloadBytes int64  `json:"max_payload_bytes"`
}

// RingStats are a ring's counts.
type RingStats struct {
	Name     string `json:"name"`
	Capacity int64  `json:"capacity"`
	Groups   int64  `json:"groups"`
	Entries  int64  `json:"entries"`
	Pushes   int64  `json:"pushes"`
}

// RingEntry is an entry of a ring's group.
type RingEntry struct {
	Seq      int64     `json:"seq"`
	Group    string    `json:"group"`
	Payload  Payload   `json:"-"`
	PushedAt time.Time `json:"pushed_at"`
}

// UnmarshalJSON decodes the server's object, payload included.
func (e *RingEntry) UnmarshalJSON(b []byte) error {
	type fields RingEntry
	return decodeWithPayload(b, (*fields)(e), &e.Payload)
}

// RingGroup is a group of a ring and its number of entries.
type RingGroup struct {
	Group   string `json:"group"`
	Entries int64  `json:"entries"`
}

// Ring is a ring: each group keeps its newest Capacity entries. A handle:
// making one sends nothing.
type Ring struct {
	client *Client
	name   string
	path   string
}

// Ring returns a handle of the ring name.
func (c *Client) Ring(name string) *Ring {
	return &Ring{client: c, name: name, path: "/v1/rings/" + seg(name)}
}

// Rings lists the rings the token may see.
func (c *Client) Rings(ctx context.Context) ([]RingInfo, error) {
	var r struct {
		Rings []RingInfo `json:"rings"`
	}
	err := c.get(ctx, "/v1/rings", nil, &r)
	return r.Rings, err
}

// Create creates the ring ("capacity", "max_payload_bytes").
func (r *Ring) Create(ctx context.Context, opts Options) (*RingInfo, error) {
	return postAs[RingInfo](ctx, r.client, r.path, opts)
}

// Stats reads the ring's counts.
func (r *Ring) Stats(ctx context.Context) (*RingStats, error) {
	return getAs[RingStats](ctx, r.client, r.path, nil)
}

// Drop deletes the ring.
func (r *Ring) Drop(ctx context.Context) error { return r.client.del(ctx, r.path, nil) }

// Push adds an entry to group (payload as in Outgoing) and returns it.
func (r *Ring) Push(ctx context.Context, group string, payload any) (*RingEntry, error) {
	body := map[string]any{}
	if err := payloadFields(payload, body); err != nil {
		return nil, err
	}
	return postAs[RingEntry](ctx, r.client, r.path+"/groups/"+seg(group), body)
}

// ReadOptions are the options of Ring.Read; the zero value reads the
// server's default of 100 entries, newest first.
type ReadOptions struct {
	Limit    int
	Order    string // "newest" or "oldest"
	AfterSeq int64  // go on after this entry, in the order read
}

// Read reads the entries of group.
func (r *Ring) Read(ctx context.Context, group string, o ReadOptions) ([]RingEntry, error) {
	v := url.Values{}
	if o.Limit > 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Order != "" {
		v.Set("order", o.Order)
	}
	if o.AfterSeq > 0 {
		v.Set("after_seq", strconv.FormatInt(o.AfterSeq, 10))
	}
	var out struct {
		Entries []RingEntry `json:"entries"`
	}
	err := r.client.get(ctx, r.path+"/groups/"+seg(group), v, &out)
	return out.Entries, err
}

// Groups lists the ring's groups.
func (r *Ring) Groups(ctx context.Context) ([]RingGroup, error) {
	var out struct {
		Groups []RingGroup `json:"groups"`
	}
	err := r.client.get(ctx, r.path+"/groups", nil, &out)
	return out.Groups, err
}

// DeleteGroup deletes the entries of group and returns how many.
func (r *Ring) DeleteGroup(ctx context.Context, group string) (int64, error) {
	var out struct {
		Deleted int64 `json:"deleted"`
	}
	err := r.client.del(ctx, r.path+"/groups/"+seg(group), &out)
	return out.Deleted, err
}

// DeleteEntry deletes the entry seq of group.
func (r *Ring) DeleteEntry(ctx context.Context, group string, seq int64) (int64, error) {
	var out struct {
		Deleted int64 `json:"deleted"`
	}
	err := r.client.del(ctx, r.path+"/groups/"+seg(group)+"/"+strconv.FormatInt(seq, 10), &out)
	return out.Deleted, err
}

// RotationInfo is a rotation.
type RotationInfo struct {
	Name            string `json:"name"`
	Kind            string `json:"kind"`
	MaxFailures     int64  `json:"max_failures"`
	MaxPayloadBytes int64  `json:"max_payload_bytes"`
}

// RotationStats are a rotation's counts.
type RotationStats struct {
	Name        string `json:"name"`
	MaxFailures int64  `json:"max_failures"`
	Items       int64  `json:"items"`
	Parked      int64  `json:"parked"`
	Serves      int64  `json:"serves"`
}

// RotationItem is an item of a rotation.
type RotationItem struct {
	Key      string  `json:"key"`
	Payload  Payload `json:"-"`
	Served   int64   `json:"served"`
	Failures int64   `json:"failures"`
	Parked   bool    `json:"parked"`
}

// UnmarshalJSON decodes the server's object, payload included.
func (it *RotationItem) UnmarshalJSON(b []byte) error {
	type fields RotationItem
	return decodeWithPayload(b, (*fields)(it), &it.Payload)
}

// Rotation is a round-robin pool of items served in turn. A handle: making
// one sends nothing.
type Rotation struct {
	client *Client
	name   string
	path   string
}

// Rotation returns a handle of the rotation name.
func (c *Client) Rotation(name string) *Rotation {
	return &Rotation{client: c, name: name, path: "/v1/rotations/" + seg(name)}
}

// Rotations lists the rotations the token may see.
func (c *Client) Rotations(ctx context.Context) ([]RotationInfo, error) {
	var r struct {
		Rotations []RotationInfo `json:"rotations"`
	}
	err := c.get(ctx, "/v1/rotations", nil, &r)
	return r.Rotations, err
}

// Create creates the rotation ("max_failures", "max_payload_bytes").
func (r *Rotation) Create(ctx context.Context, opts Options) (*RotationInfo, error) {
	return postAs[RotationInfo](ctx, r.client, r.path, opts)
}

// Stats reads the rotation's counts.
func (r *Rotation) Stats(ctx context.Context) (*RotationStats, error) {
	return getAs[RotationStats](ctx, r.client, r.path, nil)
}

// Drop deletes the rotation.
func (r *Rotation) Drop(ctx context.Context) error { return r.client.del(ctx, r.path, nil) }

// Add adds the item key with a payload (as in Outgoing).
func (r *Rotation) Add(ctx context.Context, key string, payload any) error {
	body := map[string]any{"key": key}
	if err := payloadFields(payload, body); err != nil {
		return err
	}
	return r.client.post(ctx, r.path+"/items", body, nil)
}

// Items lists the rotation's items.
func (r *Rotation) Items(ctx context.Context) ([]RotationItem, error) {
	var out struct {
		Items []RotationItem `json:"items"`
	}
	err := r.client.get(ctx, r.path+"/items", nil, &out)
	return out.Items, err
}

// Remove removes the item key.
func (r *Rotation) Remove(ctx context.Context, key string) error {
	return r.client.del(ctx, r.path+"/items/"+seg(key), nil)
}

// Next serves the n least recently served eligible items.
func (r *Rotation) Next(ctx context.Context, n int) ([]RotationItem, error) {
	var out struct {
		Items []RotationItem `json:"items"`
	}
	err := r.client.post(ctx, r.path+"/next", map[string]any{"n": n}, &out)
	return out.Items, err
}

func (r *Rotation) item(ctx context.Context, key, action string) (*RotationItem, error) {
	return postAs[RotationItem](ctx, r.client, r.path+"/items/"+seg(key)+"/"+action, nil)
}

// Fail counts a failure of the item key; it is parked at max_failures.
func (r *Rotation) Fail(ctx context.Context, key string) (*RotationItem, error) {
	return r.item(ctx, key, "fail")
}

// OK clears the failures of the item key.
func (r *Rotation) OK(ctx context.Context, key string) (*RotationItem, error) {
	return r.item(ctx, key, "ok")
}

// Reset unparks the item key.
func (r *Rotation) Reset(ctx context.Context, key string) (*RotationItem, error) {
	return r.item(ctx, key, "reset")
}

// ScheduleInfo is a schedule: a message sent to a queue at each tick of a
// cron expression.
type ScheduleInfo struct {
	Name      string            `json:"name"`
	Cron      string            `json:"cron"`
	TimeZone  string            `json:"time_zone"`
	Queue     string            `json:"queue"`
	Payload   Payload           `json:"-"`
	Priority  int32             `json:"priority"`
	Headers   map[string]string `json:"headers"`
	Group     string            `json:"group"`
	CatchUp   int               `json:"catch_up"`
	Paused    bool              `json:"paused"`
	NextTick  time.Time         `json:"next_tick"`
	LastTick  time.Time         `json:"last_tick"`
	Sent      int64             `json:"sent"`
	Skipped   int64             `json:"skipped"`
	LastError string            `json:"last_error"`
	CreatedAt time.Time         `json:"created_at"`
}

// UnmarshalJSON decodes the server's object, payload included.
func (s *ScheduleInfo) UnmarshalJSON(b []byte) error {
	type fields ScheduleInfo
	return decodeWithPayload(b, (*fields)(s), &s.Payload)
}

// ScheduleOptions make a schedule: Cron and Queue are required.
type ScheduleOptions struct {
	Cron     string
	Queue    string
	TimeZone string // a tz database name; "" is UTC
	Payload  any    // as in Outgoing
	Priority int32
	Headers  map[string]string
	Group    string
	CatchUp  int
}

// Schedule is a schedule of the server. A handle: making one sends
// nothing.
type Schedule struct {
	client *Client
	name   string
	path   string
}

// Schedule returns a handle of the schedule name.
func (c *Client) Schedule(name string) *Schedule {
	return &Schedule{client: c, name: name, path: "/v1/schedules/" + seg(name)}
}

// Schedules lists the schedules the token may see.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	var r struct {
		Schedules []ScheduleInfo `json:"schedules"`
	}
	err := c.get(ctx, "/v1/schedules", nil, &r)
	return r.Schedules, err
}

func (s *Schedule) info(ctx context.Context, method, sub string, body any) (*ScheduleInfo, error) {
	return doAs[ScheduleInfo](ctx, s.client, call{method: method, path: s.path + sub, body: body})
}

// Create creates the schedule.
func (s *Schedule) Create(ctx context.Context, o ScheduleOptions) (*ScheduleInfo, error) {
	body := map[string]any{"cron": o.Cron, "queue": o.Queue}
	p := o.Payload
	if p == nil {
		p = ""
	}
	if err := payloadFields(p, body); err != nil {
		return nil, err
	}
	if o.TimeZone != "" {
		body["time_zone"] = o.TimeZone
	}
	if o.Priority != 0 {
		body["priority"] = o.Priority
	}
	if len(o.Headers) > 0 {
		body["headers"] = o.Headers
	}
	if o.Group != "" {
		body["group"] = o.Group
	}
	if o.CatchUp != 0 {
		body["catch_up"] = o.CatchUp
	}
	return s.info(ctx, "POST", "", body)
}

// Get reads the schedule.
func (s *Schedule) Get(ctx context.Context) (*ScheduleInfo, error) {
	return s.info(ctx, "GET", "", nil)
}

// Pause stops the schedule's sends.
func (s *Schedule) Pause(ctx context.Context) (*ScheduleInfo, error) {
	return s.info(ctx, "POST", "/pause", nil)
}

// Resume starts the schedule's sends again.
func (s *Schedule) Resume(ctx context.Context) (*ScheduleInfo, error) {
	return s.info(ctx, "POST", "/resume", nil)
}

// Drop deletes the schedule.
func (s *Schedule) Drop(ctx context.Context) error { return s.client.del(ctx, s.path, nil) }
