package lambdastack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Twin serves a URL that sends every request to the reference (the local
// gateway serving the app in process) and to each of others (the same API on
// the Lambda bootstraps), answers with the reference's answer, and fails tb
// where another answer differs. Answers are equal when status, content type
// and JSON body are, except for what each stack makes up itself:
//   - request ids (requestId, the x-request-id header) may differ freely;
//   - timestamps (RFC 3339 strings) may differ by at most a minute, and
//     so may what is counted up to now (busyDeviceSeconds: by at most a
//     minute of each of its devices);
//   - generated ids (reservationId, nextCursor) may differ, but one-to-one:
//     the twin learns which id of each stack stands for which of the
//     reference's, checks they stay paired, and puts the other stack's in the
//     requests it forwards there (error messages naming an id included).
func Twin(tb testing.TB, reference string, others ...string) string {
	tw := &twin{tb: tb, ref: reference, others: others, http: &http.Client{Timeout: 60 * time.Second}}
	for range others {
		tw.ids = append(tw.ids, map[string]string{})
	}
	srv := httptest.NewServer(tw)
	tb.Cleanup(func() {
		srv.Close()
		if tw.compared == 0 {
			tb.Errorf("lambdastack: the twin compared no answer: nothing was proven")
		}
	})
	return srv.URL
}

type twin struct {
	tb     testing.TB
	ref    string
	others []string
	http   *http.Client

	mu       sync.Mutex          // one request at a time: ids are learnt in order
	ids      []map[string]string // per other: reference id → its id
	compared int
}

// generated are the members whose values each stack makes up.
var generated = map[string]bool{"reservationId": true, "nextCursor": true}

type answer struct {
	status int
	ctype  string
	body   []byte
}

func (tw *twin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ref, err := tw.send(tw.ref, r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for i, other := range tw.others {
		got, err := tw.send(other, r, tw.rewrite(i, body))
		if err != nil {
			tw.tb.Errorf("%s %s on %s: %v", r.Method, r.URL.Path, other, err)
			continue
		}
		if diffs := tw.compare(i, ref, got); len(diffs) > 0 {
			tw.tb.Errorf("%s %s %s: the Lambda stack %d answers otherwise:\n  %s\n  reference: %d %s\n  lambda:    %d %s",
				r.Method, r.URL.Path, body, i+1, strings.Join(diffs, "\n  "), ref.status, ref.body, got.status, got.body)
		}
		tw.compared++
	}
	w.Header().Set("Content-Type", ref.ctype)
	w.WriteHeader(ref.status)
	_, _ = w.Write(ref.body)
}

func (tw *twin) send(base string, r *http.Request, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header = r.Header.Clone()
	resp, err := tw.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), b}, err
}

// rewrite puts stack i's ids where the request names the reference's.
func (tw *twin) rewrite(i int, body []byte) []byte {
	return []byte(tw.rewriteString(i, string(body)))
}

func (tw *twin) compare(i int, ref, got answer) []string {
	var diffs []string
	if ref.status != got.status {
		diffs = append(diffs, fmt.Sprintf("status %d, reference %d", got.status, ref.status))
	}
	if ref.ctype != got.ctype {
		diffs = append(diffs, fmt.Sprintf("content type %q, reference %q", got.ctype, ref.ctype))
	}
	var a, b any
	if json.Unmarshal(ref.body, &a) != nil || json.Unmarshal(got.body, &b) != nil {
		if !bytes.Equal(ref.body, got.body) {
			diffs = append(diffs, "bodies differ (not both JSON)")
		}
		return diffs
	}
	// Ids first, wherever they are, so messages naming them compare.
	tw.learn(i, "", a, b, &diffs)
	tw.walk(i, "", a, b, &diffs)
	return diffs
}

// learn pairs the generated ids of both answers.
func (tw *twin) learn(i int, key string, a, b any, diffs *[]string) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return
		}
		for k, v := range x {
			tw.learn(i, k, v, y[k], diffs)
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return
		}
		for j := range x {
			tw.learn(i, key, x[j], y[j], diffs)
		}
	case string:
		y, ok := b.(string)
		if !ok || !generated[key] || x == "" || y == "" {
			return
		}
		if prev, known := tw.ids[i][x]; known && prev != y {
			*diffs = append(*diffs, fmt.Sprintf("%s %q stands for the reference's %q, which was %q before", key, y, x, prev))
			return
		}
		for refID, id := range tw.ids[i] {
			if id == y && refID != x {
				*diffs = append(*diffs, fmt.Sprintf("%s %q stands for two of the reference's: %q and %q", key, y, refID, x))
				return
			}
		}
		tw.ids[i][x] = y
	}
}

func (tw *twin) walk(i int, path string, a, b any, diffs *[]string) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: %T, reference an object", path, b))
			return
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			va, inA := x[k]
			vb, inB := y[k]
			if inA != inB {
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: present %v, in the reference %v", path, k, inB, inA))
				continue
			}
			if k == "requestId" {
				continue
			}
			if k == "busyDeviceSeconds" && sameWithin(va, vb, x["devices"]) {
				continue
			}
			tw.walk(i, path+"."+k, va, vb, diffs)
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v, reference %v", path, b, a))
			return
		}
		for j := range x {
			tw.walk(i, fmt.Sprintf("%s[%d]", path, j), x[j], y[j], diffs)
		}
	case string:
		y, ok := b.(string)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v, reference %q", path, b, x))
			return
		}
		if x == y || tw.rewriteString(i, x) == y {
			return
		}
		if strings.HasSuffix(path, ".log.checkpoint") && sameTree(x, y) {
			return // each stack's log has its own origin, and ECDSA signatures are randomized
		}
		if ta, err := time.Parse(time.RFC3339Nano, x); err == nil {
			if tb, err := time.Parse(time.RFC3339Nano, y); err == nil && ta.Sub(tb).Abs() <= time.Minute {
				return
			}
		}
		*diffs = append(*diffs, fmt.Sprintf("%s: %q, reference %q", path, y, x))
	default:
		if fmt.Sprint(a) != fmt.Sprint(b) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v, reference %v", path, b, a))
		}
	}
}

// sameWithin: two counts of device-seconds up to each stack's now that
// differ by at most a minute of each of devices.
func sameWithin(a, b, devices any) bool {
	x, okA := a.(float64)
	y, okB := b.(float64)
	n, okN := devices.(float64)
	return okA && okB && okN && math.Abs(x-y) <= 60*n
}

// sameTree: two signed checkpoints of the same size and root (the second
// and third lines of the C2SP checkpoint text).
func sameTree(a, b string) bool {
	la, lb := strings.SplitN(a, "\n", 4), strings.SplitN(b, "\n", 4)
	return len(la) == 4 && len(lb) == 4 && la[1] == lb[1] && la[2] == lb[2]
}

// rewriteString puts stack i's ids where s names the reference's, in the
// reference ids' order (the ids are distinct generated tokens, none inside
// another, so the order does not change the result).
func (tw *twin) rewriteString(i int, s string) string {
	ids := make([]string, 0, len(tw.ids[i]))
	for k := range tw.ids[i] {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	for _, k := range ids {
		s = strings.ReplaceAll(s, k, tw.ids[i][k])
	}
	return s
}
