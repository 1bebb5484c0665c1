package dsse

import (
	"testing"
)

// Payload decodes the payload as Open does: any of DSSE's base64 forms;
// anything that is not an envelope with a payload is an error.
func TestPayload(t *testing.T) {
	want := []byte(`{"version":"1.0.0"}` + "\xfb\xff")
	for _, enc := range base64Encodings {
		env := []byte(`{"payloadType":"x","payload":"` + enc.EncodeToString(want) + `","signatures":[]}`)
		if got, err := Payload(env); err != nil || string(got) != string(want) {
			t.Errorf("%q: %q %v", env, got, err)
		}
	}
	for _, bad := range []string{``, `[]`, `{}`, `{"payload":""}`, `{"payload":"a\nb"}`, `{"payload":"!!"}`} {
		if _, err := Payload([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
