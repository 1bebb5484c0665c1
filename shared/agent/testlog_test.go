package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"sync"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
)

// testOrigin names the fixture's release log.
const testOrigin = "test.bettercompute.local/releases"

// testLog is a release log in memory, as the control plane keeps one in
// its table (the same tlog tree and checkpoints, signed by an Ed25519 log
// key): what the fake API's answers carry as desired.release.log.
type testLog struct {
	mu      sync.Mutex
	signer  *release.LogSigner
	entries [][]byte
	hashes  []tlog.Hash // by stored hash index
}

func newTestLog(t testing.TB) *testLog {
	t.Helper()
	return &testLog{signer: newLogSigner(t, testOrigin)}
}

// newLogSigner is a fresh Ed25519 log key of origin.
func newLogSigner(t testing.TB, origin string) *release.LogSigner {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := release.NewLogSigner(origin, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (l *testLog) key() *release.LogKey { k := l.signer.Key(); return &k }

// ReadHashes implements release.LogHashes (the caller holds mu).
func (l *testLog) ReadHashes(_ context.Context, ix []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ix))
	for i, x := range ix {
		out[i] = l.hashes[x]
	}
	return out, nil
}

// add appends entry unless logged already; its index.
func (l *testLog) add(t testing.TB, entry []byte) int64 {
	if i := slices.IndexFunc(l.entries, func(e []byte) bool { return string(e) == string(entry) }); i >= 0 {
		return int64(i)
	}
	n := int64(len(l.entries))
	hs, err := release.StoredHashes(context.Background(), l, n, release.LeafHash(entry))
	if err != nil {
		t.Fatal(err)
	}
	l.hashes = append(l.hashes, hs...)
	l.entries = append(l.entries, entry)
	return n
}

// checkpoint signs the tree of the first size entries.
func (l *testLog) checkpoint(t testing.TB, size int64) string {
	root, err := release.TreeHash(context.Background(), l, size)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := l.signer.Sign(release.Checkpoint{Origin: testOrigin, Size: size, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// evidence logs entry (if new) and proves it in the whole log, with the
// consistency proof from size from.
func (l *testLog) evidence(t testing.TB, entry []byte, from int64) *api.DesiredLog {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.add(t, entry)
	n := int64(len(l.entries))
	ctx := context.Background()
	incl, err := release.ProveInclusion(ctx, l, n, i)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := release.ProveConsistency(ctx, l, min(from, n), n)
	if err != nil {
		t.Fatal(err)
	}
	return &api.DesiredLog{Index: i, Checkpoint: l.checkpoint(t, n), Inclusion: release.EncodeHashes(incl),
		Consistency: release.EncodeHashes(cons)}
}

// payloadOf is a DSSE envelope's payload.
func payloadOf(t testing.TB, manifest []byte) []byte {
	t.Helper()
	p, err := dsse.Payload(manifest)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// logged is d told with the fixture log's evidence, from size from.
func (f *fixture) logged(t testing.TB, d api.DesiredRelease, from int64) api.DesiredRelease {
	t.Helper()
	d.Log = f.log.evidence(t, payloadOf(t, d.Manifest), from)
	return d
}

// told is d as the control plane tells it in the answer to rep: with the
// log's evidence from the size rep witnessed.
func (f *fixture) told(t testing.TB, d api.DesiredRelease, rep api.Report) *api.DesiredRelease {
	t.Helper()
	var from int64
	if rep.Log != nil {
		from = rep.Log.Size
	}
	out := f.logged(t, d, from)
	return &out
}

// install installs d told as the control plane would, from the checkpoint
// the agent stored.
func (e *installEnv) install(t testing.TB, d api.DesiredRelease, floor int64) error {
	t.Helper()
	var from int64
	if c := e.agent.Checkpoint(); c != nil {
		from = c.Size
	}
	return e.agent.Install(context.Background(), e.logged(t, d, from), floor)
}
