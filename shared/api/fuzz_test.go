package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// FuzzDecodeInput decodes arbitrary bodies into every catalog method's
// input, as the gateway does before authorizing. It must never panic; a
// refusal is INVALID_INPUT with a reason; an accepted body encodes back to
// JSON that decodes to the same input (nothing accepted is half-read).
//
// The seed corpus is every sample event's body, the hostile shapes of the
// hardening issue (256 KiB each) and what fuzzing found (testdata/fuzz).
func FuzzDecodeInput(f *testing.F) {
	samples, _ := filepath.Glob("../../events/*.json")
	for _, p := range samples {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var ev events.APIGatewayV2HTTPRequest
		if json.Unmarshal(data, &ev) == nil && ev.Body != "" {
			f.Add([]byte(ev.Body))
		}
	}
	for _, c := range hostileBodies(api.MaxBody - 64) {
		f.Add([]byte(c.body))
	}
	for _, s := range []string{
		`{"tenantId":"acme","window":{"end":"2026-12-01T00:00:00.5+01:00"},"poolId":"p","resource":"gpu","count":1}`,
		`{"tenantId":"a","tenantId":"b"}`, `{"tenantId":"\u0061"}`, `{"tenantId":"acme","limit":1e2}`,
		`{"tenantId":"acme","manifest":{"a":[{"b":null}]}}`, `{"tenantId":"acme"} `, "\xff", `{"tenantId":"acme",}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > api.MaxBody {
			return // the gateway refuses it before decoding
		}
		for _, m := range api.Catalog {
			in := reflect.New(m.Input).Interface()
			err := api.DecodeInput(body, in)
			if err != nil {
				e := apierr.As(err)
				if e == nil || e.Code != apierr.InvalidInput || e.Details["reason"] == nil {
					t.Fatalf("%s: refusal %v is not INVALID_INPUT with a reason", m.Name, err)
				}
				continue
			}
			again, err := json.Marshal(in)
			if err != nil {
				t.Fatalf("%s: accepted input does not encode: %v", m.Name, err)
			}
			in2 := reflect.New(m.Input).Interface()
			if err := api.DecodeInput(again, in2); err != nil {
				t.Fatalf("%s: %s was accepted, its encoding %s is not: %v", m.Name, body, again, err)
			}
			if twice, _ := json.Marshal(in2); string(twice) != string(again) {
				t.Fatalf("%s: decoding changed the input: %s then %s", m.Name, again, twice)
			}
		}
	})
}
