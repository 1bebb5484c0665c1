package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// logLines keeps every line the app logs (JSON), for a test to read.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// with are the lines whose msg is msg.
func (l *logLines) with(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(l.buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// logHarness is a harness whose every log line (debug up) lands in lines;
// it serves no release method (the reconciler needs none, nor pins).
func logHarness(t *testing.T) (*harness, *logLines) {
	t.Helper()
	lines := &logLines{}
	h := newHarness(t, setup{module: "capacity", options: []app.Option{
		app.WithLogger(slog.New(slog.NewJSONHandler(lines, &slog.HandlerOptions{Level: slog.LevelDebug})))}})
	return h, lines
}

// registrations is the releases store releases.register writes through,
// on the harness's table, log key and clock: where a test registers, and
// crashes a registration.
func registrations(t *testing.T, h *harness) *registry.Service {
	t.Helper()
	log, err := rolloutapp.ReleaseLog(context.Background(), h.app.App)
	if err != nil {
		t.Fatal(err)
	}
	return &registry.Service{Store: &releasedb.Releases{DB: h.app.DB, Table: h.app.Config.Table}, Log: log, Now: h.clock.Now}
}

// logRelease is a release of that version and sequence as a verified
// registration hands it to the store (its payload is the log entry).
func logRelease(version string, seq int64) release.Release {
	return release.Release{Version: version, Sequence: seq, ManifestDigest: fmt.Sprintf("sha256:%064d", seq),
		Payload:      fmt.Appendf(nil, `{"version":%q,"sequence":%d}`, version, seq),
		Binaries:     []release.Binary{{Platform: "linux/amd64", URL: "https://example.com/bcd", SHA256: fmt.Sprintf("%064d", 0), Size: 1}},
		Signers:      []string{"k1"},
		RegisteredAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		RegisteredBy: rollout.Audit{TenantID: "platform", Principal: "admin"}}
}

// pass runs one reconciler pass, as the reconciler's Lambda builds it.
func pass(t *testing.T, h *harness) reconcile.PassResult {
	t.Helper()
	res, err := h.app.Reconciler().Pass(context.Background())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return res
}

// covered checks the stored checkpoint: it opens under the log key, covers
// at least n entries, and its root is the stored tree's at its size.
func covered(t *testing.T, l *registry.Log, n int64) release.Checkpoint {
	t.Helper()
	ctx := context.Background()
	note, size, err := l.Checkpoint(ctx)
	if err != nil || note == "" {
		t.Fatalf("no checkpoint: %v", err)
	}
	c, err := l.Signer.Key().Open([]byte(note))
	if err != nil || c.Size != size || c.Size < n {
		t.Fatalf("checkpoint %+v (item size %d, want ≥ %d): %v", c, size, n, err)
	}
	root, err := release.TreeHash(ctx, l, c.Size)
	if err != nil || root != c.Root {
		t.Fatalf("the checkpoint's root is not the tree's at %d: %v", c.Size, err)
	}
	return c
}

// A registration that crashed after its release item claimed the head is
// finished by the reconciler's pass once it is stale (not while it may
// still be running): the release is logged, a signed checkpoint covers it,
// it is recorded, and the pass counts it in LogFinished.
func TestReconcilerFinishesACrashedRegistration(t *testing.T) {
	ctx := context.Background()
	errCrash := errors.New("crash")
	for _, point := range []string{registry.FaultReleaseClaimed, registry.FaultReleaseMarked,
		registry.FaultLogEntry, registry.FaultLogHead, registry.FaultLogCheckpoint} {
		t.Run(point, func(t *testing.T) {
			h, _ := logHarness(t)
			rs := registrations(t, h)
			if _, _, err := rs.RegisterVerified(ctx, logRelease("1.0.0", 1)); err != nil {
				t.Fatal(err)
			}
			rs.Faults = func(p string) error {
				if p == point {
					return errCrash
				}
				return nil
			}
			rs.Log.Faults = rs.Faults
			if _, _, err := rs.RegisterVerified(ctx, logRelease("2.0.0", 2)); !errors.Is(err, errCrash) {
				t.Fatalf("want the crash at %s, got %v", point, err)
			}
			rs.Faults, rs.Log.Faults = nil, nil

			if res := pass(t, h); res.Errors != 0 || res.LogAuditFailed != 0 {
				t.Fatalf("a pass while the registration may still run: %+v", res)
			}
			if _, err := rs.Get(ctx, "2.0.0"); !errors.Is(err, rollout.ErrNotFound) {
				t.Fatalf("2.0.0 is recorded before its registration went stale: %v", err)
			}
			h.clock.Advance(registry.PendingStale)
			res := pass(t, h)
			if res.LogFinished != 1 || res.Errors != 0 || res.LogAuditFailed != 0 || res.LogSize != 2 {
				t.Fatalf("the pass after it went stale: %+v", res)
			}
			got, err := rs.Get(ctx, "2.0.0")
			if err != nil || got.Log == nil || got.Log.Index != 1 {
				t.Fatalf("2.0.0 after the pass: %+v %v", got, err)
			}
			if c := covered(t, rs.Log, 2); c.Size != 2 {
				t.Errorf("checkpoint of size %d, want 2", c.Size)
			}
			if rels, _, err := rs.List(ctx, 0, nil); err != nil || len(rels) != 2 {
				t.Errorf("listed %d releases (%v), want 2", len(rels), err)
			}
			// Nothing left to finish: the next pass finishes nothing.
			if res := pass(t, h); res.LogFinished != 0 || res.Errors != 0 || res.LogAuditFailed != 0 || res.LogSize != 2 {
				t.Errorf("the pass after: %+v", res)
			}
		})
	}
}

// A new deployment's first pass signs the empty log's size-0 checkpoint
// (what releases.log answers before the first registration).
func TestReconcilerSignsTheEmptyLog(t *testing.T) {
	h, _ := logHarness(t)
	l := registrations(t, h).Log
	if note, _, err := l.Checkpoint(context.Background()); err != nil || note != "" {
		t.Fatalf("a new table has a checkpoint: %q %v", note, err)
	}
	if res := pass(t, h); res.Errors != 0 || res.LogAuditFailed != 0 || res.LogFinished != 0 || res.LogSize != 0 {
		t.Fatalf("the first pass: %+v", res)
	}
	if c := covered(t, l, 0); c.Size != 0 || c.Origin != h.app.Config.ReleaseLogOrigin {
		t.Errorf("the empty log's checkpoint %+v", c)
	}
}

// The pass's audit catches a stored tree hash changed in the table under
// the signed checkpoint: LogAuditFailed = 1 in the result and in the
// published summary, and an ERROR line naming the size and both roots —
// the checkpoint's (as signed) and the tree's (as now stored).
func TestReconcilerAuditCatchesATamperedHash(t *testing.T) {
	ctx := context.Background()
	h, lines := logHarness(t)
	rs := registrations(t, h)
	for i := range 3 {
		if _, _, err := rs.RegisterVerified(ctx, logRelease(fmt.Sprintf("1.%d.0", i), int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if res := pass(t, h); res.LogAuditFailed != 0 || res.Errors != 0 || res.LogSize != 3 {
		t.Fatalf("the pass before the change: %+v", res)
	}
	if got := lines.with(t, "release log audit failed"); len(got) != 0 {
		t.Fatalf("an audit failed before the change: %v", got)
	}
	signed := covered(t, rs.Log, 3)

	// Entry 2 stored one hash, its leaf: the tree of size 3 is made of it
	// (releasedb's item layout: RLOG / E#<index>, hs).
	k := map[string]types.AttributeValue{schema.AttrPK: &types.AttributeValueMemberS{Value: "RLOG"},
		schema.AttrSK: &types.AttributeValueMemberS{Value: fmt.Sprintf("E#%016d", 2)}}
	item, err := h.app.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(h.app.Config.Table), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	forged := release.LeafHash([]byte(`{"version":"1.2.0","sequence":99}`))
	item.Item["hs"] = &types.AttributeValueMemberB{Value: forged[:]}
	if _, err := h.app.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(h.app.Config.Table), Item: item.Item}); err != nil {
		t.Fatal(err)
	}
	tree, err := release.TreeHash(ctx, rs.Log, 3)
	if err != nil || tree == signed.Root {
		t.Fatalf("the change left the root: %v", err)
	}

	res := pass(t, h)
	if res.LogAuditFailed != 1 || res.Errors != 0 || res.LogSize != 3 {
		t.Fatalf("the pass after the change: %+v", res)
	}
	checkErrorLine := func(want int) {
		t.Helper()
		got := lines.with(t, "release log audit failed")
		if len(got) != want {
			t.Fatalf("%d audit failure lines, want %d: %v", len(got), want, got)
		}
		l := got[want-1]
		if l["level"] != "ERROR" || l["size"] != 3.0 || l["checkpointRoot"] != signed.Root.String() || l["treeRoot"] != tree.String() {
			t.Errorf("audit failure line %v, want size 3, checkpointRoot %s, treeRoot %s", l, signed.Root, tree)
		}
	}
	checkErrorLine(1)
	// The Lambda's pass publishes it (the alarm's metric), at warning level.
	if err := h.app.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	checkErrorLine(2)
	sums := lines.with(t, "reconcile pass")
	if len(sums) == 0 {
		t.Fatal("no pass summary")
	}
	sum := sums[len(sums)-1]
	if sum[reconcile.MetricLogAuditFailed] != 1.0 || sum["level"] != "WARN" || sum["_aws"] == nil {
		t.Errorf("pass summary %v, want %s 1 at WARN, with its EMF directive", sum, reconcile.MetricLogAuditFailed)
	}
	// No checkpoint was signed over the changed tree.
	note, _, err := rs.Log.Checkpoint(ctx)
	if c, oerr := rs.Log.Signer.Key().Open([]byte(note)); err != nil || oerr != nil || c != signed {
		t.Errorf("checkpoint after the audits %+v (%v, %v), want the one signed before the change", c, err, oerr)
	}
}
