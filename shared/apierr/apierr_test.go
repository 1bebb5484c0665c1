package apierr_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/apierr"
)

func TestHTTPStatus(t *testing.T) {
	// The contract's table of codes, plus NOT_IMPLEMENTED for unserved methods.
	want := map[apierr.Code]int{
		apierr.InvalidInput:      400,
		apierr.Unauthenticated:   401,
		apierr.PermissionDenied:  403,
		apierr.NotFound:          404,
		apierr.Conflict:          409,
		apierr.CapacityExhausted: 409,
		apierr.QuotaExceeded:     429,
		apierr.Unavailable:       503,
		apierr.Internal:          500,
		apierr.NotImplemented:    501,
	}
	for code, status := range want {
		t.Run(string(code), func(t *testing.T) {
			if got := apierr.HTTPStatus(code); got != status {
				t.Errorf("HTTPStatus(%s) = %d, want %d", code, got, status)
			}
		})
	}
	for _, code := range []apierr.Code{"", "BOGUS", "invalid_input"} {
		if got := apierr.HTTPStatus(code); got != 500 {
			t.Errorf("HTTPStatus(%q) = %d, want 500 for an unknown code", code, got)
		}
	}
	// Codes lists exactly the codes of the table, each once.
	if len(apierr.Codes) != len(want) {
		t.Errorf("Codes has %d entries, want %d", len(apierr.Codes), len(want))
	}
	seen := map[apierr.Code]bool{}
	for _, c := range apierr.Codes {
		if _, ok := want[c]; !ok {
			t.Errorf("Codes lists %s, not in the table", c)
		}
		if seen[c] {
			t.Errorf("Codes lists %s twice", c)
		}
		seen[c] = true
	}
}

func TestCodeValues(t *testing.T) {
	for _, tc := range []struct {
		code apierr.Code
		wire string
	}{
		{apierr.InvalidInput, "INVALID_INPUT"},
		{apierr.Unauthenticated, "UNAUTHENTICATED"},
		{apierr.PermissionDenied, "PERMISSION_DENIED"},
		{apierr.NotFound, "NOT_FOUND"},
		{apierr.Conflict, "CONFLICT"},
		{apierr.CapacityExhausted, "CAPACITY_EXHAUSTED"},
		{apierr.QuotaExceeded, "QUOTA_EXCEEDED"},
		{apierr.Unavailable, "UNAVAILABLE"},
		{apierr.Internal, "INTERNAL"},
		{apierr.NotImplemented, "NOT_IMPLEMENTED"},
	} {
		if string(tc.code) != tc.wire {
			t.Errorf("code %q, want wire value %q", tc.code, tc.wire)
		}
	}
}

func TestCodeOf(t *testing.T) {
	notFound := apierr.New(apierr.NotFound, "pool %s not found", "p1")
	for _, tc := range []struct {
		name string
		err  error
		want apierr.Code
	}{
		{"nil", nil, ""},
		{"*Error", notFound, apierr.NotFound},
		{"wrapped once", fmt.Errorf("get pool: %w", notFound), apierr.NotFound},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", apierr.New(apierr.Conflict, "x"))), apierr.Conflict},
		{"joined", errors.Join(io.EOF, apierr.New(apierr.QuotaExceeded, "x")), apierr.QuotaExceeded},
		{"plain error", errors.New("boom"), apierr.Internal},
		{"io.EOF", io.EOF, apierr.Internal},
		{"plain wrapped with %v (chain lost)", fmt.Errorf("x: %v", notFound), apierr.Internal},
		{"Dependency", apierr.Dependency("dynamodb", io.ErrUnexpectedEOF), apierr.Unavailable},
		{"Invalid", apierr.Invalid("too_large", "", "big"), apierr.InvalidInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := apierr.CodeOf(tc.err); got != tc.want {
				t.Errorf("CodeOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestAs(t *testing.T) {
	e := apierr.New(apierr.NotFound, "x")
	if got := apierr.As(fmt.Errorf("w: %w", e)); got != e {
		t.Errorf("As(wrapped) = %v, want the same *Error", got)
	}
	if got := apierr.As(errors.New("plain")); got != nil {
		t.Errorf("As(plain) = %v, want nil", got)
	}
	if got := apierr.As(nil); got != nil {
		t.Errorf("As(nil) = %v, want nil", got)
	}
}

func TestWithCopies(t *testing.T) {
	orig := apierr.Invalid("malformed", "window.end", "bad window")
	origDetails := map[string]any{"reason": "malformed", "field": "window.end"}

	got := orig.With("reservationId", "r1")
	if got == orig {
		t.Fatal("With returned the receiver, want a copy")
	}
	wantGot := map[string]any{"reason": "malformed", "field": "window.end", "reservationId": "r1"}
	if !reflect.DeepEqual(got.Details, wantGot) {
		t.Errorf("With details = %v, want %v", got.Details, wantGot)
	}
	if got.Code != orig.Code || got.Message != orig.Message {
		t.Errorf("With changed code/message: %+v", got)
	}
	if !reflect.DeepEqual(orig.Details, origDetails) {
		t.Errorf("With mutated the original: %v", orig.Details)
	}

	// Overriding a key copies too.
	over := got.With("reason", "expired")
	if over.Details["reason"] != "expired" || got.Details["reason"] != "malformed" {
		t.Errorf("override: new %v, previous %v", over.Details, got.Details)
	}
	// Mutating the copy's map leaves the original alone.
	got.Details["field"] = "changed"
	if orig.Details["field"] != "window.end" {
		t.Errorf("copy shares the details map with the original")
	}

	// With on an error without details.
	bare := apierr.New(apierr.PermissionDenied, "no")
	d := bare.With("reason", "no grant")
	if bare.Details != nil {
		t.Errorf("With gave the original details %v", bare.Details)
	}
	if d.Details["reason"] != "no grant" || len(d.Details) != 1 {
		t.Errorf("details = %v", d.Details)
	}
	// The cause is carried over.
	cause := errors.New("dynamo timeout")
	dep := apierr.Dependency("dynamodb", cause).With("table", "t")
	if !errors.Is(dep, cause) {
		t.Errorf("With dropped the cause")
	}
}

func TestConstructors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     *apierr.Error
		code    apierr.Code
		message string
		details map[string]any
	}{
		{"New formats", apierr.New(apierr.Conflict, "pool %s exists (%d)", "p", 3), apierr.Conflict, "pool p exists (3)", nil},
		{"Invalid with reason and field", apierr.Invalid("malformed", "cursor", "bad %s", "cursor"), apierr.InvalidInput, "bad cursor",
			map[string]any{"reason": "malformed", "field": "cursor"}},
		{"Invalid with reason only", apierr.Invalid("too_large", "", "too big"), apierr.InvalidInput, "too big",
			map[string]any{"reason": "too_large"}},
		{"Invalid with field only", apierr.Invalid("", "cursor", "bad"), apierr.InvalidInput, "bad",
			map[string]any{"field": "cursor"}},
		{"Dependency", apierr.Dependency("kms", io.EOF), apierr.Unavailable, "kms is unavailable; retry the request",
			map[string]any{"dependency": "kms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err.Code != tc.code || tc.err.Message != tc.message {
				t.Errorf("got %s %q, want %s %q", tc.err.Code, tc.err.Message, tc.code, tc.message)
			}
			if len(tc.details) > 0 || len(tc.err.Details) > 0 {
				if !reflect.DeepEqual(tc.err.Details, tc.details) {
					t.Errorf("details = %v, want %v", tc.err.Details, tc.details)
				}
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	if got, want := apierr.New(apierr.NotFound, "no pool").Error(), "NOT_FOUND: no pool"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e := apierr.Dependency("dynamodb", errors.New("connection reset"))
	if got := e.Error(); !strings.Contains(got, "UNAVAILABLE") || !strings.Contains(got, "connection reset") {
		t.Errorf("Error() = %q, want code and cause (it is what gets logged)", got)
	}
	if !errors.Is(e, e.Cause) || errors.Unwrap(e) != e.Cause {
		t.Errorf("Unwrap does not return the cause")
	}
}

func TestJSONShape(t *testing.T) {
	secret := errors.New("dynamodb: arn:aws:dynamodb:eu-west-1:123456789012:table/secret")
	for _, tc := range []struct {
		name string
		err  *apierr.Error
		want string
	}{
		{"with details and cause", &apierr.Error{Code: apierr.Unavailable, Message: "dynamodb is unavailable",
			Details: map[string]any{"dependency": "dynamodb"}, Cause: secret},
			`{"code":"UNAVAILABLE","message":"dynamodb is unavailable","details":{"dependency":"dynamodb"}}`},
		{"Dependency", apierr.Dependency("dynamodb", secret),
			`{"code":"UNAVAILABLE","message":"dynamodb is unavailable; retry the request","details":{"dependency":"dynamodb"}}`},
		{"invalid", apierr.Invalid("too_large", "", "request body exceeds 262144 bytes"),
			`{"code":"INVALID_INPUT","message":"request body exceeds 262144 bytes","details":{"reason":"too_large"}}`},
		{"no details", apierr.New(apierr.NotFound, "not found"),
			`{"code":"NOT_FOUND","message":"not found","details":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.err)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("json = %s, want %s", b, tc.want)
			}
			if strings.Contains(string(b), "secret") || strings.Contains(string(b), "Cause") || strings.Contains(string(b), "cause") {
				t.Errorf("json leaks the cause: %s", b)
			}
		})
	}
}
