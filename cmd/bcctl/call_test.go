package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBuildBody(t *testing.T) {
	files := map[string]string{"m.json": `{"payloadType":"x"}`, "body.json": `{"tenantId":"from-file","limit":5}`}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	cases := []struct {
		args []string
		want string
		err  bool
	}{
		{nil, `{}`, false},
		{[]string{"tenantId=acme"}, `{"tenantId":"acme"}`, false},
		{[]string{"tenantId=a=b"}, `{"tenantId":"a=b"}`, false},
		{[]string{"count:=2", "window:={\"end\":\"2027-01-01T00:00:00Z\"}"}, `{"count":2,"window":{"end":"2027-01-01T00:00:00Z"}}`, false},
		{[]string{"manifest:=@m.json"}, `{"manifest":{"payloadType":"x"}}`, false},
		{[]string{"@body.json", "tenantId=override"}, `{"tenantId":"override","limit":5}`, false},
		{[]string{"count:=nope"}, ``, true},
		{[]string{"bare"}, ``, true},
		{[]string{"manifest:=@missing.json"}, ``, true},
	}
	for _, c := range cases {
		got, err := buildBody(c.args, read)
		if (err != nil) != c.err {
			t.Errorf("%v: err %v, want error %v", c.args, err, c.err)
			continue
		}
		if !c.err && string(got) != c.want {
			// @file objects have no defined key order: compare semantically.
			if !sameJSON(t, got, c.want) {
				t.Errorf("%v: got %s, want %s", c.args, got, c.want)
			}
		}
	}
}

func sameJSON(t *testing.T, a []byte, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		t.Fatalf("not JSON: %s / %s", a, b)
	}
	return reflect.DeepEqual(x, y)
}

func TestIDRanges(t *testing.T) {
	for _, c := range []struct {
		ids  []string
		want string
	}{
		{nil, ""},
		{[]string{"gpu.h100-3"}, "gpu.h100-3"},
		{[]string{"gpu.h100-8", "gpu.h100-9", "gpu.h100-10", "gpu.h100-11"}, "gpu.h100-[8-11]"},
		{[]string{"g-0", "g-1", "g-2", "g-5", "g-7", "g-8"}, "g-[0-2,5,7-8]"},
		{[]string{"g-node-3", "g-node-1", "g-node-2"}, "g-node-[1-3]"},
		{[]string{"a-1", "b-2", "a-2"}, "a-[1-2], b-2"},
		{[]string{"x", "g-01", "g-1"}, "g-1, x, g-01"},
	} {
		if got := idRanges(c.ids); got != c.want {
			t.Errorf("idRanges(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("gpu.h100-%d", i)
	}
	if got := idRanges(ids); got != "gpu.h100-[0-1023]" {
		t.Errorf("1,024 devices: %q", got)
	}
}

// Relative times and now count from the current minute, so a retry of the
// same line within the minute sends the same time.
func TestParseWhenRoundsToTheMinute(t *testing.T) {
	a := time.Date(2026, 12, 1, 10, 30, 5, 0, time.UTC)
	b := a.Add(50 * time.Second)
	for _, s := range []string{"now", "+2h", "+1d12h", "-5m"} {
		ta, err := parseWhen(s, a)
		if err != nil {
			t.Fatal(err)
		}
		tb, _ := parseWhen(s, b)
		if !ta.Equal(tb) || ta.Second() != 0 {
			t.Errorf("%s: %v at %v, %v at %v", s, ta, a, tb, b)
		}
	}
	if got, _ := parseWhen("+2h", a); !got.Equal(time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)) {
		t.Errorf("+2h = %v", got)
	}
	if got, err := parseWhen("2026-12-01t10:00:00z", a); err != nil || !got.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("lowercase RFC 3339: %v %v", got, err)
	}
}

// A method name call does not know gets the closest catalog method, or the
// bcctl verb of that name; nothing when nothing is close.
func TestCallSuggestions(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"reservation.create", "; did you mean reservations.create?"},
		{"reservations/create", "; did you mean reservations.create?"},
		{"reservations.lsit", "; did you mean reservations.list?"},
		{"nodes.hearbeat", "; did you mean nodes.heartbeat?"},
		{"releases.get", "; releases.get is a bcctl verb, not an API method: bcctl releases get"},
		{"pools.show", "; pools.show is a bcctl verb, not an API method: bcctl pools show"},
		{"frobnicate", ""},
		{"x.y", ""},
	} {
		_, errOut, code := bcctlRun(t, nil, "call", c.name)
		want := fmt.Sprintf("bcctl: call: no method %q (see bcctl methods)%s\n", c.name, c.want)
		if code != exitUsage || !strings.HasPrefix(errOut, want) {
			t.Errorf("call %s: exit %d\n%s\nwant %s", c.name, code, errOut, want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d", d)
	}
}
