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

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

var t0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func draft() capacity.Reservation {
	return capacity.Reservation{Reservation: api.Reservation{ReservationID: "r1", TenantID: "acme", PoolID: "p1",
		Resource: "gpu", Count: 1, Window: api.Window{Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour)}, State: api.Draft,
		CreatedAt: t0}}
}

func TestStateMachine(t *testing.T) {
	type step func(capacity.Reservation) (capacity.Reservation, error)
	steps := map[string]step{
		"deny":     func(r capacity.Reservation) (capacity.Reservation, error) { return r.Deny(t0) },
		"reject":   func(r capacity.Reservation) (capacity.Reservation, error) { return r.Reject("quota", t0) },
		"expire":   func(r capacity.Reservation) (capacity.Reservation, error) { return r.Expire(t0) },
		"place":    func(r capacity.Reservation) (capacity.Reservation, error) { return r.Place([]int{0}, 8, t0) },
		"bind":     func(r capacity.Reservation) (capacity.Reservation, error) { return r.StartBinding(t0) },
		"activate": func(r capacity.Reservation) (capacity.Reservation, error) { return r.Activate(t0) },
		"release":  func(r capacity.Reservation) (capacity.Reservation, error) { return r.Release("tenant", t0) },
	}
	// allowed[from] = the steps that may run from that state.
	allowed := map[api.ReservationState]string{
		api.Draft:    "deny reject expire place release",
		api.Placed:   "bind release",
		api.Binding:  "activate release",
		api.Active:   "release",
		api.Denied:   "",
		api.Rejected: "",
		api.Expired:  "",
		api.Released: "",
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
	p, _ := draft().Place([]int{0}, 8, t0)
	if !p.Due.Equal(p.Window.Start) || p.DeviceIDs[0] != "gpu-0" || p.NodeIDs[0] != "gpu-node-0" {
		t.Errorf("placed %+v", p)
	}
	b, _ := p.StartBinding(t0.Add(time.Hour))
	a, _ := b.Activate(t0.Add(time.Hour))
	if !a.Due.Equal(a.Window.End) {
		t.Errorf("active due %v", a.Due)
	}
	rel, _ := a.Release("window_end", t0.Add(2*time.Hour))
	if !rel.Due.Equal(t0.Add(2*time.Hour+api.StaleAfter)) || rel.ReleasedBy != "window_end" || !rel.ExpiresAt().Equal(t0.Add(2*time.Hour+90*24*time.Hour)) {
		t.Errorf("released %+v, expiring %v (90 days after it ended)", rel, rel.ExpiresAt())
	}
	if !a.ExpiresAt().IsZero() {
		t.Errorf("an active reservation expires %v: kept while not terminal", a.ExpiresAt())
	}
	rej, _ := draft().Reject("capacity", t0)
	if !rej.ExpiresAt().Equal(t0.Add(30 * 24 * time.Hour)) {
		t.Errorf("rejected expires %v", rej.ExpiresAt())
	}
	// The timeline: one event per state entered, the reason with it.
	if h := rel.History; len(h) != 4 || h[0].State != api.Placed || h[3].State != api.Released {
		t.Errorf("history %+v", h)
	}
	if h := rej.History; len(h) != 1 || h[0].Reason != "capacity" || !h[0].At.Equal(t0) {
		t.Errorf("rejected history %+v", h)
	}
	if s, ok := api.ParseReservationState("active"); !ok || s != api.Active {
		t.Error("ParseState(active)")
	}
	if _, ok := api.ParseReservationState("ACTIVE"); ok {
		t.Error("ParseState accepts ACTIVE")
	}
}

// node builds a candidate node of size devices in one hour whose entries
// are given as (id, mask, from, to) in hours from t0.
type alloc struct {
	id       string
	mask     capacity.Mask
	from, to int
}

func hours(from, to int) api.Window {
	return api.Window{Start: t0.Add(time.Duration(from) * time.Hour), End: t0.Add(time.Duration(to) * time.Hour)}
}

func node(k, size int, allocs ...alloc) capacity.Candidate {
	nd := capacity.NodeHour{Pool: "p1", Resource: "gpu", Hour: capacity.HourOf(t0), Node: k, Size: size, NodeSize: 8,
		Versions: map[int]int64{}, Entries: map[string]capacity.Entry{}}
	for _, a := range allocs {
		nd.Entries[a.id] = capacity.Entry{Mask: a.mask, Window: hours(a.from, a.to)}
	}
	nd.Untouched = size - nd.Touched().Count()
	return capacity.Candidate{Node: k, Hours: []capacity.NodeHour{nd}}
}

func TestChoose(t *testing.T) {
	top := capacity.Topology{Resource: "gpu", Devices: 32, NodeSize: 8}
	// Four nodes, each with a different number of devices free during 1–2.
	cands := []capacity.Candidate{
		node(0, 8, alloc{"a", 0b00111111, 0, 2}), // 2 free during 0–2
		node(1, 8, alloc{"b", 0b00000011, 1, 3}), // 6 free during 1–3
		node(2, 8, alloc{"c", 0b00000001, 1, 5}), // 7 free during 1–5
		node(3, 8),                               // 8
	}
	cases := []struct {
		name     string
		count    int
		topology string
		window   api.Window
		want     string // "node:mask,…" or the NoFit reason
	}{
		{"fullest node that fits", 2, api.OnNodes, hours(1, 2), "0:11000000"},
		{"next fullest when it does not, in a free aligned quad", 3, api.OnNodes, hours(1, 2), "1:1110000"},
		{"whole node", 8, api.OnNodes, hours(1, 2), "3:11111111"},
		{"several nodes: a whole one and the fullest for the rest", 10, api.OnNodes, hours(1, 2), "0:11000000,3:11111111"},
		{"several nodes: the remainder on the fullest that holds it", 13, api.OnNodes, hours(1, 2), "1:1111100,3:11111111"},
		{"too few devices on two nodes is topology", 16, api.OnNodes, hours(1, 2), "topology"},
		{"any: fullest nodes first", 9, api.AnyDevices, hours(1, 2), "0:11000000,1:11111100,2:1000000"},
		{"any: not enough devices", 24, api.AnyDevices, hours(1, 2), "capacity"},
		{"a node used at other times before an unused one", 8, api.OnNodes, hours(5, 6), "0:11111111"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := capacity.Choose(top, capacity.Request{ID: "new", Count: c.count, Topology: c.topology, Window: c.window}, cands)
			var got string
			if nf, ok := err.(capacity.NoFit); ok {
				got = nf.Reason
			} else {
				var parts []string
				for _, nd := range p {
					parts = append(parts, strconv.Itoa(nd.Node)+":"+strconv.FormatUint(uint64(nd.Mask), 2))
				}
				got = strings.Join(parts, ",")
				if p.Count() != c.count {
					t.Errorf("placed %d devices for a count of %d", p.Count(), c.count)
				}
			}
			if got != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
	// Within a node, devices some allocation of the hours uses come first,
	// keeping untouched ones whole.
	if p, _ := capacity.Choose(top, capacity.Request{ID: "n", Count: 2, Topology: api.OnNodes, Window: hours(3, 4)},
		[]capacity.Candidate{node(1, 8, alloc{"b", 0b00000011, 1, 3})}); p[0].Mask != 0b11 {
		t.Errorf("took %b, want the touched devices 0 and 1", p[0].Mask)
	}
	// Topology: free devices on too many nodes for the count.
	spread := []capacity.Candidate{node(0, 8, alloc{"x", 0b11110000, 0, 4}), node(1, 8, alloc{"y", 0b11110000, 0, 4})}
	if _, err := capacity.Choose(top, capacity.Request{ID: "n", Count: 8, Topology: api.OnNodes, Window: hours(0, 1)}, spread); err != (capacity.NoFit{Reason: api.ReasonTopology}) {
		t.Errorf("8 devices on two half-free nodes: %v, want topology", err)
	}
	if p, err := capacity.Choose(top, capacity.Request{ID: "n", Count: 8, Topology: api.AnyDevices, Window: hours(0, 1)}, spread); err != nil || p.Count() != 8 {
		t.Errorf("the same with any: %v %v", p, err)
	}
	// Equal nodes are taken in an order that depends on the reservation: the
	// same choice again for one reservation, spread over many.
	whole := []capacity.Candidate{node(0, 8), node(1, 8), node(2, 8), node(3, 8)}
	seen := map[int]bool{}
	for i := range 16 {
		id := "r" + strconv.Itoa(i)
		p1, _ := capacity.Choose(top, capacity.Request{ID: id, Count: 8, Topology: api.OnNodes, Window: hours(0, 1)}, whole)
		p2, _ := capacity.Choose(top, capacity.Request{ID: id, Count: 8, Topology: api.OnNodes, Window: hours(0, 1)}, whole)
		if p1[0] != p2[0] {
			t.Fatalf("%s chose %v then %v", id, p1, p2)
		}
		seen[p1[0].Node] = true
	}
	if len(seen) < 3 {
		t.Errorf("16 reservations all chose among %d of 4 equal nodes", len(seen))
	}
}

func TestHours(t *testing.T) {
	h := capacity.HourOf(t0)
	next := h.End()
	for _, c := range []struct {
		w      api.Window
		want   int
		covers int // hours the window holds whole
	}{
		{api.Window{Start: t0, End: t0.Add(time.Hour)}, 1, 1},
		{api.Window{Start: t0, End: next}, 1, 1}, // half-open: ends where the next hour starts
		{api.Window{Start: t0, End: next.Add(time.Nanosecond)}, 2, 1},
		{api.Window{Start: t0.Add(30 * time.Minute), End: t0.Add(90 * time.Minute)}, 2, 0},
		{api.Window{Start: t0.Add(-time.Minute), End: t0.Add(49 * time.Hour)}, 50, 49},
	} {
		hs := capacity.HoursOf(c.w)
		covered := 0
		for _, x := range hs {
			if x.CoveredBy(c.w) {
				covered++
			}
		}
		if len(hs) != c.want || hs[0] != capacity.HourOf(c.w.Start) || covered != c.covers {
			t.Errorf("%v: %d hours (%d whole), want %d (%d)", c.w, len(hs), covered, c.want, c.covers)
		}
	}
	if h.String() != "2026112918" {
		t.Errorf("hour %s", h)
	}
}

// The checker must be able to fail: each broken invariant is reported.
func TestCheckSnapshot(t *testing.T) {
	w := api.Window{Start: t0, End: t0.Add(time.Hour)}
	placed := func(id string, devices ...int) capacity.Reservation {
		r := draft()
		r.ReservationID, r.State, r.Window, r.Devices, r.NodeSize, r.Topology = id, api.Placed, w, devices, 8, api.OnNodes
		r.History = []api.Event{{State: api.Placed, At: t0}}
		return r
	}
	good := func() capacity.Snapshot {
		nd := node(0, 8)
		nd.Hours[0].Entries["r1"] = capacity.Entry{Mask: 0b01, Window: w}
		nd.Hours[0].Entries["r2"] = capacity.Entry{Mask: 0b10, Window: w}
		nd.Hours[0].Untouched, nd.Hours[0].TouchedMask = 6, 0b11
		return capacity.Snapshot{
			Pools: []capacity.Pool{capacity.NewPool("p1", "acme", map[string]int{"gpu": 16}, nil, t0)},
			Quotas: []capacity.QuotaRow{{Quota: api.Quota{TenantID: "acme", PoolID: "p1", Resource: "gpu", Max: 4, Used: 2},
				Free: 2, Charging: map[string]capacity.Charged{"r1": {Count: 1}}, Due: t0}},
			Reservations: []capacity.Reservation{placed("r1", 0), placed("r2", 1)},
			NodeHours:    nd.Hours,
		}
	}
	if vs := capacity.CheckSnapshot(good()); len(vs) != 0 {
		t.Fatalf("good snapshot: %v", vs)
	}
	withMap := good()
	withMap.Maps = []capacity.HourMap{{PoolID: "p1", Resource: "gpu", Hour: withMap.NodeHours[0].Hour, Occupancy: capacity.Occupancy{Words: map[int]uint64{0: 0b1}}},
		{PoolID: "p1", Resource: "gpu", Hour: withMap.NodeHours[0].Hour + 1, Occupancy: capacity.Occupancy{Provisioned: true, Words: map[int]uint64{0: 0b11}}}}
	if vs := capacity.CheckSnapshot(withMap); len(vs) != 0 {
		t.Fatalf("a map naming its stored node, and a provisioned hour's stale words: %v", vs)
	}
	// A released reservation whose scrub on its node is owed keeps its
	// devices there (elsewhere it may not: entry_state below).
	owed := good()
	owed.Reservations[1].State, owed.Reservations[1].Credited, owed.Reservations[1].Unscrubbed = api.Released, true, []int{0}
	owed.Reservations[1].Due = t0.Add(capacity.ScrubRetry)
	owed.Quotas[0].Used, owed.Quotas[0].Free = 1, 3
	if vs := capacity.CheckSnapshot(owed); len(vs) != 0 {
		t.Fatalf("a released reservation holding devices where its scrub is owed: %v", vs)
	}
	cases := map[string]func(*capacity.Snapshot){
		"used":          func(s *capacity.Snapshot) { s.Quotas[0].Used, s.Quotas[0].Free = 3, 1 },
		"free":          func(s *capacity.Snapshot) { s.Quotas[0].Free = 3 },
		"orphan_charge": func(s *capacity.Snapshot) { s.Quotas[0].Charging["zz"] = capacity.Charged{Count: 1} },
		"charge_count":  func(s *capacity.Snapshot) { s.Quotas[0].Charging["r1"] = capacity.Charged{Count: 2} },
		"credit_record": func(s *capacity.Snapshot) { s.Quotas[0].Crediting = map[string]int{"r1": 1} },
		"missing_entry": func(s *capacity.Snapshot) { delete(s.NodeHours[0].Entries, "r2"); s.NodeHours[0].Untouched = 7 },
		"orphan_entry": func(s *capacity.Snapshot) {
			s.NodeHours[0].Entries["zz"] = capacity.Entry{Mask: 0b100, Window: w}
			s.NodeHours[0].Untouched = 5
		},
		"entry_devices": func(s *capacity.Snapshot) { s.Reservations[1].Devices = []int{2} },
		"double_booked": func(s *capacity.Snapshot) { s.NodeHours[0].Entries["r2"] = capacity.Entry{Mask: 0b11, Window: w} },
		"untouched":     func(s *capacity.Snapshot) { s.NodeHours[0].Untouched = 8 },
		"device_count":  func(s *capacity.Snapshot) { s.Reservations[0].Count = 2 },
		"uncredited":    func(s *capacity.Snapshot) { s.Reservations[0].State = api.Released },
		"node_size":     func(s *capacity.Snapshot) { s.NodeHours[0].NodeSize = 4 },
		"topology": func(s *capacity.Snapshot) {
			s.Reservations[0].Count, s.Reservations[0].Devices = 2, []int{0, 8}
			s.Quotas[0].Used, s.Quotas[0].Free, s.Quotas[0].Charging = 3, 1, nil
		},
		"entry_state": func(s *capacity.Snapshot) {
			s.Reservations[1].State, s.Reservations[1].Credited, s.Reservations[1].Unscrubbed = api.Expired, true, []int{1}
			s.Quotas[0].Used, s.Quotas[0].Free = 1, 3
		},
		"charge_due": func(s *capacity.Snapshot) { s.Quotas[0].Due = time.Time{} },
		"scrub_due": func(s *capacity.Snapshot) { // owed, and nothing will retry it
			s.Reservations[1].State, s.Reservations[1].Credited, s.Reservations[1].Unscrubbed = api.Released, true, []int{0}
			s.Quotas[0].Used, s.Quotas[0].Free = 1, 3
		},
		"charge_state": func(s *capacity.Snapshot) { s.Quotas[0].Charging["r1"] = capacity.Charged{Count: 1, Voided: true} },
		"index_orphan": func(s *capacity.Snapshot) { s.Orphans = []string{"fit: CAL#p1#gpu#2026112918 / N#000003"} },
		"entry_window": func(s *capacity.Snapshot) { s.NodeHours[0].Hour++ },
		"occupancy": func(s *capacity.Snapshot) { // node 0 is stored; node 1 is not
			s.Maps = []capacity.HourMap{{PoolID: "p1", Resource: "gpu", Hour: s.NodeHours[0].Hour, Occupancy: capacity.Occupancy{Words: map[int]uint64{0: 0b11}}}}
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
	res := reconcile.PassResult{Found: 3, Transitions: map[string]int{"active": 2, "binding": 2}, Repaired: 1, Lag: 1500 * time.Millisecond}
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
	reconcile.PassResult{}.Log(context.Background(), logger, "bc-table")
	if buf.Len() != 0 {
		t.Fatalf("idle pass logged at info: %s", buf.String())
	}
	reconcile.PassResult{Found: 1}.Log(context.Background(), logger, "bc-table")
	if buf.Len() == 0 {
		t.Fatal("a pass that found work was not logged")
	}
}
