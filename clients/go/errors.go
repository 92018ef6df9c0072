package sqlq

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The kinds of error, one for each kind of error reply of the server (the
// classes of the Python and Node.js clients). Test for them with errors.Is:
//
//	if errors.Is(err, sqlq.ErrAlreadyExists) { ... }
//
// and read the server's code, message and status with errors.As:
//
//	var e *sqlq.Error
//	if errors.As(err, &e) { log.Print(e.Code, e.Status) }
var (
	// ErrBadRequest: 400, 413, 415, 431, 501: the request is wrong;
	// retrying will not help.
	ErrBadRequest = errors.New("sqlq: bad request")
	// ErrUnauthorized: 401, no token or an unknown one.
	ErrUnauthorized = errors.New("sqlq: unauthorized")
	// ErrForbidden: 403, the token lacks the permission (or the host or
	// origin is not allowed).
	ErrForbidden = errors.New("sqlq: forbidden")
	// ErrNotFound: 404, no such queue, ring, rotation or message; a
	// receipt of a message that is gone (acked, dead-lettered, purged).
	ErrNotFound = errors.New("sqlq: not found")
	// ErrAlreadyExists: 409 already_exists, the name is taken.
	ErrAlreadyExists = errors.New("sqlq: already exists")
	// ErrStaleReceipt: 409 failed_precondition, the receipt's lease ran
	// out and another consumer claimed the message (or a name of another
	// kind).
	ErrStaleReceipt = errors.New("sqlq: stale receipt")
	// ErrConflict: another 409.
	ErrConflict = errors.New("sqlq: conflict")
	// ErrTooManyRequests: 429, too many waiting polls or failed
	// authentications; see Error.RetryAfter.
	ErrTooManyRequests = errors.New("sqlq: too many requests")
	// ErrUnavailable: 503, the server is busy, stopping, or its database
	// is unreachable.
	ErrUnavailable = errors.New("sqlq: unavailable")
	// ErrServerTimeout: 504, a deadline ran out inside the store.
	ErrServerTimeout = errors.New("sqlq: server timeout")
	// ErrOutcomeUnknown: 500 outcome_unknown, the database connection was
	// lost while committing; the write may or may not have happened.
	ErrOutcomeUnknown = errors.New("sqlq: outcome unknown")
	// ErrServerError: another 5xx (corruption, internal).
	ErrServerError = errors.New("sqlq: server error")
	// ErrConnectionFailed: no reply came; Error.Sent says whether the
	// request may have reached the server.
	ErrConnectionFailed = errors.New("sqlq: connection failed")
)

// Error is every failure of a request: an error reply of the server, or
// no reply at all (Kind ErrConnectionFailed, Code "connection_failed").
type Error struct {
	// Kind is one of the Err... values above; errors.Is(err, Kind) holds.
	Kind error
	// Code is the server's stable error code ("not_found", ...): branch
	// on it, or on Kind.
	Code string
	// Message is the server's text, for people.
	Message string
	// Status is the HTTP status, 0 when no reply came.
	Status int
	// RetryAfter is how long the server asked to wait (Retry-After), else 0.
	RetryAfter time.Duration
	// Sent, for ErrConnectionFailed: whether the request may have reached
	// the server (false: the connection could not be made).
	Sent bool
	// Err is the cause of a connection failure (a net error), else nil.
	Err error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("sqlq: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("sqlq: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is reports whether target is the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause of a connection failure.
func (e *Error) Unwrap() error { return e.Err }

var kindByCode = map[string]error{
	"not_found":           ErrNotFound,
	"no_route":            ErrNotFound,
	"already_exists":      ErrAlreadyExists,
	"failed_precondition": ErrStaleReceipt,
	"outcome_unknown":     ErrOutcomeUnknown,
}

var kindByStatus = map[int]error{
	http.StatusUnauthorized:       ErrUnauthorized,
	http.StatusForbidden:          ErrForbidden,
	http.StatusNotFound:           ErrNotFound,
	http.StatusConflict:           ErrConflict,
	http.StatusTooManyRequests:    ErrTooManyRequests,
	http.StatusServiceUnavailable: ErrUnavailable,
	http.StatusGatewayTimeout:     ErrServerTimeout,
}

// errorFor is the error of an error reply.
func errorFor(status int, code, message string, retryAfter time.Duration) *Error {
	kind, ok := kindByCode[code]
	if !ok {
		kind, ok = kindByStatus[status]
	}
	if !ok {
		// 501 unsupported_transfer_encoding is the request's fault.
		if status >= 500 && status != http.StatusNotImplemented {
			kind = ErrServerError
		} else {
			kind = ErrBadRequest
		}
	}
	return &Error{Kind: kind, Code: code, Message: message, Status: status, RetryAfter: retryAfter}
}

// transient reports whether err passes by itself: no reply came, or the
// server was restarting, busy or timed out. The worker tries such calls
// again after a backoff.
func transient(err error) bool {
	return errors.Is(err, ErrConnectionFailed) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, ErrTooManyRequests) || errors.Is(err, ErrServerTimeout) ||
		errors.Is(err, ErrOutcomeUnknown)
}
