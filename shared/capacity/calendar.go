package capacity

// MaxEntriesPerNodeDay bounds the reservations one node's day may hold
// (what keeps its item small: see docs/capacity.md). A day that is full
// refuses more, as a node with no free device would.
const MaxEntriesPerNodeDay = 256

// NodeDay is one node's placement state for one UTC day: the allocations
// that overlap the day, a version per device (a placement writes only if
// the versions of the devices it takes are still those it read: optimistic,
// and two placements on different devices of one node never conflict), and
// Untouched, the number of devices no allocation of the day uses — what
// candidates are ordered by.
//
// A node-day nothing was ever placed on need not be stored: Stored is
// false for one made up as empty (EmptyNodeDay), and the first placement
// on it creates it if it is still missing.
type NodeDay struct {
	Pool      string
	Resource  string
	Day       Day
	Node      int
	Size      int // devices on the node
	NodeSize  int // the resource's node size (the last node may be smaller)
	Devices   int // the resource's devices in the pool
	Stored    bool
	Untouched int
	Versions  map[int]int64 // device index on the node → version (absent: 0)
	Entries   map[string]Entry
}

// EmptyNodeDay is node-day k of day as it is before anything is placed on
// it (not stored).
func EmptyNodeDay(t PoolResource, k NodeDayKey) NodeDay {
	size := t.Size(k.Node)
	return NodeDay{Pool: t.PoolID, Resource: t.Resource, Day: k.Day, Node: k.Node, Size: size, NodeSize: t.NodeSize,
		Devices: t.Devices, Untouched: size, Versions: map[int]int64{}, Entries: map[string]Entry{}}
}

// Topology is the layout of the resource the node-day belongs to.
func (n NodeDay) Topology() PoolResource {
	return PoolResource{PoolID: n.Pool, Topology: Topology{Resource: n.Resource, Devices: n.Devices, NodeSize: n.NodeSize}}
}

// Entry is one reservation's devices on a node, for its whole window.
type Entry struct {
	Mask   Mask
	Window Window
}

// Free is the mask of the node's devices no allocation other than id's
// uses during w.
func (n NodeDay) Free(w Window, id string) Mask {
	busy := Mask(0)
	for eid, e := range n.Entries {
		if eid != id && e.Window.Overlaps(w) {
			busy |= e.Mask
		}
	}
	return Full(n.Size) &^ busy
}

// Touched is the mask of devices some allocation of the day uses.
func (n NodeDay) Touched() Mask {
	var m Mask
	for _, e := range n.Entries {
		m |= e.Mask
	}
	return m
}

// UntouchedAfter is Untouched once mask is added (or removed, with remove).
func (n NodeDay) UntouchedAfter(id string, mask Mask, remove bool) int {
	t := Mask(0)
	for eid, e := range n.Entries {
		if eid != id {
			t |= e.Mask
		}
	}
	if !remove {
		t |= mask
	}
	return n.Size - t.Count()
}

// Conflicts returns pairs of entries that hold a device in overlapping
// windows (the checker's double-booking test).
func (n NodeDay) Conflicts() [][2]string {
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

// Add records id's entry on the node-day as a placement's write does (its
// devices' versions bumped, the untouched count updated). For seeding
// state in bulk; the create path writes through CalendarStore.Allocate.
func (n *NodeDay) Add(id string, e Entry) {
	if n.Entries == nil {
		n.Entries = map[string]Entry{}
	}
	if n.Versions == nil {
		n.Versions = map[int]int64{}
	}
	n.Untouched = n.UntouchedAfter(id, e.Mask, false)
	n.Entries[id] = e
	for i := 0; i < n.Size; i++ {
		if e.Mask.Has(i) {
			n.Versions[i]++
		}
	}
}
