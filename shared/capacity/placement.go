package capacity

import (
	"sort"
	"time"
)

// Calendar is the placement state of one (pool, resource): which devices
// each reservation holds for which window. Version orders writes: a
// placement is written only if the version it was chosen on is still the
// stored one (optimistic concurrency).
type Calendar struct {
	PoolID   string
	Resource string
	Version  int64 // 0: no calendar stored yet
	Allocs   map[string]Alloc
}

// Alloc is one reservation's devices (indexes n of "<resource>-<n>") for its window.
type Alloc struct {
	TenantID string
	Devices  []int
	Window   Window
}

// Choose picks count devices of the resource (size devices in the pool) free
// for the whole window w, or ok=false if none fit. The choice is
// deterministic: the lowest-numbered free devices, so a retry after a lost
// race on an unchanged calendar chooses the same devices, and tests can state
// which devices a reservation gets.
func (c Calendar) Choose(size, count int, w Window) (devices []int, ok bool) {
	busy := make([]bool, size)
	for _, a := range c.Allocs {
		if !a.Window.Overlaps(w) {
			continue
		}
		for _, d := range a.Devices {
			if d >= 0 && d < size {
				busy[d] = true
			}
		}
	}
	for d := 0; d < size && len(devices) < count; d++ {
		if !busy[d] {
			devices = append(devices, d)
		}
	}
	if len(devices) < count {
		return nil, false
	}
	return devices, true
}

// Conflicts returns pairs of reservations holding one device in overlapping
// windows (the checker's double-booking test).
func (c Calendar) Conflicts() [][2]string {
	type use struct {
		id string
		w  Window
	}
	byDevice := map[int][]use{}
	for id, a := range c.Allocs {
		for _, d := range a.Devices {
			byDevice[d] = append(byDevice[d], use{id, a.Window})
		}
	}
	var out [][2]string
	for _, uses := range byDevice {
		sort.Slice(uses, func(i, j int) bool { return uses[i].w.Start.Before(uses[j].w.Start) })
		for i := range uses {
			for j := i + 1; j < len(uses) && uses[j].w.Start.Before(uses[i].w.End); j++ {
				out = append(out, [2]string{uses[i].id, uses[j].id})
			}
		}
	}
	return out
}

// backoff is the jittered wait before placement attempt n (n ≥ 1): it
// grows from 2 ms to at most 64 ms so racers spread out without stalling.
func backoff(n int, jitter func(int64) int64) time.Duration {
	ceil := int64(2) << min(n, 5) // 4, 8, … 64 ms
	return time.Duration(ceil/2+jitter(ceil/2+1)) * time.Millisecond
}
