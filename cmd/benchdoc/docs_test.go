package main

import "testing"

// docs/performance.md's tables are what docs/bench/results.txt generates:
// a number typed by hand, or results committed without `make bench`
// regenerating the page, fails here.
func TestPerformanceDocMatchesResults(t *testing.T) {
	want, have, err := generate("../../docs/bench/results.txt", "../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	if want != have {
		t.Error("docs/performance.md's generated tables differ from docs/bench/results.txt: run `go run ./cmd/benchdoc doc` (make bench does)")
	}
}
