package strictjson_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Patterns used only by these tests (names prefixed so they cannot clash
// with the patterns the API registers).
var (
	lowerPattern = strictjson.RegisterPattern("test.lower", `^[a-z]+$`)
	keyPattern   = strictjson.RegisterPattern("test.key", `^[a-z][a-z0-9-]*$`)
)

// tenant mirrors api.Tenant: an embedded struct whose fields are flattened.
type tenant struct {
	TenantID string `json:"tenantId" bc:"required,max=8,pattern=test.lower"`
}

// page is a second embedded struct (like api.Page).
type page struct {
	Limit *int `json:"limit" bc:"min=1,max=1000"`
}

type window struct {
	Start *time.Time `json:"start"`
	End   time.Time  `json:"end" bc:"required"`
}

type binary struct {
	Platform string `json:"platform" bc:"required"`
	Size     int64  `json:"size" bc:"min=1"`
}

// counts declares bounds for its values, like api.Resources.
type counts map[string]int

func (counts) ValueBounds() (int64, int64) { return 1, 10 }

type input struct {
	tenant
	page
	Name     string            `json:"name" bc:"min=2,max=5"`
	Count    int               `json:"count" bc:"min=-3,max=100"`
	Small    int32             `json:"small"`
	Big      int64             `json:"big"`
	Exact    int64             `json:"exact" bc:"strictint"`
	Flag     bool              `json:"flag"`
	Note     *string           `json:"note" bc:"max=3"`
	Tags     []string          `json:"tags" bc:"min=1,max=3"`
	Binaries []binary          `json:"binaries"`
	Labels   map[string]string `json:"labels" bc:"max=2,pattern=test.key"`
	Counts   counts            `json:"counts"`
	Window   window            `json:"window"`
	When     time.Time         `json:"when"`
	Doc      strictjson.Object `json:"doc"`
	Raw      json.RawMessage   `json:"raw"`
	Hidden   string            `json:"-"`
	NoTag    string
	secret   string //nolint:unused // proves unexported fields are not decoded
}

// doc builds a request body with the required tenantId and the given members.
func doc(members string) string {
	if members == "" {
		return `{"tenantId":"acme"}`
	}
	return `{"tenantId":"acme",` + members + `}`
}

const anyField = "\x00any" // the test does not pin the field of this error

type errCase struct {
	name    string
	in      string
	field   string
	kind    string
	problem string // substring of FieldError.Problem; "" to skip
}

func checkFieldError(t *testing.T, err error, tc errCase) {
	t.Helper()
	if err == nil {
		t.Fatalf("Decode(%s) = nil, want %s error at %q", tc.in, tc.kind, tc.field)
	}
	var fe *strictjson.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Decode(%s) error %T %v, want *strictjson.FieldError", tc.in, err, err)
	}
	if tc.field != anyField && fe.Field != tc.field {
		t.Errorf("Field = %q, want %q (error %q)", fe.Field, tc.field, fe.Error())
	}
	if fe.Kind != tc.kind {
		t.Errorf("Kind = %q, want %q (error %q)", fe.Kind, tc.kind, fe.Error())
	}
	if tc.problem != "" && !strings.Contains(fe.Problem, tc.problem) {
		t.Errorf("Problem = %q, want it to contain %q", fe.Problem, tc.problem)
	}
	want := fe.Problem
	if fe.Field != "" {
		want = fe.Field + ": " + fe.Problem
	}
	if fe.Error() != want {
		t.Errorf("Error() = %q, want %q", fe.Error(), want)
	}
}

func runErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &v, ""), tc)
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	runErrCases(t, []errCase{
		{"empty document", ``, "", "malformed", "malformed JSON"},
		{"whitespace only", "  \n", "", "malformed", "malformed JSON"},
		{"unclosed object", `{"tenantId":"acme"`, anyField, "malformed", ""},
		{"trailing comma in object", `{"tenantId":"acme",}`, anyField, "malformed", ""},
		{"trailing comma in array", doc(`"tags":["a",]`), anyField, "malformed", ""},
		{"missing colon", `{"tenantId" "acme"}`, anyField, "malformed", ""},
		{"missing comma", `{"tenantId":"acme" "name":"ab"}`, anyField, "malformed", ""},
		{"leading zero", doc(`"count":01`), anyField, "malformed", ""},
		{"plus sign", doc(`"count":+1`), anyField, "malformed", ""},
		{"single quotes", `{'tenantId':'acme'}`, anyField, "malformed", ""},
		{"bare word", `acme`, "", "malformed", ""},
		{"nested value missing", doc(`"window":{"end":}`), anyField, "malformed", ""},
		{"comment", `{"tenantId":"acme"} // hi`, "", "malformed", ""},
	})
}

func TestDecodeTrailingData(t *testing.T) {
	runErrCases(t, []errCase{
		{"second object", `{} {}`, "", "malformed", "trailing data"},
		{"second document after valid", doc("") + ` {}`, "", "malformed", "trailing data"},
		{"garbage byte", doc("") + `x`, "", "malformed", "trailing data"},
		{"garbage after empty object", `{}x`, "", "malformed", "trailing data"},
		{"stray bracket", doc("") + `]`, "", "malformed", "trailing data"},
		{"null after value", doc("") + ` null`, "", "malformed", "trailing data"},
		{"number after value", doc("") + `1`, "", "malformed", "trailing data"},
	})
	t.Run("trailing whitespace is fine", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc("")+" \n\t\r\n"), &v, ""); err != nil {
			t.Fatalf("Decode = %v, want nil", err)
		}
		if v.TenantID != "acme" {
			t.Errorf("TenantID = %q, want acme", v.TenantID)
		}
	})
}

func TestDecodeUnknownFields(t *testing.T) {
	runErrCases(t, []errCase{
		{"root", doc(`"x":1`), "x", "unknown_field", "unknown field"},
		{"root before known", `{"x":1,"tenantId":"acme"}`, "x", "unknown_field", ""},
		{"case differs from tag", `{"TenantId":"acme"}`, "TenantId", "unknown_field", ""},
		{"Go field name", `{"TenantID":"acme"}`, "TenantID", "unknown_field", ""},
		{"embedded struct name", doc(`"tenant":{"tenantId":"acme"}`), "tenant", "unknown_field", ""},
		{"json dash field by Go name", doc(`"Hidden":"x"`), "Hidden", "unknown_field", ""},
		{"json dash field by dash", doc(`"-":"x"`), "-", "unknown_field", ""},
		{"unexported field", doc(`"secret":"x"`), "secret", "unknown_field", ""},
		{"nested in window", doc(`"window":{"end":"2025-01-01T00:00:00Z","x":1}`), "window.x", "unknown_field", ""},
		{"nested in second array element", doc(`"binaries":[{"platform":"a"},{"platform":"b","y":1}]`), "binaries[1].y", "unknown_field", ""},
		{"unknown value is not inspected", doc(`"x":null`), "x", "unknown_field", ""},
	})
	t.Run("untagged field uses Go name", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc(`"NoTag":"z"`)), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if v.NoTag != "z" {
			t.Errorf("NoTag = %q, want z", v.NoTag)
		}
	})
}

// lenient is a DSSE-like envelope: unknown members are skipped at its own
// level (strictjson.IgnoreUnknown), its strict members stay strict.
type lenient struct {
	strictjson.IgnoreUnknown
	Kind string       `json:"kind" bc:"required"`
	Sigs []lenientSig `json:"sigs" bc:"required,max=2"`
	Win  window       `json:"win"`
}

type lenientSig struct {
	strictjson.IgnoreUnknown
	Sig string `json:"sig" bc:"required"`
}

func TestDecodeIgnoreUnknown(t *testing.T) {
	var v lenient
	in := `{"ext":{"deep":[1,{"a":null}]},"kind":"k","sigs":[{"cert":"x","sig":"s","n":null}],"more":"x"}`
	if err := strictjson.Decode([]byte(in), &v, "manifest"); err != nil {
		t.Fatalf("Decode(%s) = %v", in, err)
	}
	if v.Kind != "k" || len(v.Sigs) != 1 || v.Sigs[0].Sig != "s" {
		t.Errorf("decoded %+v", v)
	}
	if !strictjson.IgnoresUnknown(reflect.TypeFor[lenient]()) || strictjson.IgnoresUnknown(reflect.TypeFor[input]()) {
		t.Error("IgnoresUnknown")
	}
	for _, tc := range []errCase{
		{"duplicate unknown key", `{"kind":"k","sigs":[],"x":1,"x":2}`, "manifest.x", "duplicate_key", ""},
		{"duplicate known key", `{"kind":"k","kind":"k","sigs":[]}`, "manifest.kind", "duplicate_key", ""},
		{"wrong type", `{"kind":1,"sigs":[]}`, "manifest.kind", "type", ""},
		{"null", `{"kind":"k","sigs":null}`, "manifest.sigs", "type", ""},
		{"missing", `{"sigs":[],"x":1}`, "manifest.kind", "required", ""},
		{"missing in a signature", `{"kind":"k","sigs":[{"cert":"x"}]}`, "manifest.sigs[0].sig", "required", ""},
		{"limits still hold", `{"kind":"k","sigs":[{"sig":"a"},{"sig":"b"},{"sig":"c"}]}`, "manifest.sigs", "constraint", ""},
		{"a member of another type stays strict", `{"kind":"k","sigs":[],"win":{"end":"2025-01-01T00:00:00Z","x":1}}`, "manifest.win.x", "unknown_field", ""},
		{"malformed inside an unknown member", `{"kind":"k","sigs":[],"x":[1,}`, anyField, "malformed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v lenient
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &v, "manifest"), tc)
		})
	}
}

func TestDecodeDuplicateKeys(t *testing.T) {
	runErrCases(t, []errCase{
		{"root", `{"tenantId":"acme","tenantId":"acme"}`, "tenantId", "duplicate_key", "duplicate key"},
		{"root different values", `{"tenantId":"acme","tenantId":"other"}`, "tenantId", "duplicate_key", ""},
		{"root via escape", `{"tenantId":"acme","tenant\u0049d":"acme"}`, "tenantId", "duplicate_key", ""},
		{"unknown key twice", doc(`"x":1,"x":2`), "x", "duplicate_key", ""},
		{"nested", doc(`"window":{"end":"2025-01-01T00:00:00Z","end":"2025-01-02T00:00:00Z"}`), "window.end", "duplicate_key", ""},
		{"in array element", doc(`"binaries":[{"platform":"a"},{"platform":"a","platform":"b"}]`), "binaries[1].platform", "duplicate_key", ""},
		{"in map", doc(`"labels":{"ab":"x","ab":"y"}`), "labels.ab", "duplicate_key", ""},
		{"inside Object", doc(`"doc":{"a":{"b":1,"b":2}}`), "doc.a.b", "duplicate_key", ""},
		{"inside RawMessage", doc(`"raw":{"a":1,"a":1}`), "raw.a", "duplicate_key", ""},
	})
}

func TestDecodeNullIsAWrongType(t *testing.T) {
	runErrCases(t, []errCase{
		{"document", `null`, "", "type", "expected object, got null"},
		{"string", `{"tenantId":null}`, "tenantId", "type", "expected string, got null"},
		{"int", doc(`"count":null`), "count", "type", "expected integer, got null"},
		{"int64", doc(`"big":null`), "big", "type", "got null"},
		{"bool", doc(`"flag":null`), "flag", "type", "expected boolean, got null"},
		{"object (struct)", doc(`"window":null`), "window", "type", "expected object, got null"},
		{"array", doc(`"tags":null`), "tags", "type", "expected array, got null"},
		{"map", doc(`"labels":null`), "labels", "type", "expected object, got null"},
		{"named map", doc(`"counts":null`), "counts", "type", "got null"},
		{"time", doc(`"when":null`), "when", "type", "got null"},
		{"pointer to string", doc(`"note":null`), "note", "type", "expected string, got null"},
		{"pointer to int in embedded struct", doc(`"limit":null`), "limit", "type", "expected integer, got null"},
		{"pointer to time", doc(`"window":{"start":null,"end":"2025-01-01T00:00:00Z"}`), "window.start", "type", "got null"},
		{"Object", doc(`"doc":null`), "doc", "type", "expected object, got null"},
		{"RawMessage", doc(`"raw":null`), "raw", "type", "got null"},
		{"array element", doc(`"tags":["a",null]`), "tags[1]", "type", "got null"},
		{"array element struct", doc(`"binaries":[null]`), "binaries[0]", "type", "expected object, got null"},
		{"map value", doc(`"labels":{"ab":null}`), "labels.ab", "type", "got null"},
	})
}

func TestDecodeWrongTypes(t *testing.T) {
	runErrCases(t, []errCase{
		{"document array", `[]`, "", "type", "expected object, got array"},
		{"document string", `"acme"`, "", "type", "expected object, got string"},
		{"document number", `1`, "", "type", "expected object, got number"},
		{"string gets number", `{"tenantId":1}`, "tenantId", "type", "expected string, got number"},
		{"string gets bool", doc(`"name":true`), "name", "type", "expected string, got boolean"},
		{"string gets object", doc(`"name":{}`), "name", "type", "expected string, got object"},
		{"string gets array", doc(`"name":["ab"]`), "name", "type", "expected string, got array"},
		{"int gets string", doc(`"count":"7"`), "count", "type", "expected integer, got string"},
		{"int gets bool", doc(`"count":true`), "count", "type", "expected integer, got boolean"},
		{"bool gets string", doc(`"flag":"true"`), "flag", "type", "expected boolean, got string"},
		{"bool gets number", doc(`"flag":1`), "flag", "type", "expected boolean, got number"},
		{"struct gets array", doc(`"window":[]`), "window", "type", "expected object, got array"},
		{"array gets string", doc(`"tags":"a"`), "tags", "type", "expected array, got string"},
		{"array gets object", doc(`"tags":{}`), "tags", "type", "expected array, got object"},
		{"array element", doc(`"tags":["a",1]`), "tags[1]", "type", "expected string, got number"},
		{"map gets array", doc(`"labels":[]`), "labels", "type", "expected object, got array"},
		{"map value", doc(`"labels":{"ab":1}`), "labels.ab", "type", "expected string, got number"},
		{"named map value", doc(`"counts":{"gpu":"1"}`), "counts.gpu", "type", "expected integer, got string"},
		{"time gets number", doc(`"when":1700000000`), "when", "type", "got number"},
		{"nested time gets bool", doc(`"window":{"end":true}`), "window.end", "type", "got boolean"},
		{"Object gets array", doc(`"doc":[]`), "doc", "type", "expected object, got array"},
		{"Object gets string", doc(`"doc":"{}"`), "doc", "type", "expected object, got string"},
		{"pointer gets wrong type", doc(`"note":5`), "note", "type", "expected string, got number"},
		{"array of struct element", doc(`"binaries":[{"platform":"a"},"b"]`), "binaries[1]", "type", "expected object, got string"},
		{"nested struct field", doc(`"binaries":[{"platform":"a","size":"1"}]`), "binaries[0].size", "type", "expected integer, got string"},
	})
}

func TestDecodeIntegers(t *testing.T) {
	runErrCases(t, []errCase{
		{"fraction", doc(`"count":7.5`), "count", "type", "expected integer, got 7.5"},
		{"fraction past the exponent", doc(`"count":1.25e1`), "count", "type", "expected integer"},
		{"below one", doc(`"count":0.5`), "count", "type", "expected integer"},
		{"tiny", doc(`"count":1e-999999999999999999999`), "count", "type", "expected integer"},
		{"integral but huge", doc(`"big":1e19`), "big", "constraint", "out of range"},
		{"integral, huge exponent", doc(`"big":1e999999999999999999999`), "big", "constraint", "out of range"},
		{"integral, huge, fraction written", doc(`"count":5.0e40`), "count", "constraint", "out of range"},
		{"strictint fraction zero", doc(`"exact":7.0`), "exact", "type", "without fraction or exponent"},
		{"strictint exponent", doc(`"exact":7e0`), "exact", "type", "without fraction or exponent"},
		{"strictint upper exponent", doc(`"exact":1E2`), "exact", "type", "without fraction or exponent"},
		{"quoted", doc(`"count":"7"`), "count", "type", "expected integer"},
		{"int64 overflow", doc(`"big":9223372036854775808`), "big", "constraint", "out of range"},
		{"int64 underflow", doc(`"big":-9223372036854775809`), "big", "constraint", "out of range"},
		{"int overflow", doc(`"count":9223372036854775808`), "count", "constraint", "out of range"},
		{"huge", doc(`"big":100000000000000000000000000000`), "big", "constraint", "out of range"},
		{"int32 overflow", doc(`"small":2147483648`), "small", "constraint", "out of range"},
		{"int32 underflow", doc(`"small":-2147483649`), "small", "constraint", "out of range"},
		{"below min", doc(`"count":-4`), "count", "constraint", "at least -3"},
		{"above max", doc(`"count":101`), "count", "constraint", "at most 100"},
		{"pointer below min", doc(`"limit":0`), "limit", "constraint", "at least 1"},
		{"pointer above max", doc(`"limit":1001`), "limit", "constraint", "at most 1000"},
		{"array element struct min", doc(`"binaries":[{"platform":"a","size":0}]`), "binaries[0].size", "constraint", "at least 1"},
	})

	ok := []struct {
		name  string
		in    string
		check func(v *input) bool
	}{
		{"zero", doc(`"count":0`), func(v *input) bool { return v.Count == 0 }},
		// -0 is a JSON integer literal (the grammar allows it); it decodes to 0.
		{"minus zero", doc(`"count":-0`), func(v *input) bool { return v.Count == 0 }},
		{"min bound", doc(`"count":-3`), func(v *input) bool { return v.Count == -3 }},
		{"max bound", doc(`"count":100`), func(v *input) bool { return v.Count == 100 }},
		{"int64 max", doc(`"big":9223372036854775807`), func(v *input) bool { return v.Big == 9223372036854775807 }},
		{"int64 min", doc(`"big":-9223372036854775808`), func(v *input) bool { return v.Big == -9223372036854775808 }},
		{"int32 max", doc(`"small":2147483647`), func(v *input) bool { return v.Small == 2147483647 }},
		{"int32 min", doc(`"small":-2147483648`), func(v *input) bool { return v.Small == -2147483648 }},
		{"pointer bounds", doc(`"limit":1000`), func(v *input) bool { return v.Limit != nil && *v.Limit == 1000 }},
		// Any integral number, as JSON Schema's integer (strictint aside).
		{"fraction zero", doc(`"count":7.0`), func(v *input) bool { return v.Count == 7 }},
		{"exponent", doc(`"count":7e0`), func(v *input) bool { return v.Count == 7 }},
		{"upper exponent", doc(`"count":1E2`), func(v *input) bool { return v.Count == 100 }},
		{"negative exponent", doc(`"count":70e-1`), func(v *input) bool { return v.Count == 7 }},
		{"fraction moved by the exponent", doc(`"count":0.05e2`), func(v *input) bool { return v.Count == 5 }},
		{"negative with fraction zero", doc(`"count":-3.000`), func(v *input) bool { return v.Count == -3 }},
		{"zero with exponent", doc(`"count":0e99999999999999999999`), func(v *input) bool { return v.Count == 0 }},
		{"minus zero point zero", doc(`"count":-0.0`), func(v *input) bool { return v.Count == 0 }},
		{"int64 max with exponent", doc(`"big":922337203685477580.7e1`), func(v *input) bool { return v.Big == 9223372036854775807 }},
		{"pointer with fraction zero", doc(`"limit":10.0`), func(v *input) bool { return v.Limit != nil && *v.Limit == 10 }},
		{"map value with exponent", doc(`"counts":{"gpu":2e0}`), func(v *input) bool { return v.Counts["gpu"] == 2 }},
		{"strictint literal", doc(`"exact":7`), func(v *input) bool { return v.Exact == 7 }},
		{"absent pointer stays nil", doc(""), func(v *input) bool { return v.Limit == nil }},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			if err := strictjson.Decode([]byte(tc.in), &v, ""); err != nil {
				t.Fatalf("Decode(%s) = %v, want nil", tc.in, err)
			}
			if !tc.check(&v) {
				t.Errorf("Decode(%s) gave %+v", tc.in, v)
			}
		})
	}
}

func TestDecodeStringLengthInCharacters(t *testing.T) {
	// name: min=2,max=5; note: *string max=3; tenantId: max=8 then pattern.
	runErrCases(t, []errCase{
		{"too short ascii", doc(`"name":"a"`), "name", "constraint", "at least 2 characters"},
		{"too short one two-byte rune", doc(`"name":"é"`), "name", "constraint", "at least 2 characters"},
		{"too long ascii", doc(`"name":"abcdef"`), "name", "constraint", "at most 5 characters"},
		{"too long runes", doc(`"name":"日本語日本語"`), "name", "constraint", "at most 5 characters"},
		{"too long escaped runes", doc(`"name":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"`), "name", "constraint", "at most 5 characters"},
		{"pointer too long", doc(`"note":"abcd"`), "note", "constraint", "at most 3 characters"},
		{"empty string below min", doc(`"name":""`), "name", "constraint", "at least 2"},
	})
	ok := []struct{ name, in, want string }{
		{"two two-byte runes (4 bytes)", doc(`"name":"éé"`), "éé"},
		{"five two-byte runes (10 bytes)", doc(`"name":"ééééé"`), "ééééé"},
		{"five three-byte runes (15 bytes)", doc(`"name":"日本語日本"`), "日本語日本"},
		{"five four-byte runes (20 bytes)", doc(`"name":"🙂🙂🙂🙂🙂"`), "🙂🙂🙂🙂🙂"},
		{"escaped surrogate pair counts once", doc(`"name":"\ud83d\ude42\ud83d\ude42"`), "🙂🙂"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			if err := strictjson.Decode([]byte(tc.in), &v, ""); err != nil {
				t.Fatalf("Decode(%s) = %v, want nil", tc.in, err)
			}
			if v.Name != tc.want {
				t.Errorf("Name = %q, want %q", v.Name, tc.want)
			}
		})
	}
	t.Run("pointer three umlauts (6 bytes)", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc(`"note":"äöü"`)), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if v.Note == nil || *v.Note != "äöü" {
			t.Errorf("Note = %v, want äöü", v.Note)
		}
	})
}

func TestDecodePatterns(t *testing.T) {
	runErrCases(t, []errCase{
		{"uppercase", `{"tenantId":"ACME"}`, "tenantId", "constraint", "must match " + lowerPattern.String()},
		{"digit", `{"tenantId":"acme1"}`, "tenantId", "constraint", "must match"},
		{"empty", `{"tenantId":""}`, "tenantId", "constraint", "must match"},
		{"max checked in characters", `{"tenantId":"abcdefghi"}`, "tenantId", "constraint", "at most 8 characters"},
		{"map key", doc(`"labels":{"ok":"1","Bad":"2"}`), "labels.Bad", "constraint", "key must match " + keyPattern.String()},
		// The path of the empty key is the map's path joined with "".
		{"map key empty", doc(`"labels":{"":"1"}`), "labels.", "constraint", "key must match"},
		{"map too many entries", doc(`"labels":{"a":"1","b":"2","c":"3"}`), "labels", "constraint", "at most 2 entries"},
	})
	t.Run("matching values decode", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(`{"tenantId":"abcdefgh","labels":{"a-1":"x","b":"y"}}`), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if v.TenantID != "abcdefgh" || !reflect.DeepEqual(v.Labels, map[string]string{"a-1": "x", "b": "y"}) {
			t.Errorf("got %+v", v)
		}
	})
}

func TestDecodeSliceAndMapBounds(t *testing.T) {
	runErrCases(t, []errCase{
		{"slice below min", doc(`"tags":[]`), "tags", "constraint", "at least 1 elements"},
		{"slice above max", doc(`"tags":["a","b","c","d"]`), "tags", "constraint", "at most 3 elements"},
		{"map value below ValueBounds", doc(`"counts":{"gpu":0}`), "counts.gpu", "constraint", "at least 1"},
		{"map value above ValueBounds", doc(`"counts":{"gpu":2,"cpu":11}`), "counts.cpu", "constraint", "at most 10"},
		{"map value not integral", doc(`"counts":{"gpu":1.5}`), "counts.gpu", "type", "expected integer"},
	})
	t.Run("bounds inclusive", func(t *testing.T) {
		var v input
		in := doc(`"tags":["a","b","c"],"counts":{"gpu":1,"cpu":10},"labels":{}`)
		if err := strictjson.Decode([]byte(in), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if len(v.Tags) != 3 || v.Counts["gpu"] != 1 || v.Counts["cpu"] != 10 || v.Labels == nil || len(v.Labels) != 0 {
			t.Errorf("got %+v", v)
		}
	})
}

func TestDecodeRequired(t *testing.T) {
	runErrCases(t, []errCase{
		{"embedded at root", `{}`, "tenantId", "required", "is required"},
		{"embedded with other fields", `{"name":"ab"}`, "tenantId", "required", ""},
		{"nested struct", doc(`"window":{}`), "window.end", "required", "is required"},
		{"nested struct with optional field only", doc(`"window":{"start":"2025-01-01T00:00:00Z"}`), "window.end", "required", ""},
		{"struct in array", doc(`"binaries":[{"platform":"a"},{"size":1}]`), "binaries[1].platform", "required", ""},
		{"present but null is a type error", `{"tenantId":null}`, "tenantId", "type", "got null"},
		// Errors in present fields are reported before missing ones.
		{"present error wins over missing", `{"name":1}`, "name", "type", ""},
	})
	t.Run("absent optional struct is not required", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc("")), &v, ""); err != nil {
			t.Fatalf("Decode = %v; window.end is only required when window is present", err)
		}
	})

	type deep struct {
		Outer struct {
			Inner struct {
				X string `json:"x" bc:"required"`
			} `json:"inner" bc:"required"`
		} `json:"outer" bc:"required"`
	}
	for _, tc := range []errCase{
		{"deep missing outer", `{}`, "outer", "required", ""},
		{"deep missing inner", `{"outer":{}}`, "outer.inner", "required", ""},
		{"deep missing x", `{"outer":{"inner":{}}}`, "outer.inner.x", "required", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v deep
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &v, ""), tc)
		})
	}
}

func TestDecodeTimes(t *testing.T) {
	ok := []struct {
		name string
		in   string
		want time.Time
	}{
		{"utc", "2025-03-04T05:06:07Z", time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)},
		{"fraction millis", "2025-03-04T05:06:07.123Z", time.Date(2025, 3, 4, 5, 6, 7, 123e6, time.UTC)},
		{"fraction nanos", "2025-03-04T05:06:07.123456789Z", time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)},
		{"positive offset", "2025-03-04T05:06:07+02:00", time.Date(2025, 3, 4, 3, 6, 7, 0, time.UTC)},
		{"negative half-hour offset", "2025-03-04T05:06:07-05:30", time.Date(2025, 3, 4, 10, 36, 7, 0, time.UTC)},
		{"fraction and offset", "2025-03-04T05:06:07.5+01:00", time.Date(2025, 3, 4, 4, 6, 7, 5e8, time.UTC)},
		{"zero offset", "2025-03-04T05:06:07+00:00", time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)},
		// RFC 3339 §5.6: "T" and "Z" may alternatively be lower case.
		{"lowercase t and z", "2025-03-04t05:06:07z", time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)},
		{"lowercase t, offset", "2025-03-04t05:06:07.5+01:00", time.Date(2025, 3, 4, 4, 6, 7, 5e8, time.UTC)},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			in := doc(`"when":"` + tc.in + `","window":{"start":"` + tc.in + `","end":"` + tc.in + `"}`)
			if err := strictjson.Decode([]byte(in), &v, ""); err != nil {
				t.Fatalf("Decode(%s) = %v", in, err)
			}
			if !v.When.Equal(tc.want) {
				t.Errorf("when = %v, want %v", v.When, tc.want)
			}
			if v.Window.Start == nil || !v.Window.Start.Equal(tc.want) || !v.Window.End.Equal(tc.want) {
				t.Errorf("window = %+v, want %v", v.Window, tc.want)
			}
			got, err := strictjson.ParseTime(tc.in)
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("ParseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}

	bad := []string{
		"2025-03-04T05:06:07",           // no zone
		"2025-03-04T05:06:07.123",       // fraction, no zone
		"2025-03-04",                    // date only
		"05:06:07Z",                     // time only
		"2025-03-04 05:06:07Z",          // space instead of T
		"2025-03-04T05:06:07+0200",      // offset without colon
		"2025-03-04T05:06:07+02",        // offset without minutes
		"2025-03-04T05:06Z",             // no seconds
		"2025-13-04T05:06:07Z",          // month 13
		"2025-02-30T05:06:07Z",          // day out of range
		"2025-03-04T24:00:00Z",          // hour 24
		"2025-03-04T05:06:07.Z",         // empty fraction
		"2025-3-4T5:6:7Z",               // not zero padded
		"",                              // empty
		"1741064767",                    // epoch seconds
		"Tue, 04 Mar 2025 05:06:07 GMT", // RFC 1123
		// RFC 3339 §5.6: time-secfrac = "." 1*DIGIT; a comma is not RFC 3339.
		"2025-03-04T05:06:07,5Z",
		// RFC 3339 §5.6: time-numoffset hours are 00-23 and minutes 00-59.
		"2025-03-04T05:06:07+24:00",
		"2025-03-04T05:06:07+23:60",
	}
	for _, s := range bad {
		t.Run("rejects "+s, func(t *testing.T) {
			var v input
			checkFieldError(t, strictjson.Decode([]byte(doc(`"when":"`+s+`"`)), &v, ""),
				errCase{in: s, field: "when", kind: "constraint", problem: "RFC 3339"})
			var w input
			checkFieldError(t, strictjson.Decode([]byte(doc(`"window":{"end":"`+s+`"}`)), &w, ""),
				errCase{in: s, field: "window.end", kind: "constraint", problem: "RFC 3339"})
			if _, err := strictjson.ParseTime(s); err == nil {
				t.Errorf("ParseTime(%q) = nil error", s)
			}
		})
	}
}

func TestDecodeObject(t *testing.T) {
	ok := []struct{ name, in, want string }{
		{"empty", `{}`, `{}`},
		{"kept as sent", "{ \"b\" : 1 ,\n \"a\" : [ true , null , \"x\" ] }", "{ \"b\" : 1 ,\n \"a\" : [ true , null , \"x\" ] }"},
		{"number literals kept", `{"n":1.50,"e":7e0,"big":123456789012345678901234567890}`, `{"n":1.50,"e":7e0,"big":123456789012345678901234567890}`},
		{"nested objects", `{"a":{"b":{"c":"d"}},"x":false}`, `{"a":{"b":{"c":"d"}},"x":false}`},
		{"null members kept", `{"a":null}`, `{"a":null}`},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			if err := strictjson.Decode([]byte(doc(`"doc":`+tc.in)), &v, ""); err != nil {
				t.Fatalf("Decode = %v", err)
			}
			if string(v.Doc) != tc.want {
				t.Errorf("Doc = %s, want %s", v.Doc, tc.want)
			}
			// The kept JSON decodes to the same value as the input.
			var a, b any
			if err := json.Unmarshal([]byte(tc.in), &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(v.Doc, &b); err != nil {
				t.Fatalf("kept JSON %s is invalid: %v", v.Doc, err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("kept JSON %s means %v, input meant %v", v.Doc, b, a)
			}
		})
	}
	t.Run("strings re-encoded as valid JSON", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc(`"doc":{"s":"a\"b\\c\u00e9\n<"}`)), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		var m map[string]string
		if err := json.Unmarshal(v.Doc, &m); err != nil {
			t.Fatalf("kept JSON %s invalid: %v", v.Doc, err)
		}
		if m["s"] != "a\"b\\cé\n<" {
			t.Errorf("s = %q", m["s"])
		}
	})
	t.Run("kept JSON decodes strictly again", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc(`"doc":{"tenantId":"inner","count":5}`)), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		var inner input
		if err := strictjson.Decode(v.Doc, &inner, "doc"); err != nil {
			t.Fatalf("Decode(kept) = %v", err)
		}
		if inner.TenantID != "inner" || inner.Count != 5 {
			t.Errorf("inner = %+v", inner)
		}
	})
	t.Run("MarshalJSON", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			obj  strictjson.Object
			want string
		}{
			{"nil is null", nil, `{"doc":null}`},
			{"value as is", strictjson.Object(`{"a":1}`), `{"doc":{"a":1}}`},
		} {
			got, err := json.Marshal(struct {
				Doc strictjson.Object `json:"doc"`
			}{tc.obj})
			if err != nil {
				t.Fatalf("%s: Marshal = %v", tc.name, err)
			}
			if string(got) != tc.want {
				t.Errorf("%s: Marshal = %s, want %s", tc.name, got, tc.want)
			}
		}
	})
	t.Run("RawMessage keeps any non-null value", func(t *testing.T) {
		var v input
		if err := strictjson.Decode([]byte(doc(`"raw":[1, "two" ,{"3":true}]`)), &v, ""); err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if string(v.Raw) != `[1, "two" ,{"3":true}]` {
			t.Errorf("Raw = %s", v.Raw)
		}
	})
}

func TestDecodePrefix(t *testing.T) {
	const prefix = "manifest.payload"
	for _, tc := range []errCase{
		{"unknown root field", doc(`"x":1`), "x", "unknown_field", ""},
		{"unknown nested field", doc(`"window":{"end":"2025-01-01T00:00:00Z","x":1}`), "window.x", "unknown_field", ""},
		{"unknown field in array element", doc(`"binaries":[{"platform":"a"},{"platform":"b","y":1}]`), "binaries[1].y", "unknown_field", ""},
		{"duplicate root key", `{"tenantId":"acme","tenantId":"acme"}`, "tenantId", "duplicate_key", ""},
		{"duplicate nested key", doc(`"window":{"end":"2025-01-01T00:00:00Z","end":"2025-01-01T00:00:00Z"}`), "window.end", "duplicate_key", ""},
		{"duplicate key in array element", doc(`"binaries":[{"platform":"a","platform":"a"}]`), "binaries[0].platform", "duplicate_key", ""},
		{"trailing data", doc("") + ` {}`, "", "malformed", "trailing data"},
		{"malformed document", `{`, "", "malformed", ""},
		{"document of wrong type", `[]`, "", "type", ""},
		{"null document", `null`, "", "type", ""},
		{"required", `{}`, "tenantId", "required", ""},
		{"nested required", doc(`"window":{}`), "window.end", "required", ""},
		{"constraint", doc(`"count":101`), "count", "constraint", ""},
		{"type", doc(`"tags":[1]`), "tags[0]", "type", ""},
		{"map key", doc(`"labels":{"Bad":"x"}`), "labels.Bad", "constraint", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plain, prefixed input
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &plain, ""), tc)
			want := tc
			want.field = prefix
			if tc.field != "" {
				want.field = prefix + "." + tc.field
			}
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &prefixed, prefix), want)
		})
	}

	// A document whose root is an array: paths are prefix + "[i]..." (no
	// dot before the bracket, docs/reference), whichever stage finds the problem.
	for _, tc := range []errCase{
		{"array root: unknown field (found while assigning)", `[{"platform":"a","x":1}]`, "p[0].x", "unknown_field", ""},
		{"array root: type (found while assigning)", `[{"platform":1}]`, "p[0].platform", "type", ""},
		{"array root: duplicate key (found while parsing)", `[{"platform":"a","platform":"a"}]`, "p[0].platform", "duplicate_key", ""},
		{"array root: malformed element (found while parsing)", `[{"platform":}]`, "p[0].platform", "malformed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v []binary
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &v, "p"), tc)
		})
	}
}

func TestDecodeSuccess(t *testing.T) {
	in := `{
		"tenantId": "acme",
		"limit": 10,
		"name": "gpu",
		"count": 7,
		"small": -5,
		"big": 1234567890123,
		"flag": true,
		"note": "hi",
		"tags": ["a", "b"],
		"binaries": [{"platform": "linux/amd64", "size": 3}, {"platform": "linux/arm64"}],
		"labels": {"team-a": "x"},
		"counts": {"gpu": 4},
		"window": {"end": "2025-01-02T00:00:00Z"},
		"when": "2025-01-01T00:00:00.25Z",
		"doc": {"k": [1]},
		"raw": "s",
		"NoTag": "n"
	}`
	var v input
	if err := strictjson.Decode([]byte(in), &v, ""); err != nil {
		t.Fatalf("Decode = %v", err)
	}
	limit, note := 10, "hi"
	want := input{
		tenant:   tenant{TenantID: "acme"},
		page:     page{Limit: &limit},
		Name:     "gpu",
		Count:    7,
		Small:    -5,
		Big:      1234567890123,
		Flag:     true,
		Note:     &note,
		Tags:     []string{"a", "b"},
		Binaries: []binary{{Platform: "linux/amd64", Size: 3}, {Platform: "linux/arm64"}},
		Labels:   map[string]string{"team-a": "x"},
		Counts:   counts{"gpu": 4},
		Window:   window{End: time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)},
		When:     time.Date(2025, 1, 1, 0, 0, 0, 25e7, time.UTC),
		Doc:      strictjson.Object(`{"k": [1]}`),
		Raw:      json.RawMessage(`"s"`),
		NoTag:    "n",
	}
	if !v.When.Equal(want.When) || !v.Window.End.Equal(want.Window.End) {
		t.Errorf("times: got when=%v end=%v", v.When, v.Window.End)
	}
	v.When, v.Window.End = want.When, want.Window.End
	if !reflect.DeepEqual(v, want) {
		t.Errorf("Decode gave\n%+v\nwant\n%+v", v, want)
	}
}

func TestDecodePanicsOnProgrammerErrors(t *testing.T) {
	type unregistered struct {
		S string `json:"s" bc:"pattern=test.never-registered"`
	}
	type badTag struct {
		S string `json:"s" bc:"maxlen=3"`
	}
	type floaty struct {
		F float64 `json:"f"`
	}
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"non-pointer", func() { _ = strictjson.Decode([]byte(`{}`), input{}, "") }},
		{"nil pointer", func() { _ = strictjson.Decode([]byte(`{}`), (*input)(nil), "") }},
		{"unregistered pattern", func() { _ = strictjson.Decode([]byte(`{"s":"x"}`), &unregistered{}, "") }},
		{"unknown tag option", func() { _ = strictjson.Decode([]byte(`{"s":"x"}`), &badTag{}, "") }},
		{"unsupported type", func() { _ = strictjson.Decode([]byte(`{"f":1}`), &floaty{}, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.run()
		})
	}
}

func TestFieldErrorKinds(t *testing.T) {
	// Every Kind value the package documents is produced by some input.
	want := map[string]string{
		"malformed":     `{`,
		"unknown_field": doc(`"zzz":1`),
		"duplicate_key": `{"tenantId":"acme","tenantId":"acme"}`,
		"type":          doc(`"count":"1"`),
		"required":      `{}`,
		"constraint":    doc(`"count":1000`),
	}
	for kind, in := range want {
		t.Run(kind, func(t *testing.T) {
			var v input
			err := strictjson.Decode([]byte(in), &v, "")
			var fe *strictjson.FieldError
			if !errors.As(err, &fe) || fe.Kind != kind {
				t.Errorf("Decode(%s) = %v, want Kind %q", in, err, kind)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	type small struct {
		tenant
		Count  int               `json:"count" bc:"required,min=1,max=64,doc=how many devices"`
		Min    int64             `json:"min" bc:"min=0"`
		Max    *int              `json:"max" bc:"max=9"`
		Offset int               `json:"offset" bc:"min=-5,max=5"`
		Note   *string           `json:"note" bc:"min=1,max=3"`
		Window window            `json:"window" bc:"required"`
		Tags   []string          `json:"tags" bc:"max=3"`
		Counts counts            `json:"counts" bc:"min=1,pattern=test.key"`
		Doc    strictjson.Object `json:"doc"`
		Raw    json.RawMessage   `json:"raw"`
		Flag   bool              `json:"flag"`
		Hidden string            `json:"-"`
	}
	got := strictjson.Describe(reflect.TypeFor[small]())
	n := func(v int64) *int64 { return &v }
	// Min and Max state the bounds Constraints words: a string's length, an
	// integer's value, an array's or map's entries (not a map's values).
	want := []strictjson.FieldDoc{
		{Name: "tenantId", Type: "string", Required: true, Constraints: "at most 8 characters; matches " + lowerPattern.String(), Max: n(8)},
		{Name: "count", Type: "integer", Required: true, Constraints: "1..64", Doc: "how many devices", Min: n(1), Max: n(64)},
		{Name: "min", Type: "integer", Constraints: "at least 0", Min: n(0)},
		{Name: "max", Type: "integer", Constraints: "at most 9", Max: n(9)},
		{Name: "offset", Type: "integer", Constraints: "-5..5", Min: n(-5), Max: n(5)},
		{Name: "note", Type: "string", Constraints: "at least 1 character; at most 3 characters", Min: n(1), Max: n(3)},
		{Name: "window", Type: "object", Required: true},
		{Name: "window.start", Type: "string (RFC 3339 time)"},
		{Name: "window.end", Type: "string (RFC 3339 time)", Required: true},
		{Name: "tags", Type: "array of string", Constraints: "at most 3 entries", Max: n(3)},
		{Name: "counts", Type: "map of string to integer", Constraints: "at least 1 entry; keys match " + keyPattern.String() + "; values 1..10", Min: n(1)},
		{Name: "doc", Type: "object"},
		{Name: "raw", Type: "any"},
		{Name: "flag", Type: "boolean"},
	}
	if len(got) != len(want) {
		t.Fatalf("Describe gave %d fields, want %d:\n%+v", len(got), len(want), got)
	}
	bound := func(p *int64) string {
		if p == nil {
			return "nil"
		}
		return strconv.FormatInt(*p, 10)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("field %d:\n got %+v (min %s, max %s)\nwant %+v (min %s, max %s)", i,
				got[i], bound(got[i].Min), bound(got[i].Max), want[i], bound(want[i].Min), bound(want[i].Max))
		}
	}
}

// TestDecodeDepth: MaxDepth levels decode, one more is too_deep at the path
// where the limit was crossed, whatever the shape and wherever it is.
func TestDecodeDepth(t *testing.T) {
	nest := func(levels int, open, inner, close string) string {
		return strings.Repeat(open, levels) + inner + strings.Repeat(close, levels)
	}
	// doc and raw sit one level below the root object.
	within := strictjson.MaxDepth - 1
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"arrays in raw", doc(`"raw":` + nest(within, "[", "", "]"))},
		{"objects in doc", doc(`"doc":` + nest(within-1, `{"a":`, "{}", "}"))},
	} {
		t.Run(tc.name+" at the limit", func(t *testing.T) {
			var v input
			if err := strictjson.Decode([]byte(tc.in), &v, ""); err != nil {
				t.Fatalf("Decode = %v", err)
			}
		})
	}
	deepPath := "doc" + strings.Repeat(".a", within)
	for _, tc := range []errCase{
		{"arrays in raw", doc(`"raw":` + nest(within+1, "[", "", "]")), "raw" + strings.Repeat("[0]", within), "too_deep", "nesting deeper than 64"},
		{"objects in doc", doc(`"doc":` + nest(within, `{"a":`, "{}", "}")), deepPath, "too_deep", "nesting deeper than 64"},
		{"100,000 arrays at the root", nest(100_000, "[", "", "]"), strings.Repeat("[0]", strictjson.MaxDepth), "too_deep", ""},
		{"too deep beats a later syntax error", nest(100, "[", "", "]") + "x", anyField, "too_deep", ""},
		{"a syntax error before the limit wins", "[[x" + nest(100, "[", "", "]"), anyField, "malformed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v input
			checkFieldError(t, strictjson.Decode([]byte(tc.in), &v, ""), tc)
		})
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 entries", 1: "1 entry", 2: "2 entries"} {
		if got := strictjson.Plural(n, "entry"); got != want {
			t.Errorf("Plural(%d, entry) = %q", n, got)
		}
	}
	if got := strictjson.Plural(int64(1), "character"); got != "1 character" {
		t.Errorf("%q", got)
	}
	if got := strictjson.Plural(3, "node"); got != "3 nodes" {
		t.Errorf("%q", got)
	}
}

func TestDecodeNullable(t *testing.T) {
	type version struct {
		V string `json:"v" bc:"required"`
	}
	type doc struct {
		Running *version `json:"running" bc:"required,nullable"`
		Other   *version `json:"other,omitempty"`
	}
	var d doc
	if err := strictjson.Decode([]byte(`{"running":null}`), &d, ""); err != nil || d.Running != nil {
		t.Fatalf("null for a nullable member: %v, %+v", err, d.Running)
	}
	if err := strictjson.Decode([]byte(`{"running":{"v":"1"}}`), &d, ""); err != nil || d.Running == nil || d.Running.V != "1" {
		t.Fatalf("an object for a nullable member: %v, %+v", err, d.Running)
	}
	if err := strictjson.Decode([]byte(`{}`), &d, ""); err == nil {
		t.Fatal("a required nullable member left out was taken")
	}
	err := strictjson.Decode([]byte(`{"running":null,"other":null}`), &d, "")
	var fe *strictjson.FieldError
	if !errors.As(err, &fe) || fe.Field != "other" || fe.Kind != "type" {
		t.Fatalf("null for a member not nullable: %v", err)
	}
	docs := strictjson.Describe(reflect.TypeFor[doc]())
	if docs[0].Type != "object or null" {
		t.Errorf("Describe: %q, want object or null", docs[0].Type)
	}
}
