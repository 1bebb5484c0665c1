package fleetproto

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Every DynamoDB request an actor makes is a scheduling point: the
// scheduler is installed in the client as the first initialize-step
// middleware (outside the SDK's retries), so whatever store method a
// service calls — node item writes, node-hour flags, allocations and
// frees, reservation amends, rollout and progress writes, and any method
// added later — stops there, and fails or crashes there, as
// shared/dynamo/faults.go fails requests before or after the server. The
// few store methods that fan out over goroutines (Free, Provision) are
// one scheduling point each (atomicCalendar), so one actor never runs two
// requests at once.

type atomicKey struct{}

// whole marks ctx as inside one atomic store call.
func whole(ctx context.Context) context.Context { return context.WithValue(ctx, atomicKey{}, true) }

func inWhole(ctx context.Context) bool { v, _ := ctx.Value(atomicKey{}).(bool); return v }

// option installs the scheduler in a client.
func (w *world) option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("fleetprotoSched",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					name, write, node := describe(in.Parameters)
					served := func() (middleware.InitializeOutput, middleware.Metadata, error) {
						out, md, err := next.HandleInitialize(ctx, in)
						if err == nil && write && node != nil {
							w.dirtyMu.Lock()
							w.dirty[*node] = true
							w.dirtyMu.Unlock()
						}
						return out, md, err
					}
					if inWhole(ctx) {
						return served()
					}
					switch d := w.s.yield(ctx, name); d {
					case crashBefore:
						return middleware.InitializeOutput{}, middleware.Metadata{}, errCrashed
					case failBefore:
						return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
					case crashAfter, failAfter:
						_, _, _ = served()
						if d == crashAfter {
							return middleware.InitializeOutput{}, middleware.Metadata{}, errCrashed
						}
						return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
					}
					return served()
				}), middleware.Before)
		})
	}
}

// nodeRef names a node item.
type nodeRef struct {
	pool string
	k    int
}

func (n nodeRef) String() string { return n.pool + "/" + capacity.NodeID("gpu", n.k) }

// describe names a request for the trace (its operation and key) and says
// whether it writes and, for a node item, which node.
func describe(p any) (name string, write bool, node *nodeRef) {
	var k map[string]types.AttributeValue
	switch in := p.(type) {
	case *dynamodb.GetItemInput:
		name, k = "GetItem", in.Key
	case *dynamodb.PutItemInput:
		name, k, write = "PutItem", in.Item, true
	case *dynamodb.UpdateItemInput:
		name, k, write = "UpdateItem", in.Key, true
	case *dynamodb.DeleteItemInput:
		name, k, write = "DeleteItem", in.Key, true
	case *dynamodb.QueryInput:
		name = "Query"
		if in.IndexName != nil {
			name += " " + *in.IndexName
		}
		for _, k := range slices.Sorted(maps.Keys(in.ExpressionAttributeValues)) {
			if s, ok := in.ExpressionAttributeValues[k].(*types.AttributeValueMemberS); ok && strings.Contains(s.Value, "#") {
				name += " " + s.Value
			}
		}
		return name, false, nil
	case *dynamodb.BatchGetItemInput:
		n := 0
		for _, ka := range in.RequestItems {
			n += len(ka.Keys)
		}
		return fmt.Sprintf("BatchGetItem (%d keys)", n), false, nil
	case *dynamodb.BatchWriteItemInput:
		return "BatchWriteItem", true, nil
	default:
		return fmt.Sprintf("%T", p), false, nil
	}
	pk, sk := str(k[schema.AttrPK]), str(k[schema.AttrSK])
	name += " " + pk + " " + sk
	if pool, ok := strings.CutPrefix(pk, "POOL#"); ok && strings.HasPrefix(sk, "NODE#") {
		if i := strings.LastIndex(sk, "#"); i > 0 {
			if n, err := strconv.Atoi(sk[i+1:]); err == nil {
				node = &nodeRef{pool, n}
			}
		}
	}
	return name, write, node
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// atomicCalendar is the capacity store the actors' services use: every
// request is already a scheduling point (option); Free and Provision,
// which fan out, are one each; Transition, Amend and Disrupt are watched
// for the checker (e, hist, silence).
type atomicCalendar struct {
	*capacitydb.Store
	w *world
}

func (c *atomicCalendar) Free(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey, id string) error {
	return do(c.w.s, ctx, fmt.Sprintf("Free %s (%d node-hours)", id, len(keys)), func() error {
		return c.Store.Free(whole(ctx), t, keys, id)
	})
}

func (c *atomicCalendar) Provision(ctx context.Context, t capacity.PoolResource, h capacity.Hour) (bool, error) {
	return call(c.w.s, ctx, fmt.Sprintf("Provision %s/%s hour %s", t.PoolID, t.Resource, h), func() (bool, error) {
		return c.Store.Provision(whole(ctx), t, h)
	})
}

// Transition: a reservation that just became active is checked at once,
// against the nodes as they are right after the write (check e).
func (c *atomicCalendar) Transition(ctx context.Context, to capacity.Reservation, from api.ReservationState) (capacity.Reservation, error) {
	cur, err := c.Store.Transition(ctx, to, from)
	if err == nil {
		c.w.checkFacts(cur, "after a transition to "+string(cur.State))
		c.w.recordFacts(cur)
	}
	if err == nil && cur.State == api.Active && from != api.Active {
		var since time.Time
		if a := actorOf(ctx); a != nil {
			since = a.started
		}
		c.w.checkActive(cur, "when it became active", since)
	}
	return cur, err
}

// watchedProgress is the rollout store: each node a rollout starts (its
// progress leaving pending, or a rollback starting) is checked against the
// pools' true out-of-service count at that moment (check d); a pass's
// intent to start nodes is where the budget race adversary cordons.
type watchedProgress struct {
	*rolloutdb.Store
	w *world
}

func (r *watchedProgress) UpdateProgress(ctx context.Context, p rollout.Progress, from api.RolloutStep, fromRollback string) error {
	err := r.Store.UpdateProgress(ctx, p, from, fromRollback)
	if err == nil {
		r.w.silentFailed(p)
		starts := (from == api.Pending && p.Step.Active()) ||
			(fromRollback == rollout.RollbackDue && p.Rollback == rollout.RollbackInstalling)
		if starts {
			r.w.checkStart(p)
			r.w.adv.starting[nodeRef{p.PoolID, capacityIndex(p.NodeID)}] = true
		}
	}
	return err
}

func (r *watchedProgress) UpdateRollout(ctx context.Context, rec rollout.Record) (rollout.Record, error) {
	cur, err := r.Store.UpdateRollout(ctx, rec)
	if err == nil && cur.Intent != nil {
		r.w.cordonAfterIntent(ctx, cur)
	}
	return cur, err
}

// watchedFleet is the fleet services' node store: the order in which each
// report was accepted (check i).
type watchedFleet struct {
	*fleetdb.Store
	w *world
}

func (f *watchedFleet) Heartbeat(ctx context.Context, r fleet.Record, keyID string, rep api.Report, st api.NodeState, split *api.LogSplit, now time.Time) (fleet.Record, error) {
	out, err := f.Store.Heartbeat(ctx, r, keyID, rep, st, split, now)
	if n := f.w.nodes[nodeRef{r.PoolID, r.Index}]; err == nil && n != nil {
		f.w.writes++
		n.acceptedOrder = f.w.writes
	}
	return out, err
}

// watchedCordons is the rollout reconciler's cordon writer: a rollout
// cordon set is when its node went out of placement (check b).
type watchedCordons struct {
	svc *fleet.Service
	w   *world
}

func (c watchedCordons) SetRolloutCordonIn(ctx context.Context, t capacity.Topology, rec fleet.Record, cd *api.Cordon) (fleet.Record, error) {
	if cd != nil {
		c.w.cordonRace(ctx, rec)
	}
	out, err := c.svc.SetRolloutCordonIn(ctx, t, rec, cd)
	ref := nodeRef{rec.PoolID, rec.Index}
	if err == nil && cd != nil {
		c.w.wentOut(ref, "rollout cordon")
		if c.w.adv.starting[ref] { // a start's cordon: the next start is the budget race's
			c.w.sickenBetweenStarts(ctx)
		}
	}
	delete(c.w.adv.starting, ref)
	return out, err
}

// releaseReader adapts the releases store to what heartbeats read.
type releaseReader struct{ s *registry.Service }

func (r releaseReader) Release(ctx context.Context, v string) (fleet.NodeRelease, error) {
	rel, err := r.s.Get(ctx, v)
	if err != nil {
		return fleet.NodeRelease{}, fleet.ErrNotFound
	}
	return fleet.NodeRelease{Version: rel.Version, Sequence: rel.Sequence, Digest: rel.ManifestDigest, Manifest: rel.Manifest}, nil
}
