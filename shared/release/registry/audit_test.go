package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

// setLastHash overwrites the last stored hash of entry i (the top of the
// subtree its append completed) with h, straight in the table — as someone
// holding the table could — and returns the hash it replaced. The last
// entry's last hash is always one the tree of the log's size is made of.
func setLastHash(t *testing.T, l *registry.Log, i int64, h tlog.Hash) tlog.Hash {
	t.Helper()
	ctx := context.Background()
	k := map[string]types.AttributeValue{schema.AttrPK: &types.AttributeValueMemberS{Value: "RLOG"},
		schema.AttrSK: &types.AttributeValueMemberS{Value: fmt.Sprintf("E#%016d", i)}}
	res, err := db(l).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table(l)), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	hs := res.Item["hs"].(*types.AttributeValueMemberB).Value // the hashes, concatenated
	var old tlog.Hash
	last := hs[len(hs)-tlog.HashSize:]
	copy(old[:], last)
	copy(last, h[:])
	if _, err := db(l).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table(l)), Item: res.Item}); err != nil {
		t.Fatal(err)
	}
	return old
}

// putCheckpoint stores a checkpoint item of size n holding note, straight
// in the table.
func putCheckpoint(t *testing.T, l *registry.Log, n int64, note []byte) {
	t.Helper()
	_, err := db(l).PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table(l)), Item: map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: "RLOG"}, schema.AttrSK: &types.AttributeValueMemberS{Value: "CP"},
		"n": &types.AttributeValueMemberN{Value: fmt.Sprint(n)}, "note": &types.AttributeValueMemberS{Value: string(note)}}})
	if err != nil {
		t.Fatal(err)
	}
}

// finding is err's LogAuditError, failing t when it is not one.
func finding(t *testing.T, err error) *registry.LogAuditError {
	t.Helper()
	var f *registry.LogAuditError
	if !errors.As(err, &f) || !errors.Is(err, registry.ErrLogAudit) {
		t.Fatalf("want an audit finding, got %v", err)
	}
	return f
}

// The audit holds the stored tree to the signed checkpoint:
// an empty log gets its size-0 checkpoint; a stored hash changed under the
// checkpoint, a validly signed checkpoint of another root, one of another
// key and one past the head are findings (ErrLogAudit); a table that cannot
// be read is a dependency's error, not a finding.
func TestReleaseLogAudit(t *testing.T) {
	ctx, l := context.Background(), newLog(t)
	rs := &registry.Service{Store: &releasedb.Releases{DB: db(l), Table: table(l)}, Log: l}
	if n, err := l.Audit(ctx); n != 0 || err != nil {
		t.Fatalf("audit of a log never signed: %d %v", n, err)
	}
	if n, err := rs.Audit(ctx); n != 0 || err != nil {
		t.Fatalf("audit of the empty log: %d %v", n, err)
	}
	note, size, err := l.Checkpoint(ctx)
	if err != nil || note == "" || size != 0 {
		t.Fatalf("the empty log's checkpoint: %q %d %v", note, size, err)
	}
	if c, err := l.Signer.Key().Open([]byte(note)); err != nil || c.Size != 0 {
		t.Fatalf("the empty log's checkpoint does not open: %+v %v", c, err)
	}

	appendAll(t, l, 0, 3)
	if n, err := rs.Audit(ctx); n != 3 || err != nil {
		t.Fatalf("audit after 3 appends: %d %v", n, err)
	}
	note, _, _ = l.Checkpoint(ctx)
	signed, err := l.Signer.Key().Open([]byte(note))
	if err != nil || signed.Root != mth(payloads(3)) {
		t.Fatalf("checkpoint %+v %v", signed, err)
	}

	t.Run("a stored hash changed", func(t *testing.T) {
		old := setLastHash(t, l, 2, tlog.Hash{0xbc})
		n, err := rs.Audit(ctx) // the checkpoint covers the head: nothing is signed over the change
		f := finding(t, err)
		tree, terr := release.TreeHash(ctx, l, 3)
		if terr != nil || tree == signed.Root {
			t.Fatalf("the change did not change the tree: %v", terr)
		}
		if n != 3 || f.Size != 3 || f.Signed == nil || *f.Signed != signed.Root || f.Tree == nil || *f.Tree != tree {
			t.Errorf("finding %+v (size %d), want size 3, signed %s, tree %s", f, n, signed.Root, tree)
		}
		if size, sr, tr := f.AuditFinding(); size != 3 || sr != signed.Root.String() || tr != tree.String() {
			t.Errorf("AuditFinding %d %s %s", size, sr, tr)
		}
		setLastHash(t, l, 2, old)
		if _, err := rs.Audit(ctx); err != nil {
			t.Fatalf("the hash put back: %v", err)
		}
	})
	t.Run("a checkpoint of another root, validly signed", func(t *testing.T) {
		wrong := tlog.Hash{0xbc}
		forged, err := l.Signer.Sign(release.Checkpoint{Origin: l.Signer.Key().Name, Size: 3, Root: wrong})
		if err != nil {
			t.Fatal(err)
		}
		putCheckpoint(t, l, 3, forged)
		f := finding(t, func() error { _, err := rs.Audit(ctx); return err }())
		if f.Size != 3 || f.Signed == nil || *f.Signed != wrong || f.Tree == nil || *f.Tree != signed.Root {
			t.Errorf("finding %+v", f)
		}
		putCheckpoint(t, l, 3, []byte(note))
	})
	t.Run("a checkpoint of another key", func(t *testing.T) {
		other := devstack.LogSigner(t, devstack.Shared(t), logOrigin)
		forged, err := other.Sign(signed)
		if err != nil {
			t.Fatal(err)
		}
		putCheckpoint(t, l, 3, forged)
		if f := finding(t, func() error { _, err := l.Audit(ctx); return err }()); f.Size != 3 || f.Signed != nil || f.Tree != nil {
			t.Errorf("finding %+v", f)
		}
		putCheckpoint(t, l, 3, []byte(note))
	})
	t.Run("a checkpoint past the head", func(t *testing.T) {
		ahead, err := l.Signer.Sign(release.Checkpoint{Origin: l.Signer.Key().Name, Size: 4, Root: signed.Root})
		if err != nil {
			t.Fatal(err)
		}
		putCheckpoint(t, l, 4, ahead)
		if f := finding(t, func() error { _, err := rs.Audit(ctx); return err }()); f.Size != 4 {
			t.Errorf("finding %+v", f)
		}
		putCheckpoint(t, l, 3, []byte(note))
	})
	if n, err := rs.Audit(ctx); n != 3 || err != nil {
		t.Fatalf("the log restored: %d %v", n, err)
	}
	gone := &registry.Log{Store: &releasedb.Log{DB: db(l), Table: table(l) + "-missing"}, Signer: l.Signer}
	if _, err := gone.Audit(ctx); err == nil || errors.Is(err, registry.ErrLogAudit) {
		t.Errorf("a table that cannot be read: %v, want a dependency's error", err)
	}
}
