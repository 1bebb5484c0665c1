package capacity

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Usage is one page of a resource's nodes and what is placed on them over
// a span (pools.usage): the view an operator draws (bc pools show).
type Usage struct {
	PoolID    string      `json:"poolId" doc:"the pool"`
	Resource  string      `json:"resource" doc:"the resource whose nodes these are"`
	NodeSize  int         `json:"nodeSize" doc:"devices per node of the resource"`
	Devices   int         `json:"devices" doc:"devices of the resource in the pool"`
	NodeCount int         `json:"nodeCount" doc:"nodes of the resource in the pool (the last may be smaller)"`
	From      time.Time   `json:"from" doc:"the start of the span"`
	To        time.Time   `json:"to" doc:"the end of the span: from + hours"`
	Page      UsageTotals `json:"page" doc:"totals over this page's nodes (add pages up for the whole resource)"`
	Nodes     []NodeUsage `json:"nodes" doc:"the page's nodes, by node index"`
}

// UsageTotals sums a page's nodes (a caller adds pages up).
type UsageTotals struct {
	Nodes          int `json:"nodes" doc:"nodes on this page"`
	Devices        int `json:"devices" doc:"devices on those nodes"`
	BusyNow        int `json:"busyNow" doc:"devices held at from"`
	WholeFreeNow   int `json:"wholeFreeNow" doc:"nodes with no device held at from"`
	WholeFreeAll   int `json:"wholeFreeSpan" doc:"nodes with no device held at any time of the span"`
	BusyDeviceSecs int `json:"busyDeviceSeconds" doc:"device-seconds held within the span"`
}

// AddPage adds the next page of the same span: its nodes after these, its
// totals to these.
func (u *Usage) AddPage(next Usage) {
	u.Nodes = append(u.Nodes, next.Nodes...)
	u.Page.Nodes += next.Page.Nodes
	u.Page.Devices += next.Page.Devices
	u.Page.BusyNow += next.Page.BusyNow
	u.Page.WholeFreeNow += next.Page.WholeFreeNow
	u.Page.WholeFreeAll += next.Page.WholeFreeAll
	u.Page.BusyDeviceSecs += next.Page.BusyDeviceSecs
}

// NodeUsage is one node over the span.
type NodeUsage struct {
	NodeID  string `json:"nodeId" doc:"the node: <resource>-node-<k>"`
	Size    int    `json:"size" doc:"devices on the node"`
	BusyNow int    `json:"busyNow" doc:"devices held at from"`
	Busy    []Busy `json:"busy" doc:"what is held on the node within the span, by start"`
}

// Busy is one reservation's devices on a node, clipped to the span, with
// the whole window they are held for. The reservation's id is given to the
// pool's owner only: a tenant the pool is offered to sees when devices are
// taken, not by whom.
type Busy struct {
	DeviceIDs     []string  `json:"deviceIds" doc:"the node's devices one reservation holds"`
	Start         time.Time `json:"start" doc:"from when, clipped to the span"`
	End           time.Time `json:"end" doc:"until when, clipped to the span"`
	Window        Window    `json:"window" doc:"the whole window they are held for: it may begin before the span or end after it"`
	ReservationID string    `json:"reservationId,omitempty" doc:"the reservation holding them: shown to the pool's owner only"`
}

// Usage limits: a span of at most MaxUsageHours, at most MaxUsageNodes
// nodes a page. The answer gives each reservation once per node, however
// many of the span's hours it holds: at most 100 nodes × 25 hours × 64
// entries of ~120 B ≈ 19 MB in theory (every entry a different
// reservation, each shorter than an hour), ~100 KB for a busy page in
// practice; a page stops early (NextCursor) once it holds
// MaxUsageEntries.
const (
	MaxUsageHours     = 24
	DefaultUsageNodes = 50
	MaxUsageNodes     = 100
	MaxUsageEntries   = 20_000 // ~2.4 MB of answer
)

// UsageRequest asks for a page of usage.
type UsageRequest struct {
	TenantID, PoolID, Resource string
	From                       time.Time   // zero: now
	Hours                      int         // 0: MaxUsageHours
	Page                       paging.Page // After: {"node": "<k>"}
}

// PoolUsage reads a page of nodes of one resource of a pool the tenant can
// see, with their reservations over [from, from+hours). It reads only the
// page's node-hours (one Query per hour of the span): its cost follows the
// page and the span, not the pool.
func (s *Service) PoolUsage(ctx context.Context, q UsageRequest) (Usage, map[string]string, error) {
	p, err := s.Store.VisiblePool(ctx, q.TenantID, q.PoolID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Usage{}, nil, errPoolNotFound(q.PoolID)
	case err != nil:
		return Usage{}, nil, unavailable(err)
	}
	if _, ok := p.Resources[q.Resource]; !ok {
		return Usage{}, nil, errNoResource(q.PoolID, q.Resource)
	}
	from := q.From
	if from.IsZero() {
		from = s.now()
	}
	from = from.UTC()
	hours := q.Hours
	if hours == 0 {
		hours = MaxUsageHours
	}
	limit := q.Page.Limit
	if limit <= 0 {
		limit = DefaultUsageNodes
	}
	span := Window{Start: from, End: from.Add(time.Duration(hours) * time.Hour)}
	pr := PoolResource{PoolID: p.PoolID, Topology: p.Topology(q.Resource)}
	first := 0
	if a, ok := q.Page.After["node"]; ok {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return Usage{}, nil, apierr.Invalid("", "cursor", "cursor is invalid")
		}
		first = n
	}
	last := min(first+limit, pr.Nodes()) - 1
	u := Usage{PoolID: p.PoolID, Resource: q.Resource, NodeSize: pr.NodeSize, Devices: pr.Devices, NodeCount: pr.Nodes(),
		From: span.Start, To: span.End, Nodes: []NodeUsage{}}
	type held struct {
		mask Mask
		w    Window
	}
	byNode := map[int]map[string]held{}
	for _, h := range span.Hours() {
		err := s.Store.NodeRange(ctx, pr, h, first, last, func(nd NodeHour) error {
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
			return Usage{}, nil, unavailable(err)
		}
	}
	owner := p.OwnedBy(q.TenantID)
	entries := 0
	for k := first; k <= last; k++ {
		if entries += len(byNode[k]); entries > MaxUsageEntries && k > first {
			last = k - 1 // the rest on the next page
			break
		}
		n := NodeUsage{NodeID: NodeID(q.Resource, k), Size: pr.Size(k), Busy: []Busy{}}
		var now Mask
		for id, h := range byNode[k] {
			b := Busy{Start: maxTime(h.w.Start, span.Start), End: minTime(h.w.End, span.End), Window: h.w}
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
