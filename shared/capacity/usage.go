package capacity

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
)

// MaxUsageEntries: a usage page stops early (NextCursor) once it holds
// this many entries (~2.4 MB of answer); the span and page limits are the
// API's (api.MaxUsageHours, api.MaxUsageNodes).
const MaxUsageEntries = 20_000

// UsageRequest asks for a page of usage.
type UsageRequest struct {
	TenantID, PoolID, Resource string
	From                       time.Time   // zero: now
	Hours                      int         // 0: api.MaxUsageHours
	Page                       paging.Page // After: {"node": "<k>"}
}

// Usage is pools.usage: it reads a page of nodes of one resource of a
// pool the tenant can see, with their reservations over [from,
// from+hours). It reads only the page's node-hours (one Query per hour of
// the span): its cost follows the page and the span, not the pool.
func (ps *Pools) Usage(ctx context.Context, q UsageRequest) (api.Usage, map[string]string, error) {
	p, err := ps.store.VisiblePool(ctx, q.TenantID, q.PoolID)
	switch {
	case errors.Is(err, ErrNotFound):
		return api.Usage{}, nil, errPoolNotFound(q.PoolID)
	case err != nil:
		return api.Usage{}, nil, unavailable(err)
	}
	if _, ok := p.Resources[q.Resource]; !ok {
		return api.Usage{}, nil, errNoResource(q.PoolID, q.Resource)
	}
	from := q.From
	if from.IsZero() {
		from = ps.now()
	}
	from = from.UTC()
	hours := q.Hours
	if hours == 0 {
		hours = api.MaxUsageHours
	}
	limit := q.Page.Limit
	if limit <= 0 {
		limit = api.DefaultUsageNodes
	}
	span := api.Window{Start: from, End: from.Add(time.Duration(hours) * time.Hour)}
	pr := PoolResource{PoolID: p.PoolID, Topology: p.Topology(q.Resource)}
	first := 0
	if a, ok := q.Page.After["node"]; ok {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return api.Usage{}, nil, apierr.Invalid("", "cursor", "cursor is invalid")
		}
		first = n
	}
	last := min(first+limit, pr.Nodes()) - 1
	u := api.Usage{PoolID: p.PoolID, Resource: q.Resource, NodeSize: pr.NodeSize, Devices: pr.Devices, NodeCount: pr.Nodes(),
		From: span.Start, To: span.End, Nodes: []api.NodeUsage{}}
	type held struct {
		mask Mask
		w    api.Window
	}
	byNode := map[int]map[string]held{}
	for _, h := range HoursOf(span) {
		err := ps.store.NodeRange(ctx, pr, h, first, last, func(nd NodeHour) error {
			for id, e := range nd.Entries {
				if !e.Window.Overlaps(span) {
					continue
				}
				if byNode[nd.Node] == nil {
					byNode[nd.Node] = map[string]held{}
				}
				byNode[nd.Node][id] = held{e.Mask, e.Window}
			}
			return nil
		})
		if err != nil {
			return api.Usage{}, nil, unavailable(err)
		}
	}
	owner := p.OwnedBy(q.TenantID)
	entries := 0
	for k := first; k <= last; k++ {
		if entries += len(byNode[k]); entries > MaxUsageEntries && k > first {
			last = k - 1 // the rest on the next page
			break
		}
		n := api.NodeUsage{NodeID: NodeID(q.Resource, k), Size: pr.Size(k), Busy: []api.Busy{}}
		var now Mask
		for id, h := range byNode[k] {
			b := api.Busy{Start: maxTime(h.w.Start, span.Start), End: minTime(h.w.End, span.End), Window: h.w}
			for _, dev := range (Placement{{Node: k, Mask: h.mask}}).Devices(pr.NodeSize) {
				b.DeviceIDs = append(b.DeviceIDs, DeviceID(q.Resource, dev))
			}
			if owner {
				b.ReservationID = id
			}
			if !h.w.Start.After(span.Start) && h.w.End.After(span.Start) {
				now |= h.mask
			}
			u.Page.BusyDeviceSecs += h.mask.Count() * int(b.End.Sub(b.Start)/time.Second)
			n.Busy = append(n.Busy, b)
		}
		sort.Slice(n.Busy, func(i, j int) bool {
			if !n.Busy[i].Start.Equal(n.Busy[j].Start) {
				return n.Busy[i].Start.Before(n.Busy[j].Start)
			}
			return n.Busy[i].DeviceIDs[0] < n.Busy[j].DeviceIDs[0]
		})
		n.BusyNow = now.Count()
		u.Page.Nodes++
		u.Page.Devices += n.Size
		u.Page.BusyNow += n.BusyNow
		if n.BusyNow == 0 {
			u.Page.WholeFreeNow++
		}
		if len(n.Busy) == 0 {
			u.Page.WholeFreeAll++
		}
		u.Nodes = append(u.Nodes, n)
	}
	var next map[string]string
	if last+1 < pr.Nodes() {
		next = map[string]string{"node": strconv.Itoa(last + 1)}
	}
	return u, next, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
