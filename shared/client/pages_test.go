package client

import (
	"context"
	"errors"
	"testing"
)

type fakeIn struct{ Cursor *string }
type fakeOut struct{ Items, Next string }

// pages sends each page's cursor back, stops after the last page, at the
// first error, and when the consumer stops.
func TestPages(t *testing.T) {
	book := map[string]fakeOut{"": {"a", "c1"}, "c1": {"b", "c2"}, "c2": {"c", ""}}
	var calls []string
	call := func(_ context.Context, in *fakeIn) (*fakeOut, error) {
		cur := ""
		if in.Cursor != nil {
			cur = *in.Cursor
		}
		calls = append(calls, cur)
		out, ok := book[cur]
		if !ok {
			return nil, errors.New("bad cursor")
		}
		return &out, nil
	}
	seq := func(in fakeIn) func(func(*fakeOut, error) bool) {
		return pages(context.Background(), in, func(in *fakeIn) **string { return &in.Cursor }, call, func(o *fakeOut) string { return o.Next })
	}
	got := ""
	for out, err := range seq(fakeIn{}) {
		if err != nil {
			t.Fatal(err)
		}
		got += out.Items
	}
	if got != "abc" || len(calls) != 3 {
		t.Errorf("pages %q after calls %q", got, calls)
	}
	calls = nil
	for range seq(fakeIn{}) {
		break
	}
	if len(calls) != 1 {
		t.Errorf("a consumer that stops after one page cost %d calls", len(calls))
	}
	bad := "nope"
	n, errs := 0, 0
	for _, err := range seq(fakeIn{Cursor: &bad}) {
		n++
		if err != nil {
			errs++
		}
	}
	if n != 1 || errs != 1 {
		t.Errorf("an error: %d yields, %d errors; want it once, then the end", n, errs)
	}
}
