package fleetdb

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// A node, POOL#<pool> / NODE#<resource>#<k, 6 digits>, is one registered
// host of a pool, in its pool's partition:
//
//	pub, keyId, platform, owner, idx, ns   its registration (key and
//	     platform replaced only by nodes.register with replace, which also
//	     sets counter 0 and state registered)
//	counter, last, running, install, health, state   the last accepted
//	     report (a heartbeat's one conditional write sets them)
//	rep  reservation → bound|unbound|failed: that report's bindings
//	b    reservation → {t: tenant, m: device mask, s, e: window in Unix ms,
//	     a: bind|unbind}: what the node is told (the reservation
//	     reconciler writes them; the sweep forgets unbinds reported done);
//	     nb counts them
//	oc, rc    the operator's and a rollout's cordon
//	fg   the generation the last flag writer claimed; fl, flTo, flGen what
//	     the last writer to finish applied: its node-hours carry the
//	     ineligible flag through flTo (docs/fleet.md, Eligibility)
//	psk  NODE#OUT#<resource>#<k> while the node is out of service (the
//	     `bypool` LSI: a count of the pool's nodes out of service, what a
//	     rollout's maxUnavailable counts) — set by the very write that takes
//	     it out (a report, a cordon, the sweep), removed once its flags are
//	     lifted
//	bv   rises with every change of b (a bind is conditioned on it)
//	adp  the reservations it held when it registered were told to it
//	log  the last report's release log checkpoint {s: size, r: root};
//	     lsv the first report of a root the log never had {s, r, at},
//	     kept until the node is re-registered (~150 B together)
//	tgt, floor  a rollout's target release {v, s, rid} and the floor it
//	     tells meanwhile
//	ssk  NODE#<state>#<resource>#<k> (the `bystate` LSI: lists by state)
//
// Worst case: 128 entries × ~230 B (26-character id, a 128-character
// tenant, three numbers) + 128 reported states × ~40 B + 32 checks × ~340 B
// (64-character name, 256-character detail) + the key (~180 B of PEM) and
// the rest (~1 KB) ≈ 46 KB in ASCII; ≈ 77 KB when the checks' names and
// details are 4-byte UTF-8 (docs/fleet.md, Items and their worst cases).
// Typical: a few entries, three checks ≈ 1.5 KB — what a heartbeat's write
// costs (1–2 write units).
//
// The pool's sweep, POOL#<pool> / #FLEET, carries dueShard/dueAt: the
// reconciler's cue to look at the pool's nodes (fleet.Service.Sweep).

func nodeItemSK(resource string, k int) string {
	return fmt.Sprintf("%s%s#%06d", NodePrefix, resource, k)
}

func nodeSSK(st api.NodeState, resource string, k int) string {
	return fmt.Sprintf("%s%s#%s#%06d", NodePrefix, st, resource, k)
}

// outPrefix begins every out-of-service entry (psk) of a pool.
const outPrefix = NodePrefix + "OUT#"

func nodeOutPSK(resource string, k int) string {
	return fmt.Sprintf("%s%s#%06d", outPrefix, resource, k)
}

// parseOutPSK is the node an out-of-service entry names.
func parseOutPSK(psk string) (resource string, k int, ok bool) {
	rest, ok := strings.CutPrefix(psk, outPrefix)
	i := strings.LastIndex(rest, "#")
	if !ok || i <= 0 {
		return "", 0, false
	}
	k, err := strconv.Atoi(rest[i+1:])
	return rest[:i], k, err == nil && k >= 0
}

func nodeKey(pool, resource string, k int) map[string]types.AttributeValue {
	return dynamo.Key(dynamo.PoolPK(pool), nodeItemSK(resource, k))
}

func recKey(r fleet.Record) map[string]types.AttributeValue {
	return nodeKey(r.PoolID, r.Resource, r.Index)
}

type versionItem struct {
	V string `dynamodbav:"v"`
	S int64  `dynamodbav:"s"`
}

type installItem struct {
	V  string `dynamodbav:"v"`
	St string `dynamodbav:"st"`
	R  string `dynamodbav:"r,omitempty"`
}

type checkItem struct {
	N  string `dynamodbav:"n"`
	OK bool   `dynamodbav:"ok"`
	D  string `dynamodbav:"d,omitempty"`
}

type healthItem struct {
	E int         `dynamodbav:"e"`
	V int         `dynamodbav:"v"`
	C []checkItem `dynamodbav:"c"`
}

type cordonItem struct {
	By  string `dynamodbav:"by"`
	R   string `dynamodbav:"r"`
	RID string `dynamodbav:"rid,omitempty"`
	At  string `dynamodbav:"at"`
}

type bindItem struct {
	T  string `dynamodbav:"t"`
	M  int64  `dynamodbav:"m"`
	S  int64  `dynamodbav:"s"`
	E  int64  `dynamodbav:"e"`
	A  string `dynamodbav:"a"`
	MV int    `dynamodbav:"mv"`
}

type nodeItem struct {
	PK        string              `dynamodbav:"pk"`
	SK        string              `dynamodbav:"sk"`
	SSK       string              `dynamodbav:"ssk"`
	Kind      string              `dynamodbav:"kind"`
	PoolID    string              `dynamodbav:"poolId"`
	NodeID    string              `dynamodbav:"nodeId"`
	Resource  string              `dynamodbav:"resource"`
	Index     int                 `dynamodbav:"idx"`
	NodeSize  int                 `dynamodbav:"ns"`
	Owner     string              `dynamodbav:"owner"`
	Platform  string              `dynamodbav:"platform"`
	KeyID     string              `dynamodbav:"keyId"`
	Pub       string              `dynamodbav:"pub"`
	State     string              `dynamodbav:"state"`
	CreatedAt string              `dynamodbav:"createdAt"`
	Counter   int64               `dynamodbav:"counter"`
	Last      string              `dynamodbav:"last,omitempty"`
	Running   *versionItem        `dynamodbav:"running,omitempty"`
	Install   *installItem        `dynamodbav:"install,omitempty"`
	Health    *healthItem         `dynamodbav:"health,omitempty"`
	Operator  *cordonItem         `dynamodbav:"oc,omitempty"`
	Rollout   *cordonItem         `dynamodbav:"rc,omitempty"`
	Entries   map[string]bindItem `dynamodbav:"b"`
	NB        int                 `dynamodbav:"nb"`
	Reported  map[string]string   `dynamodbav:"rep"`
	Gen       int64               `dynamodbav:"fg,omitempty"`
	FlagGen   int64               `dynamodbav:"flGen,omitempty"`
	Flagged   bool                `dynamodbav:"fl,omitempty"`
	FlaggedTo int64               `dynamodbav:"flTo,omitempty"`
	PSK       string              `dynamodbav:"psk,omitempty"`
	BV        int64               `dynamodbav:"bv,omitempty"`
	Adopted   bool                `dynamodbav:"adp,omitempty"`
	Target    *targetItem         `dynamodbav:"tgt,omitempty"`
	Floor     int64               `dynamodbav:"floor,omitempty"`
	Log       *logItem            `dynamodbav:"log,omitempty"` // the last report's release log checkpoint
	LogSplit  *logSplitItem       `dynamodbav:"lsv,omitempty"` // the first report the log never had
}

type logItem struct {
	S int64  `dynamodbav:"s"`
	R string `dynamodbav:"r"`
}

type logSplitItem struct {
	S  int64  `dynamodbav:"s"`
	R  string `dynamodbav:"r"`
	At string `dynamodbav:"at"`
}

type targetItem struct {
	V   string `dynamodbav:"v"`
	S   int64  `dynamodbav:"s"`
	RID string `dynamodbav:"rid,omitempty"`
}

func (t *targetItem) target() *fleet.Target {
	if t == nil {
		return nil
	}
	return &fleet.Target{Version: t.V, Sequence: t.S, RolloutID: t.RID}
}

func toCordonItem(c *api.Cordon) *cordonItem {
	if c == nil {
		return nil
	}
	return &cordonItem{By: c.By, R: c.Reason, RID: c.RolloutID, At: dynamo.FmtTime(c.At)}
}

func (c *cordonItem) cordon() *api.Cordon {
	if c == nil {
		return nil
	}
	return &api.Cordon{By: c.By, Reason: c.R, RolloutID: c.RID, At: dynamo.ParseTime(c.At)}
}

func toHealthItem(h api.Health) *healthItem {
	it := &healthItem{E: h.DevicesExpected, V: h.DevicesVisible, C: make([]checkItem, len(h.Checks))}
	for i, c := range h.Checks {
		it.C[i] = checkItem{N: c.Name, OK: c.OK}
		if c.Detail != nil {
			it.C[i].D = *c.Detail
		}
	}
	return it
}

func (it nodeItem) record() fleet.Record {
	r := fleet.Record{Node: api.Node{PoolID: it.PoolID, NodeID: it.NodeID, Resource: it.Resource, Platform: it.Platform,
		KeyID: it.KeyID, State: api.NodeState(it.State), CreatedAt: dynamo.ParseTime(it.CreatedAt)},
		Index: it.Index, Owner: it.Owner, PublicKey: it.Pub, Counter: it.Counter, NodeSize: it.NodeSize,
		Operator: it.Operator.cordon(), Rollout: it.Rollout.cordon(), Entries: map[string]fleet.Entry{}, Reported: it.Reported,
		Gen: it.Gen, FlagGen: it.FlagGen, Flagged: it.Flagged, FlaggedTo: capacity.Hour(it.FlaggedTo), Out: it.PSK != "",
		BindVersion: it.BV, Adopted: it.Adopted, Target: it.Target.target(), Floor: it.Floor}
	if r.Reported == nil {
		r.Reported = map[string]string{}
	}
	if it.Last != "" {
		t := dynamo.ParseTime(it.Last)
		r.LastHeartbeatAt = &t
	}
	if it.Running != nil {
		r.Running = &api.Version{Version: it.Running.V, Sequence: it.Running.S}
	}
	if it.Install != nil {
		r.Install = &api.Install{Version: it.Install.V, State: it.Install.St}
		if it.Install.R != "" {
			reason := it.Install.R
			r.Install.Reason = &reason
		}
	}
	if it.LogSplit != nil {
		r.LogSplit = &api.LogSplit{Size: it.LogSplit.S, Root: it.LogSplit.R, At: dynamo.ParseTime(it.LogSplit.At)}
	}
	if it.Log != nil || it.LogSplit != nil {
		r.Node.Log = &api.NodeLog{Consistent: r.LogSplit == nil, SplitView: r.LogSplit}
		if it.Log != nil {
			r.Node.Log.Size, r.Node.Log.Root = it.Log.S, it.Log.R
		}
	}
	if it.Health != nil {
		h := api.Health{DevicesExpected: it.Health.E, DevicesVisible: it.Health.V, Checks: make([]api.Check, len(it.Health.C))}
		for i, c := range it.Health.C {
			h.Checks[i] = api.Check{Name: c.N, OK: c.OK}
			if c.D != "" {
				d := c.D
				h.Checks[i].Detail = &d
			}
		}
		r.Health = &h
	}
	for id, e := range it.Entries {
		r.Entries[id] = fleet.Entry{TenantID: e.T, Mask: capacity.Mask(uint64(e.M)), Action: e.A, Moves: e.MV,
			Window: api.Window{Start: time.UnixMilli(e.S).UTC(), End: time.UnixMilli(e.E).UTC()}}

	}
	return r
}

// allNew decodes an ALL_NEW answer.
func nodeFrom(av map[string]types.AttributeValue) (fleet.Record, error) {
	var it nodeItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return fleet.Record{}, err
	}
	return it.record(), nil
}
