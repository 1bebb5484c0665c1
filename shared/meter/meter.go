// Package meter counts what one request costs in DynamoDB: round trips
// (HTTP requests, retries included) and the read and write capacity units
// DynamoDB reports for them. The gateway puts a Meter in each request's
// context and logs it; the DynamoDB adapter records into whatever Meter the
// context carries. It depends on nothing, so both can use it.
package meter

import (
	"context"
	"sync"
)

// Meter accumulates one request's cost. The zero value is ready; a nil
// *Meter records nothing.
type Meter struct {
	mu       sync.Mutex
	calls    int
	rcu, wcu float64
}

// Usage is a Meter's totals.
type Usage struct {
	Calls int     // DynamoDB round trips
	RCU   float64 // read capacity units consumed
	WCU   float64 // write capacity units consumed
}

// Units is RCU + WCU.
func (u Usage) Units() float64 { return u.RCU + u.WCU }

// Add is u and v together.
func (u Usage) Add(v Usage) Usage { return Usage{u.Calls + v.Calls, u.RCU + v.RCU, u.WCU + v.WCU} }

// Sub is what u has beyond v (the usage between two readings of a Meter).
func (u Usage) Sub(v Usage) Usage { return Usage{u.Calls - v.Calls, u.RCU - v.RCU, u.WCU - v.WCU} }

// Call records one round trip.
func (m *Meter) Call() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
}

// Consumed records capacity units of a read (write=false) or a write.
func (m *Meter) Consumed(units float64, write bool) {
	if m == nil {
		return
	}
	m.mu.Lock()
	if write {
		m.wcu += units
	} else {
		m.rcu += units
	}
	m.mu.Unlock()
}

// Usage returns the totals so far.
func (m *Meter) Usage() Usage {
	if m == nil {
		return Usage{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return Usage{Calls: m.calls, RCU: m.rcu, WCU: m.wcu}
}

type key struct{}

// With returns ctx carrying m.
func With(ctx context.Context, m *Meter) context.Context { return context.WithValue(ctx, key{}, m) }

// From returns the Meter ctx carries, or nil.
func From(ctx context.Context) *Meter {
	m, _ := ctx.Value(key{}).(*Meter)
	return m
}
