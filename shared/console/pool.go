package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// The timeline's view: a week back to a month ahead by default, zoomable
// down to a day; a page of nodes at a time.
const (
	DaysBack     = 7
	DaysAhead    = 31
	MaxDays      = DaysBack + DaysAhead
	NodesPerPage = 64
)

type poolData struct {
	page
	Pool      api.Pool
	Owned     bool
	Resource  string
	Resources []string
	From, To  time.Time
	Days      int
	SVG       template.HTML
	Legend    []legendItem
	First     int // node numbers shown (1-based)
	Last      int
	NodeCount int
	NextURL   string
	Zoom      []zoomLink
	Fleet     string // why no fleet bands are drawn, when none are
	Avail     *availabilityView
}

type legendItem struct{ Class, Words string }

type zoomLink struct {
	Label, URL string
	Current    bool
}

func (c *Console) poolPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := poolData{page: c.newPage(r, v)}
	poolID := r.PathValue("pool")
	var pr api.PoolResult
	if err := c.cfg.Caller.Call(ctx, v, "pools.get", map[string]any{"tenantId": v.Tenant, "poolId": poolID}, &pr); err != nil {
		return view{}, err
	}
	d.Pool, d.Owned = pr.Pool, pr.Pool.OwnerTenantID == v.Tenant
	d.Resources = sortedKeys(pr.Pool.Resources)
	d.Resource = d.Query.Get("resource")
	if !slices.Contains(d.Resources, d.Resource) {
		d.Resource = d.Resources[0]
	}
	d.From, d.Days = viewSpan(d.Query, d.Now)
	d.To = d.From.Add(time.Duration(d.Days) * 24 * time.Hour)
	d.Zoom = zoomLinks(r.URL, d.Now, d.Days, d.From)

	after := d.Query["after"]
	tl := Timeline{From: d.From, To: d.To, Now: d.Now}
	rows := map[string]int{} // node id → its row in tl.Nodes
	seen := map[string]bool{}
	var next []string
	for day := range d.Days {
		in := map[string]any{"tenantId": v.Tenant, "poolId": poolID, "resource": d.Resource,
			"from": d.From.Add(time.Duration(day) * 24 * time.Hour), "hours": 24, "limit": c.cfg.PageNodes}
		if day < len(after) && after[day] != "" {
			in["cursor"] = after[day]
		}
		var u api.PoolUsageResult
		if err := c.cfg.Caller.Call(ctx, v, "pools.usage", in, &u); err != nil {
			return view{}, err
		}
		next = append(next, u.NextCursor)
		d.NodeCount = u.Usage.NodeCount
		for _, n := range u.Usage.Nodes {
			i, ok := rows[n.NodeID]
			if !ok {
				i = len(tl.Nodes)
				rows[n.NodeID] = i
				tl.Nodes = append(tl.Nodes, TimelineNode{ID: n.NodeID, Size: n.Size})
				if d.Owned {
					tl.Nodes[i].Href = url.PathEscape(poolID) + "/nodes/" + n.NodeID
				}
			}
			row := &tl.Nodes[i]
			for _, b := range n.Busy {
				key := n.NodeID + "|" + b.Window.Start.String() + "|" + b.Window.End.String() + "|" + strings.Join(b.DeviceIDs, ",")
				if seen[key] {
					continue
				}
				seen[key] = true
				row.Bars = append(row.Bars, Bar{Start: b.Window.Start, End: b.Window.End, Lanes: lanes(b.DeviceIDs, n.Size, d.Resource),
					Kind: "other", Title: fmt.Sprintf("%d devices %s", len(b.DeviceIDs), spanWords(b.Window)), Label: b.ReservationID})
			}
		}
	}
	if len(tl.Nodes) > 0 {
		first := nodeIndex(tl.Nodes[0].ID)
		d.First, d.Last = first+1, first+len(tl.Nodes)
	}
	if next[0] != "" {
		q := r.URL.Query()
		q.Del("after")
		for _, n := range next {
			q.Add("after", n)
		}
		d.NextURL = "/console/pools/" + url.PathEscape(poolID) + "?" + q.Encode()
	}
	c.labelOwn(ctx, v, poolID, d.Resource, &tl, d.Owned, d.Days <= 7)
	d.Fleet = c.fleetBands(ctx, v, poolID, d.Owned, &tl, d.To)
	if d.Query.Get("count") != "" {
		av := c.availability(ctx, v, poolID, d.Resource, d.Query, d.Now)
		d.Avail = &av
		for _, o := range av.Offers {
			tl.Offers = append(tl.Offers, Span{Start: o.EarliestStart, End: o.LatestStart.Add(time.Hour)})
		}
	}
	d.SVG = tl.SVG()
	d.Legend = legend
	return view{Name: "pool", Data: d}, nil
}

var legend = []legendItem{
	{"active", "yours, active (solid)"},
	{"binding", "yours, binding (striped)"},
	{"placed", "yours, booked ahead (outlined)"},
	{"other", "someone else's (grey, anonymous)"},
	{"cordoned", "cordoned (hatched band)"},
	{"draining", "draining for a rollout (hatched band)"},
	{"unhealthy", "unhealthy (dotted band)"},
	{"unreachable", "unreachable (crossed band)"},
	{"offer", "could start here (highlight)"},
}

// labelOwn marks the viewer's own reservations on the timeline: their state
// as the bar's shape, a label and a link. The pool's owner sees each
// reservation's id (pools.usage gives it the owner alone); others' bars stay
// anonymous. Zoomed out past a week (detail false), tooltips name no times
// and others' bars carry none: a busy month of 64 nodes stays under 500 KB.
func (c *Console) labelOwn(ctx context.Context, v Viewer, poolID, resource string, tl *Timeline, owned, detail bool) {
	var rs api.ListReservationsResult
	if err := c.cfg.Caller.Call(ctx, v, "reservations.list", map[string]any{"tenantId": v.Tenant, "poolId": poolID, "limit": 1000}, &rs); err != nil {
		rs.Reservations = nil
	}
	byID := map[string]api.Reservation{}
	byShape := map[string]api.Reservation{}
	for _, res := range rs.Reservations {
		if res.Resource != resource {
			continue
		}
		byID[res.ReservationID] = res
		byShape[res.Window.Start.String()+"|"+res.Window.End.String()+"|"+strings.Join(res.DeviceIDs, ",")] = res
	}
	for i := range tl.Nodes {
		n := &tl.Nodes[i]
		for j := range n.Bars {
			b := &n.Bars[j]
			ownerID := b.Label
			b.Label = ""
			res, mine := byID[ownerID]
			if !mine {
				// pools.usage gives a node's devices of a reservation: match
				// them, and the window, against the viewer's own.
				for _, cand := range rs.Reservations {
					if cand.Window.Start.Equal(b.Start) && cand.Window.End.Equal(b.End) && containsAll(cand.DeviceIDs, deviceIDs(b, n.Size, resource, n.ID)) {
						res, mine = cand, true
						break
					}
				}
			}
			switch {
			case mine && detail:
				b.Title = fmt.Sprintf("yours: %s, %d × %s, %s, %s", res.ReservationID, res.Count, res.Resource, res.State, spanWords(res.Window))
			case mine:
				b.Title = "yours: " + string(res.State)
			case !detail:
				b.Title = ""
			case owned && ownerID != "":
				b.Title = fmt.Sprintf("another tenant's %s: %s", ownerID, b.Title)
			default:
				b.Title = "booked by another tenant: " + b.Title
			}
			if mine {
				// A path relative to the pool's page: the script adds the tenant.
				b.Kind, b.Label, b.Href = string(res.State), string(res.State), "../reservations/"+res.ReservationID
			}
		}
	}
}

// fleetBands draws the nodes' states as bands, for the pool's owner (the
// only tenant the fleet's methods answer); it returns why none are drawn
// otherwise. Its cost is bounded by the page, never by the pool: one list
// of up to a page of registered nodes — all of them in a pool with no more
// — else one get per node in view.
func (c *Console) fleetBands(ctx context.Context, v Viewer, poolID string, owned bool, tl *Timeline, end time.Time) string {
	if !owned || len(tl.Nodes) == 0 {
		return "The fleet's states are shown to the pool's owner only."
	}
	var out api.ListNodesResult
	if err := c.cfg.Caller.Call(ctx, v, "nodes.list", map[string]any{"tenantId": v.Tenant, "poolId": poolID, "limit": c.cfg.PageNodes}, &out); err != nil {
		return problemOf(err).Sentence
	}
	byID := map[string]api.Node{}
	for _, n := range out.Nodes {
		byID[n.NodeID] = n
	}
	for i := range tl.Nodes {
		row := &tl.Nodes[i]
		n, ok := byID[row.ID]
		if !ok && out.NextCursor != "" {
			var got api.NodeResult
			if err := c.cfg.Caller.Call(ctx, v, "nodes.get", map[string]any{"tenantId": v.Tenant, "poolId": poolID, "nodeId": row.ID}, &got); err != nil {
				continue // not registered (unmanaged): no state to draw
			}
			n, ok = got.Node, true
		}
		if ok {
			row.Bands = append(row.Bands, bandsOf(n, end)...)
		}
	}
	return ""
}

// bandsOf is a node's current state as bands from when it began: a
// cordon from its time, a silent or unhealthy node from its last
// heartbeat, one that never reported from its registration.
func bandsOf(n api.Node, end time.Time) []Band {
	var out []Band
	if n.Cordon != nil {
		kind := "cordoned"
		if n.Cordon.By == api.ByRollout {
			kind = "draining"
		}
		out = append(out, Band{Kind: kind, Start: n.Cordon.At, End: end, Title: fmt.Sprintf("%s by %s since %s: %s", kind, n.Cordon.By, n.Cordon.At.UTC().Format("Jan 02 15:04"), n.Cordon.Reason)})
	}
	since := n.CreatedAt
	if n.LastHeartbeatAt != nil {
		since = *n.LastHeartbeatAt
	}
	switch n.State {
	case api.Unhealthy, api.Unreachable:
		out = append(out, Band{Kind: string(n.State), Start: since, End: end, Title: fmt.Sprintf("%s since %s UTC", n.State, since.UTC().Format("Jan 02 15:04"))})
	case api.Registered:
		out = append(out, Band{Kind: "registered", Start: n.CreatedAt, End: end, Title: "registered, no heartbeat yet: not placed on"})
	}
	return out
}

// viewSpan reads the view from the query: from (a date) and days (1..38);
// without them, a week back to a month ahead.
func viewSpan(q url.Values, now time.Time) (time.Time, int) {
	today := now.Truncate(24 * time.Hour)
	days, err := strconv.Atoi(q.Get("days"))
	if err != nil || days < 1 || days > MaxDays {
		days = MaxDays
	}
	from := today.Add(-DaysBack * 24 * time.Hour)
	if days < MaxDays {
		from = today
	}
	if f, err := time.Parse("2006-01-02", q.Get("from")); err == nil && !f.Before(today.Add(-DaysBack*24*time.Hour)) && !f.After(today.Add(DaysAhead*24*time.Hour)) {
		from = f
	}
	return from, days
}

func zoomLinks(u *url.URL, now time.Time, days int, from time.Time) []zoomLink {
	mk := func(label string, d int, f time.Time) zoomLink {
		q := u.Query()
		q.Del("after")
		q.Set("days", strconv.Itoa(d))
		q.Set("from", f.Format("2006-01-02"))
		return zoomLink{Label: label, URL: strings.TrimPrefix(u.Path, "/console/f") + "?" + q.Encode(), Current: d == days && f.Equal(from)}
	}
	today := now.Truncate(24 * time.Hour)
	return []zoomLink{
		mk("−7 d … +31 d", MaxDays, today.Add(-DaysBack*24*time.Hour)),
		mk("next 7 days", 7, today),
		mk("today", 1, today),
		mk("tomorrow", 1, today.Add(24*time.Hour)),
	}
}

// lanes turns a node's device ids into runs of lanes (device n is lane
// n mod size on its node).
func lanes(ids []string, size int, resource string) [][2]int {
	var ls []int
	for _, id := range ids {
		n, err := strconv.Atoi(strings.TrimPrefix(id, resource+"-"))
		if err != nil || size <= 0 {
			continue
		}
		ls = append(ls, n%size)
	}
	slices.Sort(ls)
	var runs [][2]int
	for _, l := range ls {
		if k := len(runs) - 1; k >= 0 && runs[k][1]+1 == l {
			runs[k][1] = l
			continue
		}
		runs = append(runs, [2]int{l, l})
	}
	return runs
}

// deviceIDs are a bar's devices again, from its lanes and its node.
func deviceIDs(b *Bar, size int, resource, nodeID string) []string {
	k := nodeIndex(nodeID)
	var out []string
	for _, run := range b.Lanes {
		for l := run[0]; l <= run[1]; l++ {
			out = append(out, fmt.Sprintf("%s-%d", resource, k*size+l))
		}
	}
	return out
}

func containsAll(set, sub []string) bool {
	for _, s := range sub {
		if !slices.Contains(set, s) {
			return false
		}
	}
	return len(sub) > 0
}

// nodeIndex is k of "<resource>-node-<k>".
func nodeIndex(id string) int {
	i := strings.LastIndex(id, "-")
	n, _ := strconv.Atoi(id[i+1:])
	return n
}

func spanWords(w api.Window) string {
	return w.Start.UTC().Format("Jan 02 15:04") + " – " + w.End.UTC().Format("Jan 02 15:04") + " UTC"
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
