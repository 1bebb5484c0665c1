package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// view is what a page handler answers: a template and its data, or
// NotModified when the viewer's copy (If-None-Match) is current.
type view struct {
	Name        string
	Data        any
	ETag        string
	NotModified bool
}

type pageFunc func(ctx context.Context, r *http.Request, v Viewer) (view, error)

// page is what every fragment's data shares.
type page struct {
	Tenant string
	Now    time.Time
	Query  url.Values
	// Poll is the refresh URL and interval while something on the page
	// moves ("" when nothing does: no refresh, no reads).
	PollURL   string
	PollEvery int
}

func (c *Console) newPage(r *http.Request, v Viewer) page {
	return page{Tenant: v.Tenant, Now: c.cfg.Now().UTC(), Query: r.URL.Query()}
}

// fragment runs a page handler for a fragment route: the viewer must name
// the tenant it acts as; an API error becomes the page's problem in words
// (with the API's HTTP status, which htmx swaps like any answer).
func (c *Console) fragment(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Authorization")
		v := viewerOf(r)
		if v.Tenant == "" {
			c.render(w, http.StatusBadRequest, "problem", Problem{Code: "INVALID_INPUT",
				Sentence: "Choose the tenant you act as (?tenant=…): sign in again, or add it to the address."})
			return
		}
		if !api.TenantIDPattern.MatchString(v.Tenant) {
			c.render(w, http.StatusBadRequest, "problem", Problem{Code: "INVALID_INPUT", Sentence: "That tenant id is not valid."})
			return
		}
		out, err := fn(r.Context(), r, v)
		if err != nil {
			p := problemOf(err)
			status := http.StatusInternalServerError
			if ce, ok := err.(*CallError); ok {
				status = ce.Status
			}
			c.render(w, status, "problem", p)
			return
		}
		if out.ETag != "" {
			w.Header().Set("ETag", out.ETag)
		}
		if out.NotModified {
			w.Header().Set("Cache-Control", "private, no-cache")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		c.render(w, http.StatusOK, out.Name, out.Data)
		if out.ETag != "" {
			w.Header().Set("Cache-Control", "private, no-cache")
		}
	}
}

// etag names a state of what a page shows; matches reports whether the
// viewer holds that state already.
func etag(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

func matches(r *http.Request, tag string) bool {
	for t := range strings.SplitSeq(r.Header.Get("If-None-Match"), ",") {
		if strings.TrimSpace(t) == tag {
			return true
		}
	}
	return false
}

// ---- pools ----

type poolRow struct {
	Pool      api.Pool
	Owned     bool
	Resources []resourceRow
}

type resourceRow struct {
	Name                   string
	Devices, Nodes, Size   int
	FreeNow, WholeFreeNow  int
	TodayPct, WeekPct      float64
	Counted, CountedDevice int // nodes and devices the figures cover (a big pool's first pages)
	Quota                  *api.Quota
}

// poolsListNodes caps the nodes the pools list adds up per resource: a
// pool larger than this is summed over its first nodes and says so; its
// own page pages over all of them.
const poolsListNodes = 200

type poolsData struct {
	page
	Pools []poolRow
}

func (c *Console) poolsPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := poolsData{page: c.newPage(r, v)}
	var out api.ListPoolsResult
	if err := c.cfg.Caller.Call(ctx, v, "pools.list", map[string]any{"tenantId": v.Tenant, "limit": 100}, &out); err != nil {
		return view{}, err
	}
	day := d.Now.Truncate(24 * time.Hour)
	for _, p := range out.Pools {
		row := poolRow{Pool: p, Owned: p.OwnerTenantID == v.Tenant}
		for _, res := range sortedKeys(p.Resources) {
			rr, err := c.resourceSummary(ctx, v, p, res, d.Now, day)
			if err != nil {
				return view{}, err
			}
			row.Resources = append(row.Resources, rr)
		}
		d.Pools = append(d.Pools, row)
	}
	return view{Name: "pools", Data: d}, nil
}

// resourceSummary adds a resource's usage up: free now (devices and whole
// nodes), and the booked share of today and of the seven days from today.
func (c *Console) resourceSummary(ctx context.Context, v Viewer, p api.Pool, res string, now, day time.Time) (resourceRow, error) {
	size := p.NodeSize[res]
	rr := resourceRow{Name: res, Devices: p.Resources[res], Size: size}
	if size > 0 {
		rr.Nodes = (rr.Devices + size - 1) / size
	}
	sum := func(from time.Time, hours int) (api.UsageTotals, error) {
		var t api.UsageTotals
		cursor := ""
		for t.Nodes < poolsListNodes {
			in := map[string]any{"tenantId": v.Tenant, "poolId": p.PoolID, "resource": res, "from": from, "hours": hours, "limit": api.MaxUsageNodes}
			if cursor != "" {
				in["cursor"] = cursor
			}
			var u api.PoolUsageResult
			if err := c.cfg.Caller.Call(ctx, v, "pools.usage", in, &u); err != nil {
				return t, err
			}
			t.Nodes += u.Usage.Page.Nodes
			t.Devices += u.Usage.Page.Devices
			t.BusyNow += u.Usage.Page.BusyNow
			t.WholeFreeNow += u.Usage.Page.WholeFreeNow
			t.BusyDeviceSecs += u.Usage.Page.BusyDeviceSecs
			if cursor = u.NextCursor; cursor == "" {
				break
			}
		}
		return t, nil
	}
	nowT, err := sum(now, 1)
	if err != nil {
		return rr, err
	}
	rr.FreeNow, rr.WholeFreeNow = nowT.Devices-nowT.BusyNow, nowT.WholeFreeNow
	rr.Counted, rr.CountedDevice = nowT.Nodes, nowT.Devices
	var busy [7]int
	for i := range busy {
		t, err := sum(day.Add(time.Duration(i)*24*time.Hour), 24)
		if err != nil {
			return rr, err
		}
		busy[i] = t.BusyDeviceSecs
	}
	if rr.CountedDevice > 0 {
		rr.TodayPct = 100 * float64(busy[0]) / float64(rr.CountedDevice*86400)
		week := 0
		for _, b := range busy {
			week += b
		}
		rr.WeekPct = 100 * float64(week) / float64(rr.CountedDevice*7*86400)
	}
	var q api.QuotaResult
	if err := c.cfg.Caller.Call(ctx, v, "quotas.get", map[string]any{"tenantId": v.Tenant, "poolId": p.PoolID, "resource": res}, &q); err == nil {
		rr.Quota = &q.Quota
	}
	return rr, nil
}

// ---- a node ----

type nodeData struct {
	page
	Pool         string
	Node         api.Node
	Owned        bool
	HeartbeatAge string
	Reservations []api.Reservation
}

func (c *Console) nodePage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := nodeData{page: c.newPage(r, v), Pool: r.PathValue("pool")}
	var n api.NodeResult
	if err := c.cfg.Caller.Call(ctx, v, "nodes.get", map[string]any{"tenantId": v.Tenant, "poolId": d.Pool, "nodeId": r.PathValue("node")}, &n); err != nil {
		return view{}, err
	}
	d.Node, d.Owned = n.Node, true
	if n.Node.LastHeartbeatAt != nil {
		d.HeartbeatAge = age(d.Now.Sub(*n.Node.LastHeartbeatAt))
	}
	var rs api.ListReservationsResult
	if err := c.cfg.Caller.Call(ctx, v, "reservations.list", map[string]any{"tenantId": v.Tenant, "poolId": d.Pool, "limit": 200}, &rs); err == nil {
		for _, res := range rs.Reservations {
			for _, id := range res.NodeIDs {
				if id == d.Node.NodeID {
					d.Reservations = append(d.Reservations, res)
				}
			}
		}
	}
	return view{Name: "node", Data: d}, nil
}

// ---- a reservation ----

type reservationData struct {
	page
	R        api.Reservation
	Why      string
	Owned    bool
	Moves    bool
	Strip    []historyStep
	Terminal bool
}

type historyStep struct {
	api.Event
	Words string
}

func (c *Console) reservationPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := reservationData{page: c.newPage(r, v)}
	var out api.ReservationResult
	if err := c.cfg.Caller.Call(ctx, v, "reservations.get", map[string]any{"tenantId": v.Tenant, "reservationId": r.PathValue("id")}, &out); err != nil {
		return view{}, err
	}
	d.R, d.Why, d.Terminal = out.Reservation, reservationWhy(out.Reservation), out.Reservation.State.Terminal()
	for _, e := range out.Reservation.History {
		step := historyStep{Event: e}
		if w, ok := historyWords[e.Reason]; ok {
			step.Words = w
		} else if e.Reason != "" {
			step.Words = refusalWords(e.Reason)
		}
		d.Strip = append(d.Strip, step)
	}
	// It moves while a create is in flight or its nodes bind it.
	if s := out.Reservation.State; s == api.Draft || s == api.Binding || (s == api.Placed && !out.Reservation.Window.Start.After(d.Now)) {
		d.PollURL, d.PollEvery = r.URL.RequestURI(), int(c.cfg.Poll.Seconds())
	}
	tag := etag(string(out.Reservation.State), out.Reservation.UpdatedAt.String(), strconv.Itoa(len(out.Reservation.History)))
	if matches(r, tag) {
		return view{ETag: tag, NotModified: true}, nil
	}
	return view{Name: "reservation", Data: d, ETag: tag}, nil
}

// age says how long ago, coarsely.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}
