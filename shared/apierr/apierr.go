// Package apierr is the one error type of the API. Domain packages return
// *Error values carrying the API's codes; the transport maps a code to an HTTP
// status in exactly one place (HTTPStatus). Anything that is not an *Error is
// INTERNAL: its text is logged, never shown to a client.
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Code is one of the API's error codes (docs/reference, Errors).
type Code string

const (
	InvalidInput      Code = "INVALID_INPUT"
	Unauthenticated   Code = "UNAUTHENTICATED"
	PermissionDenied  Code = "PERMISSION_DENIED"
	NotFound          Code = "NOT_FOUND"
	Conflict          Code = "CONFLICT"
	CapacityExhausted Code = "CAPACITY_EXHAUSTED"
	QuotaExceeded     Code = "QUOTA_EXCEEDED"
	Unavailable       Code = "UNAVAILABLE"
	Internal          Code = "INTERNAL"
	// NotImplemented answers catalog methods whose phase is not served yet.
	NotImplemented Code = "NOT_IMPLEMENTED"
)

// Codes lists every code, in the order the docs show them.
var Codes = []Code{InvalidInput, Unauthenticated, PermissionDenied, NotFound, Conflict,
	CapacityExhausted, QuotaExceeded, Unavailable, Internal, NotImplemented}

// HTTPStatus is the single mapping from code to HTTP status.
func HTTPStatus(c Code) int {
	switch c {
	case InvalidInput:
		return http.StatusBadRequest
	case Unauthenticated:
		return http.StatusUnauthorized
	case PermissionDenied:
		return http.StatusForbidden
	case NotFound:
		return http.StatusNotFound
	case Conflict, CapacityExhausted:
		return http.StatusConflict
	case QuotaExceeded:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	case NotImplemented:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}

// Error is an API error: a code, a message safe to show, and details.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Details is always encoded: an empty object when there is nothing to
	// add.
	Details map[string]any `json:"details"`
	// Cause is logged, never serialized.
	Cause error `json:"-"`
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// MarshalJSON encodes code, message and details, details as {} when empty.
func (e *Error) MarshalJSON() ([]byte, error) {
	type wire Error
	w := wire(*e)
	if w.Details == nil {
		w.Details = map[string]any{}
	}
	return json.Marshal(w)
}

// With returns a copy of e with one more detail.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// New builds an error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is INVALID_INPUT with details.reason (and details.field when field != "").
func Invalid(reason, field, format string, args ...any) *Error {
	e := New(InvalidInput, format, args...)
	e.Details = map[string]any{}
	if reason != "" {
		e.Details["reason"] = reason
	}
	if field != "" {
		e.Details["field"] = field
	}
	return e
}

// Dependency wraps a failed call to DynamoDB, KMS or Better IAM as UNAVAILABLE.
func Dependency(dep string, cause error) *Error {
	return &Error{Code: Unavailable, Message: dep + " is unavailable; retry the request",
		Details: map[string]any{"dependency": dep}, Cause: cause}
}

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// CodeOf maps any error to a code: unknown errors are INTERNAL.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e := As(err); e != nil {
		return e.Code
	}
	return Internal
}
