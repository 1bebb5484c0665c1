package capacity_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
)

var t0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func draft() capacity.Reservation {
	return capacity.Reservation{ReservationID: "r1", TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1,
		Window: capacity.Window{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour)}, State: capacity.Draft, CreatedAt: t0}
}

func TestStateMachine(t *testing.T) {
	type step func(capacity.Reservation) (capacity.Reservation, error)
	steps := map[string]step{
		"deny":     func(r capacity.Reservation) (capacity.Reservation, error) { return r.Deny(t0) },
		"reject":   func(r capacity.Reservation) (capacity.Reservation, error) { return r.Reject("quota", t0) },
		"expire":   func(r capacity.Reservation) (capacity.Reservation, error) { return r.Expire(t0) },
		"place":    func(r capacity.Reservation) (capacity.Reservation, error) { return r.Place([]string{"gpu-0"}, t0) },
		"bind":     func(r capacity.Reservation) (capacity.Reservation, error) { return r.StartBinding(t0) },
		"activate": func(r capacity.Reservation) (capacity.Reservation, error) { return r.Activate(t0) },
		"release":  func(r capacity.Reservation) (capacity.Reservation, error) { return r.Release("tenant", t0) },
	}
	// allowed[from] = the steps that may run from that state.
	allowed := map[capacity.State]string{
		capacity.Draft:    "deny reject expire place release",
		capacity.Placed:   "bind release",
		capacity.Binding:  "activate release",
		capacity.Active:   "release",
		capacity.Denied:   "",
		capacity.Rejected: "",
		capacity.Expired:  "",
		capacity.Released: "",
	}
	for from, ok := range allowed {
		for name, f := range steps {
			r := draft()
			r.State = from
			n, err := f(r)
			want := strings.Contains(" "+ok+" ", " "+name+" ")
			if want != (err == nil) {
				t.Errorf("%s from %s: err %v, want allowed=%v", name, from, err, want)
			}
			if err != nil {
				if n.State != from {
					t.Errorf("%s from %s changed the state on error", name, from)
				}
				switch {
				case from.Terminal() && !errors.Is(err, capacity.ErrTerminal):
					t.Errorf("%s from terminal %s: %v, want ErrTerminal", name, from, err)
				case !from.Terminal() && (name == "deny" || name == "reject" || name == "expire") && !errors.Is(err, capacity.ErrNotDraft):
					t.Errorf("%s from %s: %v, want ErrNotDraft", name, from, err)
				}
			}
		}
	}
	// Due: placed at start, active at end, terminal one sweep later.
	p, _ := draft().Place([]string{"gpu-0"}, t0)
	if !p.Due.Equal(p.Window.Start) {
		t.Errorf("placed due %v", p.Due)
	}
	b, _ := p.StartBinding(t0.Add(time.Hour))
	a, _ := b.Activate(t0.Add(time.Hour))
	if !a.Due.Equal(a.Window.End) {
		t.Errorf("active due %v", a.Due)
	}
	rel, _ := a.Release("window_end", t0.Add(2*time.Hour))
	if !rel.Due.Equal(t0.Add(2*time.Hour+capacity.StaleAfter)) || rel.ReleasedBy != "window_end" || !rel.ExpiresAt().IsZero() {
		t.Errorf("released %+v", rel)
	}
	rej, _ := draft().Reject("capacity", t0)
	if !rej.ExpiresAt().Equal(t0.Add(30 * 24 * time.Hour)) {
		t.Errorf("rejected expires %v", rej.ExpiresAt())
	}
	if s, ok := capacity.ParseState("active"); !ok || s != capacity.Active {
		t.Error("ParseState(active)")
	}
	if _, ok := capacity.ParseState("ACTIVE"); ok {
		t.Error("ParseState accepts ACTIVE")
	}
}

func TestChoose(t *testing.T) {
	w := func(from, to int) capacity.Window {
		return capacity.Window{Start: t0.Add(time.Duration(from) * time.Hour), End: t0.Add(time.Duration(to) * time.Hour)}
	}
	cal := capacity.Calendar{Allocs: map[string]capacity.Alloc{
		"a": {Devices: []int{0, 1}, Window: w(0, 2)},
		"b": {Devices: []int{3}, Window: w(1, 3)},
	}}
	cases := []struct {
		name   string
		count  int
		window capacity.Window
		want   string // "" = no fit
	}{
		{"lowest free first", 2, w(0, 1), "2,3"},
		{"overlap with both", 1, w(1, 2), "2"},
		{"too many", 3, w(1, 2), ""},
		{"adjacent window is free (half-open)", 4, w(3, 4), "0,1,2,3"},
		{"ends where a starts", 4, w(-1, 0), "0,1,2,3"},
		{"touching b's end only", 3, w(2, 5), "0,1,2"},
	}
	for _, c := range cases {
		got, ok := cal.Choose(4, c.count, c.window)
		s := fmtInts(got)
		if (c.want == "") == ok || ok && s != c.want {
			t.Errorf("%s: got %v %v, want %q", c.name, got, ok, c.want)
		}
	}
}

func fmtInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// The checker must be able to fail: each broken invariant is reported.
func TestCheckSnapshot(t *testing.T) {
	w := capacity.Window{Start: t0, End: t0.Add(time.Hour)}
	placed := func(id string, devices ...string) capacity.Reservation {
		r := draft()
		r.ReservationID, r.State, r.Window, r.DeviceIDs = id, capacity.Placed, w, devices
		return r
	}
	good := func() capacity.Snapshot {
		return capacity.Snapshot{
			Quotas: []capacity.QuotaRow{{Quota: capacity.Quota{TenantID: "acme", PoolID: "p1", Resource: "gpu", Max: 4, Used: 2},
				Free: 2, Holds: map[string]int64{"r1": 1, "r2": 1}}},
			Reservations: []capacity.Reservation{placed("r1", "gpu-0"), placed("r2", "gpu-1")},
			Calendars: []capacity.Calendar{{PoolID: "p1", Resource: "gpu", Version: 3, Allocs: map[string]capacity.Alloc{
				"r1": {TenantID: "acme", Devices: []int{0}, Window: w},
				"r2": {TenantID: "acme", Devices: []int{1}, Window: w},
			}}},
		}
	}
	if vs := capacity.CheckSnapshot(good()); len(vs) != 0 {
		t.Fatalf("good snapshot: %v", vs)
	}
	cases := map[string]func(*capacity.Snapshot){
		"used":          func(s *capacity.Snapshot) { s.Quotas[0].Used, s.Quotas[0].Free = 3, 1 },
		"free":          func(s *capacity.Snapshot) { s.Quotas[0].Free = 3 },
		"orphan_hold":   func(s *capacity.Snapshot) { s.Quotas[0].Holds["zz"] = 0 },
		"hold_state":    func(s *capacity.Snapshot) { s.Reservations[0].State = capacity.Released },
		"hold_count":    func(s *capacity.Snapshot) { s.Reservations[0].Count = 2 },
		"missing_hold":  func(s *capacity.Snapshot) { delete(s.Quotas[0].Holds, "r1"); s.Quotas[0].Used, s.Quotas[0].Free = 1, 3 },
		"missing_alloc": func(s *capacity.Snapshot) { delete(s.Calendars[0].Allocs, "r2") },
		"orphan_alloc": func(s *capacity.Snapshot) {
			s.Calendars[0].Allocs["zz"] = capacity.Alloc{TenantID: "acme", Devices: []int{3}, Window: w}
		},
		"alloc_devices": func(s *capacity.Snapshot) { s.Reservations[1].DeviceIDs = []string{"gpu-2"} },
		"double_booked": func(s *capacity.Snapshot) {
			a := s.Calendars[0].Allocs["r2"]
			a.Devices = []int{0}
			s.Calendars[0].Allocs["r2"] = a
			s.Reservations[1].DeviceIDs = []string{"gpu-0"}
		},
		"alloc_state": func(s *capacity.Snapshot) {
			s.Reservations[1].State = capacity.Expired
			delete(s.Quotas[0].Holds, "r2")
			s.Quotas[0].Used, s.Quotas[0].Free = 1, 3
		},
	}
	for kind, breakIt := range cases {
		s := good()
		breakIt(&s)
		vs := capacity.CheckSnapshot(s)
		found := false
		for _, v := range vs {
			found = found || v.Kind == kind
		}
		if !found {
			t.Errorf("%s not reported: %v", kind, vs)
		}
	}
}

// A token is scoped to (tenant, principal, token): no other principal of the
// tenant, and no other tenant, derives the same id.
func TestTokenID(t *testing.T) {
	a := capacity.TokenID("acme", "alice", "job-1")
	for _, other := range []string{
		capacity.TokenID("globex", "alice", "job-1"),
		capacity.TokenID("acme", "mallory", "job-1"),
		capacity.TokenID("acme", "alice", "job-2"),
		capacity.TokenID("acme", "alicej", "ob-1"), // separators matter
	} {
		if other == a {
			t.Errorf("TokenID collides: %s", a)
		}
	}
	if len(a) != 26 || a != capacity.TokenID("acme", "alice", "job-1") {
		t.Errorf("TokenID not stable: %s", a)
	}
}

// The pass summary is one JSON line that is also a CloudWatch EMF record.
func TestPassLogIsEMF(t *testing.T) {
	var buf bytes.Buffer
	res := capacity.PassResult{Found: 3, Transitions: map[string]int{"active": 2, "binding": 2}, Repaired: 1, Lag: 1500 * time.Millisecond}
	res.Log(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)), "bc-table")
	if strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("not one line: %q", buf.String())
	}
	var line struct {
		Msg          string         `json:"msg"`
		Found        int            `json:"found"`
		Transitioned int            `json:"transitioned"`
		Transitions  map[string]int `json:"transitions"`
		Lag          float64        `json:"Lag"`
		Table        string         `json:"Table"`
		AWS          struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	m := line.AWS.CloudWatchMetrics
	if line.Found != 3 || line.Transitioned != 4 || line.Lag != 1500 || line.Table != "bc-table" || line.AWS.Timestamp == 0 ||
		len(m) != 1 || m[0].Namespace != "BetterCompute" || m[0].Metrics[0].Name != "Lag" || m[0].Metrics[0].Unit != "Milliseconds" ||
		len(m[0].Dimensions) != 1 || m[0].Dimensions[0][0] != "Table" {
		t.Errorf("summary line %s", buf.String())
	}
}

// An idle pass logs at debug: the local gateway's 5 s passes stay quiet.
func TestIdlePassLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil)) // info and above
	capacity.PassResult{}.Log(context.Background(), logger, "bc-table")
	if buf.Len() != 0 {
		t.Fatalf("idle pass logged at info: %s", buf.String())
	}
	capacity.PassResult{Found: 1}.Log(context.Background(), logger, "bc-table")
	if buf.Len() == 0 {
		t.Fatal("a pass that found work was not logged")
	}
}
