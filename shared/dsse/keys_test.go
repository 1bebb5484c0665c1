package dsse_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/dsse"
)

func TestKeyID(t *testing.T) {
	ec := newKey(t, dsse.AlgECDSAP256).Public()
	ed := newKey(t, dsse.AlgEd25519).Public()
	edPub := ed.(ed25519.PublicKey)
	for _, tc := range []struct {
		name string
		pub  crypto.PublicKey
		want crypto.PublicKey // key whose SPKI the id must hash
	}{
		{"ecdsa-p256", ec, ec},
		{"ed25519", ed, ed},
		{"ed25519 pointer", &edPub, ed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			der, err := x509.MarshalPKIXPublicKey(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(der)
			got, err := dsse.KeyID(tc.pub)
			if err != nil {
				t.Fatal(err)
			}
			if want := hex.EncodeToString(sum[:]); got != want {
				t.Fatalf("KeyID = %s, want %s", got, want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		pub  crypto.PublicKey
	}{
		{"p384", p384Public(t)},
		{"rsa", rsaPublic(t)},
		{"nil", nil},
	} {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			if id, err := dsse.KeyID(tc.pub); err == nil {
				t.Fatalf("KeyID = %s, want an error", id)
			}
		})
	}
}

func TestNewPins(t *testing.T) {
	a := newKey(t, dsse.AlgECDSAP256).Public()
	b := newKey(t, dsse.AlgEd25519).Public()
	ids := []string{keyID(t, a), keyID(t, b)}
	slices.Sort(ids)
	for _, tc := range []struct {
		name      string
		keys      []crypto.PublicKey
		threshold int
		wantIDs   []string // nil: an error is expected
	}{
		{"one key threshold 1", []crypto.PublicKey{a}, 1, []string{keyID(t, a)}},
		{"two keys threshold 2", []crypto.PublicKey{a, b}, 2, ids},
		{"two keys threshold 1", []crypto.PublicKey{b, a}, 1, ids},
		{"duplicate key counted once", []crypto.PublicKey{a, b, a}, 2, ids},
		{"threshold above distinct keys", []crypto.PublicKey{a, a}, 2, nil},
		{"threshold above keys", []crypto.PublicKey{a, b}, 3, nil},
		{"threshold 0", []crypto.PublicKey{a}, 0, nil},
		{"negative threshold", []crypto.PublicKey{a}, -1, nil},
		{"no keys", nil, 1, nil},
		{"unsupported key", []crypto.PublicKey{a, rsaPublic(t)}, 1, nil},
		{"p384 key", []crypto.PublicKey{p384Public(t)}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := dsse.NewPins(tc.keys, tc.threshold)
			if tc.wantIDs == nil {
				if err == nil {
					t.Fatalf("NewPins succeeded with keyids %v, want an error", p.KeyIDs())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.KeyIDs(); !slices.Equal(got, tc.wantIDs) {
				t.Errorf("KeyIDs = %v, want %v", got, tc.wantIDs)
			}
			if p.Threshold() != tc.threshold {
				t.Errorf("Threshold = %d, want %d", p.Threshold(), tc.threshold)
			}
		})
	}
}

func TestParsePEMBundle(t *testing.T) {
	ec := newKey(t, dsse.AlgECDSAP256).Public()
	ed := newKey(t, dsse.AlgEd25519).Public()
	ecPEM := publicPEM(t, ec)
	edPEM := publicPEM(t, ed)
	rsaDER, err := x509.MarshalPKIXPublicKey(rsaPublic(t))
	if err != nil {
		t.Fatal(err)
	}
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaDER})
	p384DER, err := x509.MarshalPKIXPublicKey(p384Public(t))
	if err != nil {
		t.Fatal(err)
	}
	p384PEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p384DER})
	privPEM, err := dsse.MarshalPrivateKeyPEM(newKey(t, dsse.AlgEd25519))
	if err != nil {
		t.Fatal(err)
	}
	// A block whose base64 is damaged: pem.Decode would skip it silently.
	damaged := bytes.Replace(slices.Clone(edPEM), []byte("\n"), []byte("\n!!"), 2)

	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name    string
		data    []byte
		want    []crypto.PublicKey
		wantErr string // substring of the error
	}{
		{"ecdsa and ed25519 with comments", cat([]byte("# release key 1\n"), ecPEM, []byte("# key 2\n"), edPEM, []byte("\n")),
			[]crypto.PublicKey{ec, ed}, ""},
		{"one key", edPEM, []crypto.PublicKey{ed}, ""},
		{"rsa key names its block", cat(ecPEM, rsaPEM), nil, "PEM block 2"},
		{"p384 key names its block", cat(p384PEM), nil, "PEM block 1"},
		{"private key block", cat(ecPEM, edPEM, privPEM), nil, "PEM block 3"},
		{"damaged block", cat(ecPEM, damaged, edPEM), nil, "PEM block 2"},
		{"damaged last block", cat(ecPEM, damaged), nil, "PEM block 2"},
		{"empty", nil, nil, "no PUBLIC KEY"},
		{"no PEM", []byte("not a key\n"), nil, "no PUBLIC KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dsse.ParsePEMBundle(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d keys, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if keyID(t, got[i]) != keyID(t, tc.want[i]) {
					t.Errorf("key %d differs", i)
				}
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	for _, alg := range []string{dsse.AlgECDSAP256, dsse.AlgEd25519} {
		t.Run(alg, func(t *testing.T) {
			k := newKey(t, alg)
			priv, err := dsse.MarshalPrivateKeyPEM(k)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := pem.Decode(priv); b == nil || b.Type != "PRIVATE KEY" {
				t.Fatalf("private key PEM is not a PRIVATE KEY block:\n%s", priv)
			}
			back, err := dsse.ParsePrivateKeyPEM(priv)
			if err != nil {
				t.Fatal(err)
			}
			if keyID(t, back.Public()) != keyID(t, k.Public()) {
				t.Fatal("private key did not round-trip")
			}
			pub, err := dsse.MarshalPublicKeyPEM(k.Public())
			if err != nil {
				t.Fatal(err)
			}
			keys, err := dsse.ParsePEMBundle(pub)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 1 || keyID(t, keys[0]) != keyID(t, k.Public()) {
				t.Fatal("public key did not round-trip")
			}
		})
	}

	ec := newKey(t, dsse.AlgECDSAP256).(*ecdsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}})
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384PEM, err := x509.MarshalPKCS8PrivateKey(p384)
	if err != nil {
		t.Fatal(err)
	}
	twoKeys, err := dsse.MarshalPrivateKeyPEM(newKey(t, dsse.AlgEd25519))
	if err != nil {
		t.Fatal(err)
	}
	twoKeys = append(twoKeys, sec1PEM...)
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"sec1 EC PRIVATE KEY", sec1PEM, true},
		{"openssl ecparam -genkey output", append(slices.Clone(params), sec1PEM...), true},
		{"p384 PKCS#8", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p384PEM}), false},
		{"public key block", publicPEM(t, ec.Public()), false},
		{"two keys", twoKeys, false},
		{"empty", nil, false},
	} {
		t.Run("ParsePrivateKeyPEM "+tc.name, func(t *testing.T) {
			k, err := dsse.ParsePrivateKeyPEM(tc.data)
			if !tc.ok {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if keyID(t, k.Public()) != keyID(t, ec.Public()) {
				t.Fatal("wrong key")
			}
		})
	}

	if _, err := dsse.GenerateKey("rsa-2048"); err == nil {
		t.Error("GenerateKey(rsa-2048) succeeded, want an error")
	}
	if _, err := dsse.MarshalPublicKeyPEM(rsaPublic(t)); err == nil {
		t.Error("MarshalPublicKeyPEM(rsa) succeeded, want an error")
	}
}

// ---- helpers ----

func newKey(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	k, err := dsse.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyID(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	id, err := dsse.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func publicPEM(t testing.TB, pub crypto.PublicKey) []byte {
	t.Helper()
	b, err := dsse.MarshalPublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func p384Public(t testing.TB) crypto.PublicKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

func rsaPublic(t testing.TB) crypto.PublicKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return k.Public()
}

// WriteKeyFile: mode 0600, never replacing a key unless forced.
func TestWriteKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.pem")
	if err := dsse.WriteKeyFile(path, []byte("one"), false, "a node key"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	err := dsse.WriteKeyFile(path, []byte("two"), false, "a node key")
	if err == nil || !strings.Contains(err.Error(), "not replacing a node key") {
		t.Fatalf("replacing without force: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("the key changed: %q", b)
	}
	if err := dsse.WriteKeyFile(path, []byte("two"), true, "a node key"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Fatalf("forced: %q", b)
	}
}
