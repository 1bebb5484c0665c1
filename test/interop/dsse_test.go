package interop_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"
	"github.com/sigstore/sigstore/pkg/signature"
	sigstoredsse "github.com/sigstore/sigstore/pkg/signature/dsse"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

var statement = []byte(`{"version":"1.0.0","sequence":1,"binaries":[{"platform":"linux/arm64","url":"https://dl.example.com/bcd",` +
	`"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","size":1}]}`)

// releaseKey is one signing key as each library loads it: from the PEM
// files `bcctl keygen` writes.
type releaseKey struct {
	alg    string
	signer crypto.Signer
	priv   []byte // PKCS#8 PEM
	pub    []byte // SubjectPublicKeyInfo PEM
	keyID  string // this API's: hex SHA-256 of the SPKI DER
}

func newReleaseKey(t *testing.T, alg string) releaseKey {
	t.Helper()
	s, err := release.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := release.MarshalPrivateKeyPEM(s)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := release.MarshalPublicKeyPEM(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	id, err := release.KeyID(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	return releaseKey{alg: alg, signer: s, priv: priv, pub: pub, keyID: id}
}

// sslib is go-securesystemslib's signer-verifier of a PEM key; keyID ""
// keeps the keyid securesystemslib derives (its own convention).
func sslib(t *testing.T, pem []byte, keyID string) dsse.SignerVerifier {
	t.Helper()
	key, err := signerverifier.LoadKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	if keyID != "" {
		key.KeyID = keyID
	}
	var sv dsse.SignerVerifier
	switch key.KeyType {
	case signerverifier.ECDSAKeyType:
		sv, err = signerverifier.NewECDSASignerVerifierFromSSLibKey(key)
	case signerverifier.ED25519KeyType:
		sv, err = signerverifier.NewED25519SignerVerifierFromSSLibKey(key)
	default:
		t.Fatalf("key type %s", key.KeyType)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

// sigstoreHash is the hash sigstore's loaders take for a key type.
func sigstoreHash(alg string) crypto.Hash {
	if alg == release.AlgECDSAP256 {
		return crypto.SHA256
	}
	return crypto.Hash(0)
}

// The DSSE interop matrix: envelopes made by each signer, checked by each
// verifier, for ECDSA P-256 and Ed25519 keys. This API verifies every
// signer's envelope (a keyid is only a hint to it); the other verifiers
// skip a signature whose keyid is not their verifier's, so a bcctl sign
// envelope verifies there with --keyid none, or when their verifier is
// given this API's keyid (the recipe of Example_securesystemslib).
func TestDSSEInteropMatrix(t *testing.T) {
	ctx := context.Background()
	signers := []struct {
		name string
		sign func(t *testing.T, k releaseKey) []byte
	}{
		{"bcctl sign", func(t *testing.T, k releaseKey) []byte {
			env, err := release.SignEnvelope(statement, k.signer)
			if err != nil {
				t.Fatal(err)
			}
			return env
		}},
		{"bcctl sign --keyid none", func(t *testing.T, k releaseKey) []byte {
			env, err := release.SignEnvelopeNaming(statement, []string{""}, k.signer)
			if err != nil {
				t.Fatal(err)
			}
			return env
		}},
		{"securesystemslib EnvelopeSigner", func(t *testing.T, k releaseKey) []byte {
			es, err := dsse.NewEnvelopeSigner(sslib(t, k.priv, ""))
			if err != nil {
				t.Fatal(err)
			}
			env, err := es.SignPayload(ctx, release.PayloadType, statement)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(env)
			return b
		}},
		{"sigstore dsse.WrapSigner", func(t *testing.T, k releaseKey) []byte {
			s, err := signature.LoadSigner(k.signer, sigstoreHash(k.alg))
			if err != nil {
				t.Fatal(err)
			}
			env, err := sigstoredsse.WrapSigner(s, release.PayloadType).SignMessage(bytes.NewReader(statement))
			if err != nil {
				t.Fatal(err)
			}
			return env
		}},
	}
	verifiers := []struct {
		name   string
		verify func(t *testing.T, k releaseKey, env []byte) error
	}{
		{"this API", func(t *testing.T, k releaseKey, env []byte) error {
			pins, err := release.NewPins([]crypto.PublicKey{k.signer.Public()}, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = pins.Verify(env, time.Now())
			return err
		}},
		{"securesystemslib, its keyid", func(t *testing.T, k releaseKey, env []byte) error {
			return sslibVerify(t, sslib(t, k.pub, ""), env)
		}},
		{"securesystemslib, this API's keyid", func(t *testing.T, k releaseKey, env []byte) error {
			return sslibVerify(t, sslib(t, k.pub, k.keyID), env)
		}},
		{"sigstore dsse.WrapVerifier", func(t *testing.T, k releaseKey, env []byte) error {
			v, err := signature.LoadVerifier(k.signer.Public(), sigstoreHash(k.alg))
			if err != nil {
				t.Fatal(err)
			}
			return sigstoredsse.WrapVerifier(v, sigstoredsse.WithExpectedPayloadType(release.PayloadType)).VerifySignature(bytes.NewReader(env), nil)
		}},
	}
	// want[signer][verifier]: whether the verifier accepts the signer's
	// envelope (the same for both key types).
	want := map[string][]bool{
		"bcctl sign":                      {true, false, true, false},
		"bcctl sign --keyid none":         {true, true, true, true},
		"securesystemslib EnvelopeSigner": {true, true, false, false},
		"sigstore dsse.WrapSigner":        {true, true, true, true},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-46s", "signer \\ verifier")
	for _, v := range verifiers {
		fmt.Fprintf(&table, " | %-34s", v.name)
	}
	table.WriteString("\n")
	for _, alg := range []string{release.AlgECDSAP256, release.AlgEd25519} {
		k := newReleaseKey(t, alg)
		for _, s := range signers {
			env := s.sign(t, k)
			fmt.Fprintf(&table, "%-46s", s.name+" ("+alg+")")
			for i, v := range verifiers {
				err := v.verify(t, k, env)
				if (err == nil) != want[s.name][i] {
					t.Errorf("%s, %s envelope, %s: error %v, want accepted %v\n%s", alg, s.name, v.name, err, want[s.name][i], env)
				}
				mark := "verifies"
				if err != nil {
					mark = "refused: " + shorten(err.Error())
				}
				fmt.Fprintf(&table, " | %-34s", mark)
			}
			table.WriteString("\n")
		}
	}
	t.Logf("DSSE interop matrix:\n%s", table.String())
}

func sslibVerify(t *testing.T, v dsse.Verifier, envJSON []byte) error {
	t.Helper()
	var env dsse.Envelope
	if err := json.Unmarshal(envJSON, &env); err != nil {
		t.Fatal(err)
	}
	ev, err := dsse.NewEnvelopeVerifier(v)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ev.Verify(context.Background(), &env)
	return err
}

func shorten(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

// An ECDSA signature must be ASN.1 DER (what crypto.Signer, KMS and both
// libraries produce): the same signature as raw r‖s does not verify, and
// says so — bad_signature when the keyid names the pinned key.
func TestRawECDSASignatureRefused(t *testing.T) {
	k := newReleaseKey(t, release.AlgECDSAP256)
	digest := sha256.Sum256(dsse.PAE(release.PayloadType, statement))
	r, s, err := ecdsa.Sign(rand.Reader, k.signer.(*ecdsa.PrivateKey), digest[:])
	if err != nil {
		t.Fatal(err)
	}
	raw := append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	env, _ := json.Marshal(release.Envelope{PayloadType: release.PayloadType, Payload: base64.StdEncoding.EncodeToString(statement),
		Signatures: []release.EnvelopeSignature{{KeyID: k.keyID, Sig: base64.StdEncoding.EncodeToString(raw)}}})
	pins, err := release.NewPins([]crypto.PublicKey{k.signer.Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pins.Verify(env, time.Now())
	if e := apierr.As(err); e == nil || e.Details["reason"] != release.ReasonBadSignature {
		t.Fatalf("raw r‖s: %v, want bad_signature", err)
	}
}
