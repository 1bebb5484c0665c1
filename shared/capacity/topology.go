package capacity

import (
	"math/bits"
	"sort"
	"strconv"
)

// Topology is how one resource's devices of a pool are grouped into nodes
// (hosts of NVLink-joined devices): device n is on node ⌊n / NodeSize⌋, and
// the last node may be smaller.
type Topology struct {
	Resource string
	Devices  int
	NodeSize int
}

// Nodes is the number of nodes.
func (t Topology) Nodes() int { return (t.Devices + t.NodeSize - 1) / t.NodeSize }

// NodeOf is the node of device n.
func (t Topology) NodeOf(n int) int { return n / t.NodeSize }

// Size is the number of devices on node k.
func (t Topology) Size(k int) int { return min(t.NodeSize, t.Devices-k*t.NodeSize) }

// NodesFor is how many nodes a count needs under topology "node": one for
// a count that fits a node, else ⌈count / NodeSize⌉ (docs/reference/reservations.md).
func (t Topology) NodesFor(count int) int { return (count + t.NodeSize - 1) / t.NodeSize }

// DeviceID names device n of a resource.
func DeviceID(resource string, n int) string { return resource + "-" + strconv.Itoa(n) }

// NodeID names node k of a resource.
func NodeID(resource string, k int) string { return resource + "-node-" + strconv.Itoa(k) }

// Mask is a set of a node's devices: bit i is device k·NodeSize + i.
type Mask uint64

// Has reports whether device i of the node is in the mask.
func (m Mask) Has(i int) bool { return m&(1<<uint(i)) != 0 }

// Count is the number of devices in the mask.
func (m Mask) Count() int { return bits.OnesCount64(uint64(m)) }

// Full is the mask of a node of size devices.
func Full(size int) Mask {
	if size >= 64 {
		return ^Mask(0)
	}
	return Mask(1)<<uint(size) - 1
}

// Lowest returns the mask of the n lowest devices of m.
func (m Mask) Lowest(n int) Mask {
	var out Mask
	for m != 0 && n > 0 {
		low := m & -m
		out |= low
		m &^= low
		n--
	}
	return out
}

// NodeDevices is part of a placement: devices of one node.
type NodeDevices struct {
	Node int
	Mask Mask
}

// Placement is where a reservation's devices are, node by node.
type Placement []NodeDevices

// Devices lists the placement's device indexes, ascending (nodes of
// nodeSize devices).
func (p Placement) Devices(nodeSize int) []int {
	var out []int
	for _, nd := range p {
		for m := nd.Mask; m != 0; m &= m - 1 {
			out = append(out, nd.Node*nodeSize+bits.TrailingZeros64(uint64(m)))
		}
	}
	sort.Ints(out)
	return out
}

// Count is the number of devices placed.
func (p Placement) Count() int {
	n := 0
	for _, nd := range p {
		n += nd.Mask.Count()
	}
	return n
}

// PlacementOf groups device indexes by node.
func PlacementOf(t Topology, devices []int) Placement {
	var p Placement
	for _, n := range devices {
		k := t.NodeOf(n)
		if len(p) == 0 || p[len(p)-1].Node != k {
			p = append(p, NodeDevices{Node: k})
		}
		p[len(p)-1].Mask |= 1 << uint(n-k*t.NodeSize)
	}
	return p
}
