package bench

import (
	"context"
	"crypto"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// logFleet is a stack whose log holds releases 1.0.1..1.0.n and one
// managed node running 1.0.1, heartbeating through the reference agent
// (which verifies the log evidence it is told and reports its checkpoint).
type logFleet struct {
	*server
	clock *teststack.Clock
	agent *agent.Agent
	admin *client.Client
}

func newLogFleet(b *testing.B, releases int) *logFleet {
	b.Helper()
	key, err := release.GenerateKey(release.AlgECDSAP256)
	if err != nil {
		b.Fatal(err)
	}
	clock := teststack.NewClock(time.Now().UTC())
	rt := &dynamo.RoundTrips{}
	st := startStack(b, teststack.WithPins(teststack.Pins{Keys: []crypto.PublicKey{key.Public()}}), teststack.WithClock(clock.Now),
		teststack.WithAppOptions(app.WithDynamoOptions(rt.Option())))
	f := &logFleet{server: &server{URL: st.URL, RT: rt, Key: key}, clock: clock, admin: client.New(st.URL, "dev:admin")}
	for i := 1; i <= releases; i++ {
		f.post(b, "releases/register", f.manifest(b, i))
	}
	f.post(b, "pools/create", []byte(`{"tenantId":"acme","poolId":"bench-log","resources":{"gpu":8}}`))
	node, _ := dsse.GenerateKey(dsse.AlgEd25519)
	pem, _ := dsse.MarshalPublicKeyPEM(node.Public())
	body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "bench-log", "nodeId": "gpu-node-0", "publicKey": string(pem), "platform": "linux/amd64"})
	f.post(b, "nodes/register", body)
	dir := b.TempDir()
	state, _ := json.Marshal(map[string]any{"running": api.Version{Version: "1.0.1", Sequence: 1}})
	if err := os.WriteFile(filepath.Join(dir, agent.StateFile), state, 0o600); err != nil {
		b.Fatal(err)
	}
	pins, err := release.NewPins([]crypto.PublicKey{key.Public()}, 1)
	if err != nil {
		b.Fatal(err)
	}
	if f.agent, err = agent.New(agent.Config{Client: client.New(st.URL, "dev:admin"), TenantID: "acme", PoolID: "bench-log", NodeID: "gpu-node-0",
		Key: node, Pins: pins, LogKey: devstack.DevLogKey(b), Platform: "linux/amd64", Devices: 8, Driver: agent.NewRecordingDriver(8),
		StateDir: dir, Now: clock.Now}); err != nil {
		b.Fatal(err)
	}
	return f
}

// beat is one heartbeat through the agent; it fails unless the answer
// tells the node its release with the log's evidence.
func (f *logFleet) beat(b *testing.B) api.HeartbeatResult {
	b.Helper()
	res, err := f.agent.Step(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if res.Desired.Release == nil || res.Desired.Release.Log == nil {
		b.Fatalf("told %+v", res.Desired.Release)
	}
	return res
}

// BenchmarkHeartbeatReleaseLog is what the release log adds to a
// heartbeat (nothing in steady state), with a log of 1,000
// releases:
//
//   - steady: a warm node reporting the latest checkpoint, told its
//     release with the cached evidence: DynamoDB calls per heartbeat (the
//     one conditional write of every heartbeat).
//   - new-checkpoint: a release registered and the checkpoint cache
//     expired before each heartbeat: the one that reads the new checkpoint,
//     proves the node's release in it and checks the node's reported root
//     (then cached for every other node of the function).
func BenchmarkHeartbeatReleaseLog(b *testing.B) {
	const releases = 1000
	f := newLogFleet(b, releases)
	f.beat(b)
	if res := f.beat(b); res.Node.Log == nil || res.Node.Log.Size != releases || !res.Node.Log.Consistent {
		b.Fatalf("the node's witness: %+v", res.Node.Log)
	}
	next := releases + 1
	b.Run("steady", func(b *testing.B) {
		f.beat(b) // warm again after new-checkpoint's registrations
		lat := make([]time.Duration, 0, b.N)
		f.RT.Reset()
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			f.beat(b)
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		report(b, lat, f.RT.Count())
	})
	b.Run("new-checkpoint", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		var calls int64
		for range b.N {
			b.StopTimer()
			f.post(b, "releases/register", f.manifest(b, next))
			next++
			f.clock.Advance(api.CheckpointTTL + time.Second)
			f.RT.Reset()
			b.StartTimer()
			start := time.Now()
			f.beat(b)
			lat = append(lat, time.Since(start))
			calls += f.RT.Count()
		}
		b.StopTimer()
		report(b, lat, calls)
	})
}

// BenchmarkReleasesRegisterLogged registers into a log of 1,000 entries
// and more: the append reads grow with log₂ of the log's size, never with
// the log (compare BenchmarkReleasesRegister, whose log starts empty).
func BenchmarkReleasesRegisterLogged(b *testing.B) {
	s := newServer(b)
	const base = 1000
	for i := 1; i <= base; i++ {
		s.post(b, "releases/register", s.manifest(b, i))
	}
	next := base + 1
	b.Run("log-1000", func(b *testing.B) {
		s.registerEach(b, next)
		next += b.N
	})
}
