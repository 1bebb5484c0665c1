package release

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	tlogfmt "github.com/transparency-dev/formats/log"
	tnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/tlog"
)

// memHashes is a tree's stored hashes in memory: the tree logic is what is
// tested here; the table's store has its own tests (shared/dynamo).
type memHashes struct{ h []tlog.Hash }

func (m *memHashes) ReadHashes(_ context.Context, ix []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ix))
	for i, x := range ix {
		if x < 0 || x >= int64(len(m.h)) {
			return nil, fmt.Errorf("no stored hash %d (%d stored)", x, len(m.h))
		}
		out[i] = m.h[x]
	}
	return out, nil
}

func entry(i int) []byte { return fmt.Appendf(nil, `{"version":"1.%d.0","sequence":%d}`, i, i+1) }

// grow appends entries [len, n) as the store does: each append's hashes
// read only what earlier appends stored.
func grow(t *testing.T, m *memHashes, from, n int) {
	t.Helper()
	for i := from; i < n; i++ {
		if got := int64(len(m.h)); got != tlog.StoredHashIndex(0, int64(i)) {
			t.Fatalf("before entry %d: %d hashes stored, want %d", i, got, tlog.StoredHashIndex(0, int64(i)))
		}
		hs, err := StoredHashes(context.Background(), m, int64(i), LeafHash(entry(i)))
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) > 64 {
			t.Fatalf("entry %d stores %d hashes", i, len(hs))
		}
		m.h = append(m.h, hs...)
	}
}

func slices(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// Every inclusion and consistency proof of trees up to 37 entries verifies
// with an independent implementation (transparency-dev/merkle, the RFC
// 6962 hasher), and a root computed by it matches ours.
func TestProofsVerifyIndependently(t *testing.T) {
	ctx, m, hasher := context.Background(), &memHashes{}, rfc6962.DefaultHasher
	const n = 37
	grow(t, m, 0, n)
	roots := make([]tlog.Hash, n+1)
	for size := int64(1); size <= n; size++ {
		root, err := TreeHash(ctx, m, size)
		if err != nil {
			t.Fatal(err)
		}
		roots[size] = root
		for i := int64(0); i < size; i++ {
			p, err := ProveInclusion(ctx, m, size, i)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyInclusion(hasher, uint64(i), uint64(size), hasher.HashLeaf(entry(int(i))), slices(p), root[:]); err != nil {
				t.Fatalf("entry %d in size %d: %v", i, size, err)
			}
		}
	}
	for from := int64(1); from <= n; from++ {
		for to := from; to <= n; to++ {
			p, err := ProveConsistency(ctx, m, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyConsistency(hasher, uint64(from), uint64(to), slices(p), roots[from][:], roots[to][:]); err != nil {
				t.Fatalf("consistency %d → %d: %v", from, to, err)
			}
		}
	}
	if _, err := ProveInclusion(ctx, m, 5, 5); err == nil {
		t.Error("an inclusion proof for an entry beyond the size")
	}
	if _, err := ProveConsistency(ctx, m, 6, 5); err == nil {
		t.Error("a consistency proof to a smaller size")
	}
}

// Owner names, for every stored hash, the append that stored it.
func TestOwner(t *testing.T) {
	m := &memHashes{}
	const n = 70
	for i := 0; i < n; i++ {
		start := int64(len(m.h))
		grow(t, m, i, i+1)
		for x := start; x < int64(len(m.h)); x++ {
			if e, pos := Owner(x); e != int64(i) || pos != int(x-start) {
				t.Fatalf("stored hash %d: Owner = (%d, %d), want (%d, %d)", x, e, pos, i, x-start)
			}
		}
	}
}

func ecdsaKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const origin = "bettercompute.example/releases"

// A checkpoint signed with an ECDSA P-256 key (what KMS and local-kms sign
// with) opens with transparency-dev's note verifier for signature type
// 0x02 and parses with its checkpoint parser; an Ed25519 one with
// golang.org/x/mod's own verifier.
func TestCheckpointsVerifyIndependently(t *testing.T) {
	c := Checkpoint{Origin: origin, Size: 42, Root: tlog.RecordHash([]byte("root"))}
	s, err := NewLogSigner(origin, ecdsaKey(t))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tnote.NewECDSAVerifier(s.Key().VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, err := tlogfmt.ParseCheckpoint(signed, origin, v)
	if err != nil {
		t.Fatalf("transparency-dev: %v\n%s", err, signed)
	}
	if got.Size != 42 || !bytes.Equal(got.Hash, c.Root[:]) || got.Origin != origin {
		t.Errorf("transparency-dev read %+v, signed %+v", got, c)
	}
	if back, err := s.Key().Open(signed); err != nil || back != c {
		t.Errorf("Open = %+v, %v", back, err)
	}
	pinned, err := ParseVerifierKey(s.Key().VerifierKey())
	if err != nil || pinned.ID != s.Key().ID {
		t.Fatalf("ParseVerifierKey: %+v %v", pinned, err)
	}

	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	es, err := NewLogSigner(origin, edPriv)
	if err != nil {
		t.Fatal(err)
	}
	esigned, err := es.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tnote.NewVerifier(es.Key().VerifierKey()) // x/mod's Ed25519 verifier
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := tlogfmt.ParseCheckpoint(esigned, origin, ev); err != nil {
		t.Errorf("Ed25519 checkpoint: %v", err)
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	good := Checkpoint{Origin: origin, Size: 3, Root: tlog.RecordHash(nil)}.Text()
	if _, err := ParseCheckpoint(good); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"no final newline": strings.TrimSuffix(string(good), "\n"),
		"extension line":   string(good) + "ext\n",
		"signed size":      strings.Replace(string(good), "\n3\n", "\n+3\n", 1),
		"leading zero":     strings.Replace(string(good), "\n3\n", "\n03\n", 1),
		"negative":         strings.Replace(string(good), "\n3\n", "\n-3\n", 1),
		"short root":       origin + "\n3\nAAAA\n",
		"empty origin":     strings.Replace(string(good), origin, "", 1),
	} {
		if _, err := ParseCheckpoint([]byte(text)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	k := must(NewLogSigner(origin, ecdsaKey(t))).Key().VerifierKey()
	for name, vkey := range map[string]string{
		"wrong id":   strings.Replace(k, k[len(origin)+1:len(origin)+9], "00000000", 1),
		"no id":      origin + "+" + k[len(origin)+10:],
		"bad base64": origin + "+00000000+!!",
		"type 0x03":  origin + "+00000000+AwAA",
	} {
		if _, err := ParseVerifierKey(vkey); err == nil {
			t.Errorf("%s: ParseVerifierKey accepted %q", name, vkey)
		}
	}
	if _, err := NewLogKey("has space", ecdsaKey(t).Public()); err == nil {
		t.Error("an origin with a space")
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := NewLogKey(origin, p384.Public()); err == nil {
		t.Error("a P-384 log key")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// logAt is a signed checkpoint of the tree of size, with the evidence for
// entry index from a node that stored the checkpoint of size from.
func logAt(t *testing.T, s *LogSigner, m *memHashes, size, index, from int64) Evidence {
	t.Helper()
	ctx := context.Background()
	root, err := TreeHash(ctx, m, size)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := s.Sign(Checkpoint{Origin: origin, Size: size, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	incl, err := ProveInclusion(ctx, m, size, index)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ProveConsistency(ctx, m, from, size)
	if err != nil {
		t.Fatal(err)
	}
	return Evidence{Checkpoint: signed, Index: index, Inclusion: incl, Consistency: cons}
}

func checkpointOf(t *testing.T, m *memHashes, size int64) *Checkpoint {
	t.Helper()
	root, err := TreeHash(context.Background(), m, size)
	if err != nil {
		t.Fatal(err)
	}
	return &Checkpoint{Origin: origin, Size: size, Root: root}
}

// The refusal table (issue 24): each way a node can be lied to is refused
// with its reason; the honest case passes and returns the checkpoint to
// store.
func TestVerifyRefusals(t *testing.T) {
	s := must(NewLogSigner(origin, ecdsaKey(t)))
	other := must(NewLogSigner(origin, ecdsaKey(t)))
	otherOrigin := must(NewLogSigner("elsewhere.example/releases", ecdsaKey(t)))
	m := &memHashes{}
	grow(t, m, 0, 20)
	stored := checkpointOf(t, m, 12)

	// A fork: the same first 8 entries, then a different 9th onwards (a
	// fork after the node's 12 would be invisible to it: its view is
	// consistent; another node's witness report shows it).
	fork := &memHashes{h: append([]tlog.Hash(nil), m.h[:tlog.StoredHashIndex(0, 8)]...)}
	for i := 8; i < 20; i++ {
		hs := must(StoredHashes(context.Background(), fork, int64(i), LeafHash(append(entry(i), '!'))))
		fork.h = append(fork.h, hs...)
	}
	// A rewritten past: entry 3 changed, everything after recomputed.
	rewritten := &memHashes{h: append([]tlog.Hash(nil), m.h[:tlog.StoredHashIndex(0, 3)]...)}
	for i := 3; i < 20; i++ {
		e := entry(i)
		if i == 3 {
			e = []byte(`{"version":"evil"}`)
		}
		rewritten.h = append(rewritten.h, must(StoredHashes(context.Background(), rewritten, int64(i), LeafHash(e)))...)
	}

	honest := logAt(t, s, m, 18, 15, 12)
	if c, err := VerifyEvidence(s.Key(), stored, honest, entry(15)); err != nil || c.Size != 18 {
		t.Fatalf("honest evidence: %+v %v", c, err)
	}
	if _, err := VerifyEvidence(s.Key(), nil, honest, entry(15)); err != nil {
		t.Fatalf("honest evidence to a node with no checkpoint yet: %v", err)
	}

	forged := honest
	forged.Checkpoint = logAt(t, other, m, 18, 15, 12).Checkpoint
	wrongOrigin := honest
	wrongOrigin.Checkpoint = must(otherOrigin.Sign(Checkpoint{Origin: "elsewhere.example/releases", Size: 18, Root: checkpointOf(t, m, 18).Root}))
	tampered := honest
	tampered.Checkpoint = bytes.Replace(honest.Checkpoint, []byte("\n18\n"), []byte("\n19\n"), 1)
	otherSize := honest
	otherSize.Inclusion = logAt(t, s, m, 17, 15, 12).Inclusion
	replayed := logAt(t, s, m, 10, 5, 0)
	forked := logAt(t, s, fork, 18, 15, 12)
	sameSizeFork := logAt(t, s, fork, 13, 12, 0)

	for _, c := range []struct {
		name   string
		stored *Checkpoint
		ev     Evidence
		entry  []byte
		want   error
	}{
		{"forged checkpoint (another key)", stored, forged, entry(15), ErrCheckpointSignature},
		{"wrong origin", stored, wrongOrigin, entry(15), ErrCheckpointSignature},
		{"checkpoint text changed after signing", stored, tampered, entry(15), ErrCheckpointSignature},
		{"truncated log (replayed older checkpoint)", stored, replayed, entry(5), ErrStale},
		{"forked log", stored, forked, append(entry(15), '!'), ErrConsistency},
		{"fork at the stored size", checkpointOf(t, m, 13), sameSizeFork, append(entry(12), '!'), ErrConsistency},
		{"table rewritten under the agent", stored, logAt(t, s, rewritten, 18, 15, 12), entry(15), ErrConsistency},
		{"entry changed after logging", stored, honest, append(entry(15), ' '), ErrInclusion},
		{"proof for another size", stored, otherSize, entry(15), ErrInclusion},
		{"index beyond the size", stored, func() Evidence { e := honest; e.Index = 18; return e }(), entry(15), ErrProof},
		{"inclusion for another entry", stored, honest, entry(14), ErrInclusion},
	} {
		if _, err := VerifyEvidence(s.Key(), c.stored, c.ev, c.entry); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

var _ crypto.Signer = (*ecdsa.PrivateKey)(nil)

// FuzzOpen: no input makes ParseCheckpoint or LogKey.Open panic, and what
// Open accepts is exactly a checkpoint the key signed (here: none but the
// seed's, since the fuzzer does not hold the key).
func FuzzOpen(f *testing.F) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	s, err := NewLogSigner("fuzz.example/log", priv)
	if err != nil {
		f.Fatal(err)
	}
	good, err := s.Sign(Checkpoint{Origin: "fuzz.example/log", Size: 3, Root: LeafHash([]byte("x"))})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("fuzz.example/log\n3\nAAAA\n\n— fuzz.example/log AAAA\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseCheckpoint(data)
		c, err := s.Key().Open(data)
		if err == nil && (c.Origin != "fuzz.example/log" || !bytes.HasPrefix(data, c.Text())) {
			t.Fatalf("opened %+v from %q", c, data)
		}
	})
}
