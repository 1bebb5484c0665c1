package main

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/shared/release"
)

// The simulated fleet (BC_SIM_NODES=n, docs/agent.md): n reference agents
// in process, each on a RecordingDriver, heartbeating the local gateway
// over HTTP as principal simPrincipal (localstack/policy.json grants it
// compute:nodes:report on node:*). The first nodes are the quickstart
// pool's; the rest are on simPool, owned by the quickstart's tenant.
const (
	simPrincipal = "fleet-agent"
	simPool      = "sim-fleet"
	simPlatform  = "linux/amd64"
	simMaxNodes  = 256
	simNodeSize  = api.DefaultNodeSize
)

// parseSimNodes reads BC_SIM_NODES ("" is 0).
func parseSimNodes(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > simMaxNodes {
		return 0, fmt.Errorf("BC_SIM_NODES must be a whole number from 0 to %d, got %q", simMaxNodes, s)
	}
	return n, nil
}

// startSimFleet sets up n simulated nodes against the gateway at url and
// runs their agents until ctx ends, in the background: the requests wait
// in the listener's backlog until the gateway serves. A failed setup is
// logged and the stack goes on without a fleet. The channel closes once
// every agent stopped.
func startSimFleet(ctx context.Context, url string, n int, dir string, appPins []rolloutapp.Pin, threshold int, logKey release.LogKey, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if n == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		keys := make([]crypto.PublicKey, len(appPins))
		for i, p := range appPins {
			keys[i] = p.Key
		}
		// The simulated nodes trust what the stack pins; a real node's pins
		// are its own (bcd-agent --pins-file).
		pins, err := release.NewPins(keys, threshold)
		if err != nil {
			log.Error("simulated fleet: release pins", "error", err.Error())
			return
		}
		f, err := setupSimFleet(ctx, client.New(url, "dev:admin"), client.New(url, "dev:"+simPrincipal), n, dir, pins, &logKey, log)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("simulated fleet not started", "error", err.Error())
			}
			return
		}
		if len(f.Agents) == 0 {
			fmt.Println(f.summary())
			return
		}
		f.firstBeats(ctx, log)
		fmt.Println(f.summary())
		<-f.run(ctx)
	}()
	return done
}

// simNode is one simulated node.
type simNode struct {
	Pool, Node string
	Devices    int
}

// simFleet is the set-up fleet: its nodes, registered, and their agents;
// and the nodes of its layout it left alone.
type simFleet struct {
	Tenant  string // the pools' owner
	Nodes   []simNode
	Agents  []*agent.Agent
	Skipped []skippedNode
	closes  []func()
}

// skippedNode is a node of the fleet's layout registered under another key
// or platform than the simulated agent's: someone else's node (the
// README's `nodes register` step, or a key file removed). It is never
// re-keyed behind the operator's back.
type skippedNode struct {
	simNode
	Why     string // what is registered
	KeyFile string // the key the simulated agent would take it with
}

// quickstartPool is the quickstart's pools.create request, exactly as it
// prints it, so the stack's creation and the user's replay the same one.
func quickstartPool() (api.CreatePoolInput, error) {
	var in api.CreatePoolInput
	for _, ex := range localgw.Examples(time.Now()) {
		if ex.Method == "pools.create" {
			return in, json.Unmarshal([]byte(ex.Body), &in)
		}
	}
	return in, errors.New("the quickstart creates no pool")
}

// setupSimFleet creates the pools (as admin: a replay returns the stored
// pool), keeps a key per node under dir (a restart reuses them), registers
// the nodes (a replay returns the stored node) and builds their agents,
// not started. A node registered under another key or platform is
// skipped (simFleet.Skipped), the others still run: the layout — the
// quickstart pool's nodes, then simPool's — does not move, so sim-fleet
// keeps n minus the quickstart pool's nodes whatever was skipped, and a
// restart takes the same nodes. Agents talk through agentClient; they
// trust pins.
func setupSimFleet(ctx context.Context, admin, agentClient *client.Client, n int, dir string, pins *release.Pins, logKey *release.LogKey, log *slog.Logger) (*simFleet, error) {
	quick, err := quickstartPool()
	if err != nil {
		return nil, err
	}
	res, err := admin.PoolsCreate(ctx, &quick)
	if err != nil {
		return nil, fmt.Errorf("simulated fleet: creating the quickstart pool %s: %w", quick.PoolID, err)
	}
	nodes := poolNodes(res.Pool)
	if rest := n - len(nodes); rest > 0 {
		sim, err := simFleetPool(ctx, admin, quick, rest)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, poolNodes(sim)[:rest]...)
	}
	nodes = nodes[:min(n, len(nodes))]
	f := &simFleet{Tenant: quick.TenantID}
	for _, sn := range nodes {
		a, closeFn, err := simAgent(ctx, admin, agentClient, quick.TenantID, sn, dir, pins, logKey, log)
		var skip *skippedNode
		switch {
		case errors.As(err, &skip):
			log.Warn("simulated fleet: node skipped", "node", sn.Pool+"/"+sn.Node, "registered", skip.Why)
			f.Skipped = append(f.Skipped, *skip)
			continue
		case err != nil:
			f.close()
			return nil, err
		}
		f.Nodes, f.Agents, f.closes = append(f.Nodes, sn), append(f.Agents, a), append(f.closes, closeFn)
	}
	return f, nil
}

// simFleetPool creates simPool with rest nodes of simNodeSize devices of
// the quickstart's resource, or takes the one an earlier run created if it
// has enough nodes.
func simFleetPool(ctx context.Context, admin *client.Client, quick api.CreatePoolInput, rest int) (api.Pool, error) {
	resource := slices.Sorted(maps.Keys(quick.Resources))[0]
	in := api.CreatePoolInput{Tenant: quick.Tenant, PoolID: simPool, Resources: api.Resources{resource: rest * simNodeSize},
		NodeSize: api.NodeSizes{resource: simNodeSize}}
	res, err := admin.PoolsCreate(ctx, &in)
	if e := apierr.As(err); e != nil && e.Code == apierr.Conflict && e.Details["field"] == "resources" {
		got, gerr := admin.PoolsGet(ctx, &api.GetPoolInput{Tenant: quick.Tenant, PoolID: simPool})
		if gerr != nil {
			return api.Pool{}, fmt.Errorf("simulated fleet: reading pool %s: %w", simPool, gerr)
		}
		if have := len(poolNodes(got.Pool)); have < rest {
			return api.Pool{}, fmt.Errorf("simulated fleet: pool %s exists from an earlier run with %d nodes, BC_SIM_NODES needs %d there: "+
				"lower BC_SIM_NODES, or start over: make clean (or another BC_STATE_DIR)", simPool, have, rest)
		}
		return got.Pool, nil
	}
	if err != nil {
		return api.Pool{}, fmt.Errorf("simulated fleet: creating pool %s: %w", simPool, err)
	}
	return res.Pool, nil
}

// poolNodes lists a pool's nodes with their device counts, by resource
// then index (from resources and nodeSize: a large pool lists no devices).
func poolNodes(p api.Pool) []simNode {
	var out []simNode
	for _, r := range slices.Sorted(maps.Keys(p.Resources)) {
		size := max(p.NodeSize[r], 1)
		for k, left := 0, p.Resources[r]; left > 0; k, left = k+1, left-size {
			out = append(out, simNode{Pool: p.PoolID, Node: r + "-node-" + strconv.Itoa(k), Devices: min(size, left)})
		}
	}
	return out
}

// simAgent keeps the node's key, registers the node and builds its agent:
// <dir>/<pool>/<node>.pem is the key, <dir>/<pool>/<node>/ the agent's
// state, <dir>/<pool>/<node>.journal the driver's binds and unbinds.
func simAgent(ctx context.Context, admin, agentClient *client.Client, tenant string, sn simNode, dir string,
	pins *release.Pins, logKey *release.LogKey, log *slog.Logger) (*agent.Agent, func(), error) {
	base := filepath.Join(dir, sn.Pool, sn.Node)
	key, err := simKey(base + ".pem")
	if err != nil {
		return nil, nil, fmt.Errorf("simulated fleet: %s/%s: %w", sn.Pool, sn.Node, err)
	}
	pem, err := dsse.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		return nil, nil, err
	}
	_, err = admin.NodesRegister(ctx, &api.RegisterNodeInput{Tenant: api.Tenant{TenantID: tenant},
		NodeRef: api.NodeRef{PoolID: sn.Pool, NodeID: sn.Node}, PublicKey: string(pem), Platform: simPlatform})
	if e := apierr.As(err); e != nil && e.Code == apierr.Conflict {
		why := "under a key this stack does not hold"
		if p, _ := e.Details["platform"].(string); e.Details["field"] == "platform" {
			why = "as " + p + " (the simulated agents are " + simPlatform + ")"
		}
		return nil, nil, &skippedNode{simNode: sn, Why: why, KeyFile: base + ".pem"}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("simulated fleet: registering %s/%s: %w", sn.Pool, sn.Node, err)
	}
	driver := agent.NewRecordingDriver(sn.Devices)
	journal, err := driver.OpenJournal(base + ".journal")
	if err != nil {
		return nil, nil, err
	}
	a, err := agent.New(agent.Config{Client: agentClient, TenantID: tenant, PoolID: sn.Pool, NodeID: sn.Node, Key: key,
		Pins: pins, LogKey: logKey, Platform: simPlatform, Devices: sn.Devices, Driver: driver, StateDir: base, Starter: simStarter{},
		Logger: log})
	if err != nil {
		journal.Close()
		return nil, nil, err
	}
	return a, func() { journal.Close() }, nil
}

// simKey reads the node key at path, or makes it (mode 0600).
func simKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return dsse.ParsePrivateKeyPEM(data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k, err := dsse.GenerateKey(dsse.AlgECDSAP256)
	if err != nil {
		return nil, err
	}
	pem, err := dsse.MarshalPrivateKeyPEM(k)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return k, os.WriteFile(path, pem, 0o600)
}

// simStarter: a simulated node verifies and downloads a release like any
// agent, but make run never executes what it downloaded; it counts as
// started healthy.
type simStarter struct{}

func (simStarter) Start(context.Context, string, api.Version) error { return nil }

// firstBeats sends every agent's first heartbeat at once, so the fleet is
// up (its nodes ready) when make run says so; a refusal is logged (Run
// keeps trying).
func (f *simFleet) firstBeats(ctx context.Context, log *slog.Logger) {
	var wg sync.WaitGroup
	for i, a := range f.Agents {
		wg.Go(func() {
			if _, err := a.Step(ctx); err != nil && ctx.Err() == nil {
				n := f.Nodes[i]
				log.Warn("simulated fleet: first heartbeat", "node", n.Pool+"/"+n.Node, "error", err.Error())
			}
		})
	}
	wg.Wait()
}

// run starts every agent; the channel closes once all stopped (ctx ended).
func (f *simFleet) run(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, a := range f.Agents {
		wg.Go(func() { _ = a.Run(ctx) })
	}
	go func() {
		wg.Wait()
		f.close()
		close(done)
	}()
	return done
}

func (f *simFleet) close() {
	for _, c := range f.closes {
		c()
	}
}

func (s *skippedNode) Error() string {
	return fmt.Sprintf("simulated fleet: %s/%s is registered %s", s.Pool, s.Node, s.Why)
}

// summary is the line make run prints once the fleet is up (or, every
// node skipped, why it is not), then a line per node it skipped: what is
// registered, and the two ways out.
func (f *simFleet) summary() string {
	var b strings.Builder
	if len(f.Agents) > 0 {
		b.WriteString(f.upLine())
	} else {
		fmt.Fprintf(&b, "Simulated fleet not started: each of its %d nodes is registered already, not to it:", len(f.Skipped))
	}
	for _, s := range f.Skipped {
		guess := ""
		if s.Pool != simPool {
			guess = " (the README's `nodes register` step?)"
		}
		fmt.Fprintf(&b, "\n  %s/%s skipped: registered %s%s — `make clean` (or another BC_STATE_DIR) starts over with every node, "+
			"or `bin/bcctl nodes register --pool %s %s --key %s --replace` hands it to the simulated fleet at the next make run.",
			s.Pool, s.Node, s.Why, guess, s.Pool, s.Node, s.KeyFile)
	}
	return b.String()
}

// upLine says which agents run where.
func (f *simFleet) upLine() string {
	var pools []string
	byPool := map[string][]string{}
	for _, n := range f.Nodes {
		if _, ok := byPool[n.Pool]; !ok {
			pools = append(pools, n.Pool)
		}
		byPool[n.Pool] = append(byPool[n.Pool], n.Node)
	}
	var parts []string
	for _, p := range pools {
		parts = append(parts, fmt.Sprintf("%s (%s)", p, strings.Join(byPool[p], ", ")))
	}
	first := f.Nodes[0].Pool
	count := strconv.Itoa(len(f.Agents))
	if len(f.Skipped) > 0 {
		count += " of " + strconv.Itoa(len(f.Agents)+len(f.Skipped))
	}
	return fmt.Sprintf("Simulated fleet up: %s agents heartbeating as %s on %s. See them: bin/bcctl nodes list --pool %s "+
		"(POST /api/compute/nodes/list {\"tenantId\":%q,\"poolId\":%q} as dev:admin).",
		count, simPrincipal, strings.Join(parts, ", "), first, f.Tenant, first)
}
