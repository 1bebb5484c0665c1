package fleetsim

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// TestAgentRefusals is the agent's refusal table end to end: real
// reference agents heartbeat through the local gateway, one pool of one
// node per case and one rollout per case (maxFailedNodes 0), the releases
// registered through releases.register and their binaries served by a
// TLS site. The registry verifies every manifest under the platform's pins
// at registration, so each broken condition is one the registry cannot
// see, constructed as it happens:
//
//   - bad signature: the node pins a key Q the platform does not; the
//     manifest carries the platform key's good signature and a signature
//     naming Q that does not verify (the registry ignores a signature by a
//     key it does not pin; the node finds the one naming its pin bad).
//   - unknown key: the node pins only a key Q2 the platform does not; the
//     release is signed by the platform key alone.
//   - expired: the statement expires 3 s after registration (more, when
//     a busy machine took longer to create the rollout); the rollout
//     is paused at once and resumed after the expiry (the registry and
//     rollouts.create refuse an expired release; a pass still targets one
//     whose expiry passed since, and the node is the last check).
//   - below floor: the node runs 9.0.0 at sequence 1,000,000 (installed by
//     hand, not registered); the rollout's release has a lower sequence, so
//     the node's floor (what it ran when taken) is above it.
//   - digest mismatch: the site serves other bytes of the same size at the
//     binary's URL than the statement's sha256 is of.
//   - size mismatch: the site serves more bytes than the statement's size.
//   - no binary for the platform: the node is linux/arm64, the release has
//     only linux/amd64, and it is the rollout's only node: rollouts.create
//     refuses the rollout (no_binary); the node is never told the release,
//     so no agent refusal happens; that is asserted instead. (A node without
//     a binary among nodes with one is skipped (no_binary) at enumeration.)
//
// Each failing case: the node reports the install failed with a reason
// naming the refusal (nodes.get), its rollout progress is failed with the
// install's reason, the rollout's failed count is 1 (and it aborts and
// rolls back nothing), and the agent still runs what it ran.
func TestAgentRefusals(t *testing.T) {
	t.Parallel() // its own tables: the real-time waits of the package overlap
	h := newRig(t, 5*time.Second)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	q, _ := dsse.GenerateKey(dsse.AlgEd25519)
	q2, _ := dsse.GenerateKey(dsse.AlgEd25519)
	stranger, _ := dsse.GenerateKey(dsse.AlgEd25519)
	pinsQ, err := release.NewPins([]crypto.PublicKey{q.Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	pinsQ2, _ := release.NewPins([]crypto.PublicKey{q2.Public()}, 1)
	relID, _ := release.KeyID(h.relKey.Public())
	qID, _ := release.KeyID(q.Public())

	// Releases, in sequence order.
	h.register(t, h.sign(t, h.statement("1.0.0", 1)))
	h.register(t, h.sign(t, h.statement("1.1.0", 2))) // good, linux/amd64 only
	badsig := dsseSignNaming(t, h.statement("1.2.0", 3), []string{relID, qID}, h.relKey, stranger)
	h.register(t, badsig)
	digest := h.statement("1.4.0", 5)
	tampered := bytes.ReplaceAll(binaryData("1.4.0"), []byte("x"), []byte("y"))
	h.site.put(strings.TrimPrefix(digest.Binaries[0].URL, h.site.srv.URL), tampered)
	h.register(t, h.sign(t, digest))
	size := h.statement("1.5.0", 6)
	h.site.put(strings.TrimPrefix(size.Binaries[0].URL, h.site.srv.URL), append(binaryData("1.5.0"), "more"...))
	h.register(t, h.sign(t, size))

	v1 := &api.Version{Version: "1.0.0", Sequence: 1}
	type tc struct {
		name, pool, version string
		platform            string
		running             *api.Version
		pins                *release.Pins
		want                string // in the agent's reason and the progress's
		fetched             bool   // refused after downloading
		skipped             bool   // skipped at enumeration (no_binary)
		paused              bool   // paused past the release's expiry
		node                *simNode
		rolloutID           string
	}
	cases := []*tc{
		{name: "bad signature", pool: "r-badsig", version: "1.2.0", pins: pinsQ, want: "bad_signature"},
		{name: "unknown key", pool: "r-unknown", version: "1.1.0", pins: pinsQ2, want: "unknown_key"},
		{name: "expired", pool: "r-expired", version: "1.3.0", want: "expired", paused: true},
		{name: "below floor", pool: "r-floor", version: "1.1.0", running: &api.Version{Version: "9.0.0", Sequence: 1_000_000},
			want: "below the floor 1000000"},
		{name: "digest mismatch", pool: "r-digest", version: "1.4.0", want: "sha256", fetched: true},
		{name: "size mismatch", pool: "r-size", version: "1.5.0", want: "bytes offered, the manifest says", fetched: true},
		{name: "no binary for the platform", pool: "r-platform", version: "1.1.0", platform: "linux/arm64", want: api.ReasonNoBinary, skipped: true},
	}
	for _, c := range cases {
		h.must(t, "pools.create", map[string]any{"tenantId": "acme", "poolId": c.pool, "resources": map[string]any{"gpu": 8}}, nil)
		if c.running == nil {
			c.running = v1
		}
		c.node = h.node(t, c.pool, "gpu-node-0", c.platform, c.running, c.pins)
		h.run(t, ctx, c.node, 1)
	}
	reconciling := reconcileEverySecond(ctx, h)
	defer func() { stop(); <-reconciling }()
	// Every node reported what it runs (the rollouts take that as their
	// previous release and floor).
	waitFor(t, 15*time.Second, func() bool {
		for _, c := range cases {
			if n := h.getNode(t, c.pool, c.node.id); n.Running == nil || n.State != api.Ready {
				return false
			}
		}
		return true
	})
	// The expiring release is registered last (its sequence above the
	// others'), and its rollout created and paused at once (below).
	slices.SortStableFunc(cases, func(a, b *tc) int { return -cmp.Compare(btoi(a.paused), btoi(b.paused)) })
	var expires time.Time
	for _, c := range cases {
		if c.paused {
			c.version, c.rolloutID, expires = h.expiring(t, ctx, c.pool)
		}
	}
	// A rollout none of whose nodes has a binary for its platform is
	// refused at create (INVALID_INPUT no_binary), its node never told.
	kept := cases[:0]
	for _, c := range cases {
		if !c.skipped {
			kept = append(kept, c)
			continue
		}
		err := h.post(ctx, "rollouts.create", map[string]any{"tenantId": platformTenant, "version": c.version, "pools": []string{c.pool},
			"waves": []map[string]any{{"percent": 100}}}, nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP 400") || !strings.Contains(err.Error(), `"reason":"`+api.ReasonNoBinary+`"`) {
			t.Errorf("%s: rollouts.create: %v, want INVALID_INPUT %s", c.name, err, api.ReasonNoBinary)
		}
		if n := h.getNode(t, c.pool, c.node.id); n.Install != nil || len(c.node.starter.log()) != 0 {
			t.Errorf("%s: a node the release has no binary for was told to install it: install %+v", c.name, n.Install)
		}
	}
	cases = kept
	for _, c := range cases {
		if c.rolloutID != "" {
			continue // the expiring one's, created with its release
		}
		var out struct{ Rollout api.Rollout }
		h.must(t, "rollouts.create", map[string]any{"tenantId": platformTenant, "version": c.version, "pools": []string{c.pool},
			"waves": []map[string]any{{"percent": 100}}, "maxUnavailable": 1, "maxFailedNodes": 0, "bakeSeconds": 0}, &out)
		c.rolloutID = out.Rollout.RolloutID
	}
	time.Sleep(time.Until(expires) + 500*time.Millisecond) // real time passes for the expiry: pacing, not synchronization
	for _, c := range cases {
		if c.paused {
			h.must(t, "rollouts.resume", map[string]any{"tenantId": platformTenant, "rolloutId": c.rolloutID}, nil)
		}
	}
	// Each rollout ends (aborted at its failure, nothing to roll back) or,
	// no_binary, completes with its node skipped.
	waitFor(t, 45*time.Second, func() bool {
		for _, c := range cases {
			r, err := h.getRollout(ctx, c.rolloutID)
			if err != nil || !r.State.Terminal() {
				return false
			}
		}
		return true
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := h.getRollout(ctx, c.rolloutID)
			ps := h.rolloutNodes(t, c.rolloutID)
			if len(ps) != 1 {
				t.Fatalf("rollout %s: %d nodes", c.rolloutID, len(ps))
			}
			p := ps[0]
			n := h.getNode(t, c.pool, c.node.id)
			if c.skipped {
				if p.Step != api.Skipped || p.Reason != api.ReasonNoBinary || r.Counts.Skipped != 1 || r.Counts.Failed != 0 || r.State != api.Completed {
					t.Errorf("progress %+v, rollout %s counts %+v", p, r.State, r.Counts)
				}
				if n.Install != nil || len(c.node.starter.log()) != 0 {
					t.Errorf("a node the release has no binary for was told to install it: install %+v, starts %v", n.Install, c.node.starter.log())
				}
			} else {
				if n.Install == nil || n.Install.State != api.InstallFailed || n.Install.Version != c.version ||
					n.Install.Reason == nil || !strings.Contains(*n.Install.Reason, c.want) {
					t.Errorf("the node's report: install %s", show(n.Install))
				}
				if p.Step != api.Failed || !strings.HasPrefix(p.Reason, rollout.ReasonInstall+": ") || !strings.Contains(p.Reason, c.want) {
					t.Errorf("progress %s: %q, want failed naming %q", p.Step, p.Reason, c.want)
				}
				if r.Counts.Failed != 1 || r.State != api.RolledBack || r.Reason != rollout.ReasonFailures {
					t.Errorf("rollout %s (%s), counts %+v", r.State, r.Reason, r.Counts)
				}
				t.Logf("%s: node reports %q; progress %s %q; rollout %s (%s), failed %d", c.name, *n.Install.Reason, p.Step, p.Reason, r.State, r.Reason, r.Counts.Failed)
			}
			if got := c.node.agent.Running(); got == nil || *got != *c.running {
				t.Errorf("the agent runs %+v, want %+v", got, c.running)
			}
			if fetched := h.site.downloads(strings.TrimPrefix(binaryURL(c.version, h), h.site.srv.URL)) > 0; !c.skipped && fetched != c.fetched {
				t.Errorf("downloaded: %v, want %v", fetched, c.fetched)
			}
		})
	}
}

// dsseSignNaming signs st by signers, each signature naming keyIDs[i].
func dsseSignNaming(t *testing.T, st release.Statement, keyIDs []string, signers ...crypto.Signer) []byte {
	t.Helper()
	out, err := release.SignEnvelopeNaming(payloadOf(st), keyIDs, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// binaryURL is the site's URL of version's linux/amd64 binary.
func binaryURL(version string, h *rig) string {
	return h.site.srv.URL + "/bcd-" + version + "-linux-amd64"
}

func show(i *api.Install) string {
	if i == nil {
		return "none"
	}
	r := ""
	if i.Reason != nil {
		r = *i.Reason
	}
	return i.Version + " " + i.State + " " + r
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// expiring registers c's release to expire 3 s later, then creates c's
// rollout and pauses it (to resume past the expiry) and returns the
// expiry. The registry and rollouts.create refuse an expired release, so
// on a machine too busy to do both within the margin the release is
// registered again as the next patch version with twice the margin: the
// refusal the test is after comes from the node either way.
func (h *rig) expiring(t *testing.T, ctx context.Context, pool string) (version, rolloutID string, expires time.Time) {
	t.Helper()
	margin := 3 * time.Second
	for attempt := range 6 {
		version = fmt.Sprintf("1.3.%d", attempt)
		expires = time.Now().Add(margin)
		st := h.statement(version, int64(7+attempt))
		st.Expires = &expires
		margin *= 2
		var out struct{ Rollout api.Rollout }
		err := h.post(ctx, "releases.register", map[string]any{"tenantId": platformTenant, "manifest": json.RawMessage(h.sign(t, st))}, nil)
		if err == nil {
			err = h.post(ctx, "rollouts.create", map[string]any{"tenantId": platformTenant, "version": version, "pools": []string{pool},
				"waves": []map[string]any{{"percent": 100}}, "maxUnavailable": 1, "maxFailedNodes": 0, "bakeSeconds": 0}, &out)
		}
		if err != nil && strings.Contains(err.Error(), "expired") && time.Now().After(expires) {
			t.Logf("release %s expired before its rollout was created (%v): again with %s", version, err, margin)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		h.must(t, "rollouts.pause", map[string]any{"tenantId": platformTenant, "rolloutId": out.Rollout.RolloutID, "reason": "until the release expires"}, nil)
		return version, out.Rollout.RolloutID, expires
	}
	t.Fatal("the expiring release expired before its rollout was created six times")
	return "", "", time.Time{}
}
