package interop_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"

	"github.com/bettercompute/control-plane/shared/release"
)

// The recipe: verify a manifest that `bcctl sign` wrote with
// go-securesystemslib alone, under the public key `bcctl pubkey` (or
// keygen) prints. securesystemslib's verifier skips a signature whose
// keyid differs from its own, and derives its own keyid another way, so
// give it this API's: the hex SHA-256 of the key's SubjectPublicKeyInfo
// DER (what bcctl prints as keyid). An envelope signed with
// `bcctl sign --keyid none` needs no such step.
func Example_securesystemslib() {
	manifest, publicPEM := bcctlSign() // the files bcctl sign and bcctl pubkey write

	// The keyid convention, computed from the PEM alone.
	block, _ := pem.Decode(publicPEM)
	sum := sha256.Sum256(block.Bytes) // the SubjectPublicKeyInfo DER
	keyID := hex.EncodeToString(sum[:])

	key, err := signerverifier.LoadKey(publicPEM)
	if err != nil {
		panic(err)
	}
	key.KeyID = keyID
	verifier, err := signerverifier.NewECDSASignerVerifierFromSSLibKey(key) // NewED25519… for an Ed25519 key
	if err != nil {
		panic(err)
	}
	envelopeVerifier, err := dsse.NewEnvelopeVerifier(verifier)
	if err != nil {
		panic(err)
	}
	var env dsse.Envelope
	if err := json.Unmarshal(manifest, &env); err != nil {
		panic(err)
	}
	accepted, payload, err := envelopeVerifier.VerifyAndDecode(context.Background(), &env)
	if err != nil {
		panic(err)
	}
	var stmt struct {
		Version  string `json:"version"`
		Sequence int64  `json:"sequence"`
	}
	if err := json.Unmarshal(payload, &stmt); err != nil {
		panic(err)
	}
	fmt.Println(env.PayloadType)
	fmt.Printf("%d signature verified, by keyid %t; release %s, sequence %d\n", len(accepted), accepted[0].KeyID == keyID, stmt.Version, stmt.Sequence)
	// Output:
	// application/vnd.bettercompute.release.v1+json
	// 1 signature verified, by keyid true; release 1.0.0, sequence 1
}

// bcctlSign makes what `bcctl keygen --out k.pem` and `bcctl sign
// --statement s.json --key k.pem` write: a signed manifest and the key's
// public PEM.
func bcctlSign() (manifest, publicPEM []byte) {
	key, err := release.GenerateKey(release.AlgECDSAP256)
	if err != nil {
		panic(err)
	}
	if manifest, err = release.SignEnvelope(statement, key); err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		panic(err)
	}
	return manifest, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}
