package capacity

import (
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Hour is a UTC hour counted from the Unix epoch: the time bucket placement
// state is kept in. A window reads and writes the node-hours of the hours
// it overlaps, and an hour is the resolution at which candidates are found
// (docs/capacity.md, "Node-hours"): a pool busy at 06:00 admits at 09:00 as
// cheaply as an empty one.
type Hour int64

// HourOf is the hour holding instant t.
func HourOf(t time.Time) Hour { return Hour(t.UTC().Unix() / 3600) }

// Start is the hour's first instant.
func (h Hour) Start() time.Time { return time.Unix(int64(h)*3600, 0).UTC() }

// End is the first instant after the hour.
func (h Hour) End() time.Time { return h.Start().Add(time.Hour) }

// Window is the hour as a half-open window.
func (h Hour) Window() api.Window { return api.Window{Start: h.Start(), End: h.End()} }

// String is the hour as YYYYMMDDHH (UTC).
func (h Hour) String() string { return h.Start().Format("2006010215") }

// HoursOf lists the hours a half-open window overlaps.
func HoursOf(w api.Window) []Hour {
	first, last := HourOf(w.Start), HourOf(w.End.Add(-time.Nanosecond))
	out := make([]Hour, 0, last-first+1)
	for h := first; h <= last; h++ {
		out = append(out, h)
	}
	return out
}

// CoveredBy reports whether window w holds all of the hour.
func (h Hour) CoveredBy(w api.Window) bool {
	return !w.Start.After(h.Start()) && !w.End.Before(h.End())
}

// MaxEntriesPerNodeHour bounds the reservations one node's hour may hold
// (what keeps its item small: see docs/capacity.md). An hour that is full
// refuses more, as a node with no free device would.
const MaxEntriesPerNodeHour = 64

// SpreadBits is the width of Spread: candidates of equal fullness are read
// in the order of this scramble of their node index, and a read may start
// at any point of it (racing creates then read different nodes).
const SpreadBits = 20

// Spread scrambles a node index into [0, 2^SpreadBits) (Fibonacci hashing),
// so equally full nodes sort in an order unrelated to their index.
func Spread(node int) uint32 { return uint32(node) * 2654435769 >> (32 - SpreadBits) }

// NodeHour is one node's placement state for one hour: the allocations
// that overlap the hour, a version per device (a placement writes only if
// the versions of the devices it takes are still those it read: optimistic,
// and two placements on different devices of one node never conflict),
// Untouched — the devices no allocation of the hour uses, what candidates
// are ordered by — and Coverable — the devices no single allocation holds
// for the whole hour, an upper bound on the devices free at any instant of
// it, what a refusal is proved with.
//
// A node-hour nothing was ever placed on need not be stored: Stored is
// false for one made up as empty (EmptyNodeHour), and the first placement
// on it creates it if it is still missing.
//
// A candidate read (CalendarStore.Candidates) is Partial: it carries the
// mask of touched devices and the versions but not the entries — all a
// placement on untouched devices needs, whatever the node's day holds —
// and then treats every touched device as busy.
type NodeHour struct {
	Pool     string
	Resource string
	Hour     Hour
	Node     int
	Size     int // devices on the node
	NodeSize int // the resource's node size (the last node may be smaller)
	Devices  int // the resource's devices in the pool
	Stored   bool
	Partial  bool // Entries were not read (see above)
	// Off: the fleet keeps new placements off the node (cordoned, not
	// ready): no device is free for one, whatever its entries.
	Off       bool
	Untouched int
	// TouchedMask is the devices some allocation of the hour uses (what
	// Untouched counts the rest of), kept on the item.
	TouchedMask Mask
	Versions    map[int]int64 // device index on the node → version (absent: 0)
	Entries     map[string]Entry
}

// NodeHourKey names a node-hour.
type NodeHourKey struct {
	Node int
	Hour Hour
}

// Key is the node-hour's key.
func (n NodeHour) Key() NodeHourKey { return NodeHourKey{Node: n.Node, Hour: n.Hour} }

// EmptyNodeHour is node-hour k as it is before anything is placed on it
// (not stored).
func EmptyNodeHour(t PoolResource, k NodeHourKey) NodeHour {
	size := t.Size(k.Node)
	return NodeHour{Pool: t.PoolID, Resource: t.Resource, Hour: k.Hour, Node: k.Node, Size: size, NodeSize: t.NodeSize,
		Devices: t.Devices, Untouched: size, Versions: map[int]int64{}, Entries: map[string]Entry{}}
}

// Topology is the layout of the resource the node-hour belongs to.
func (n NodeHour) Topology() PoolResource {
	return PoolResource{PoolID: n.Pool, Topology: Topology{Resource: n.Resource, Devices: n.Devices, NodeSize: n.NodeSize}}
}

// Entry is one reservation's devices on a node, for its whole window, and
// the tenant that holds it (so a rollout draining the node can find the
// reservation).
type Entry struct {
	Mask   Mask
	Window api.Window
	Tenant string
}

// Free is the mask of the node's devices no allocation other than id's
// uses during w (of a Partial read: the untouched ones).
func (n NodeHour) Free(w api.Window, id string) Mask {
	if n.Off {
		return 0
	}
	if n.Partial {
		return Full(n.Size) &^ n.TouchedMask
	}
	busy := Mask(0)
	for eid, e := range n.Entries {
		if eid != id && e.Window.Overlaps(w) {
			busy |= e.Mask
		}
	}
	return Full(n.Size) &^ busy
}

// Touched is the mask of devices some allocation of the hour uses.
func (n NodeHour) Touched() Mask {
	if n.Partial {
		return n.TouchedMask
	}
	return n.touchedBy("")
}

// touchedBy is the mask of devices the entries other than id's use.
func (n NodeHour) touchedBy(id string) Mask {
	var m Mask
	for eid, e := range n.Entries {
		if eid != id {
			m |= e.Mask
		}
	}
	return m
}

// Touching is what adding id's mask (or, with remove, removing its entry)
// changes in the touched devices: the devices that become touched (or
// untouched). A Partial read adds on untouched devices only.
func (n NodeHour) Touching(id string, mask Mask, remove bool) Mask {
	if n.Partial {
		return mask &^ n.TouchedMask
	}
	return mask &^ n.touchedBy(id)
}

// Covered is the mask of devices one allocation holds for the whole hour.
func (n NodeHour) Covered() Mask {
	var m Mask
	for _, e := range n.Entries {
		if n.Hour.CoveredBy(e.Window) {
			m |= e.Mask
		}
	}
	return m
}

// Coverable is the number of devices no single allocation holds for the
// whole hour: no instant of the hour has more free devices.
func (n NodeHour) Coverable() int { return n.Size - n.Covered().Count() }

// UntouchedAfter is Untouched once id's mask is added (or its entry
// removed, with remove).
func (n NodeHour) UntouchedAfter(id string, mask Mask, remove bool) int {
	if n.Partial {
		return n.Untouched - (mask &^ n.TouchedMask).Count()
	}
	t := n.touchedBy(id)
	if !remove {
		t |= mask
	}
	return n.Size - t.Count()
}

// Conflicts returns pairs of entries that hold a device in overlapping
// windows (the checker's double-booking test).
func (n NodeHour) Conflicts() [][2]string {
	ids := make([]string, 0, len(n.Entries))
	for id := range n.Entries {
		ids = append(ids, id)
	}
	var out [][2]string
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			a, b := n.Entries[ids[i]], n.Entries[ids[j]]
			if a.Mask&b.Mask != 0 && a.Window.Overlaps(b.Window) {
				out = append(out, [2]string{ids[i], ids[j]})
			}
		}
	}
	return out
}

// Add records id's entry on the node-hour as a placement's write does (its
// devices' versions bumped, the untouched count updated). For seeding
// state in bulk; the create path writes through CalendarStore.Allocate.
func (n *NodeHour) Add(id string, e Entry) {
	if n.Entries == nil {
		n.Entries = map[string]Entry{}
	}
	if n.Versions == nil {
		n.Versions = map[int]int64{}
	}
	n.Untouched = n.UntouchedAfter(id, e.Mask, false)
	n.Entries[id] = e
	n.TouchedMask = n.touchedBy("")
	for i := 0; i < n.Size; i++ {
		if e.Mask.Has(i) {
			n.Versions[i]++
		}
	}
}
