package main

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
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
