package dsse

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
)

// Key algorithms GenerateKey accepts.
const (
	AlgECDSAP256 = "ecdsa-p256"
	AlgEd25519   = "ed25519"
)

// Sign builds a DSSE envelope (JSON) over payload with payloadType, one
// signature per signer, each naming its key by KeyID (the hex SHA-256 of
// its SubjectPublicKeyInfo DER): SignNaming with those ids.
func Sign(payloadType string, payload []byte, signers ...crypto.Signer) ([]byte, error) {
	ids := make([]string, len(signers))
	for i, s := range signers {
		id, err := KeyID(s.Public())
		if err != nil {
			return nil, fmt.Errorf("dsse: signer %d: %w", i, err)
		}
		ids[i] = id
	}
	return SignNaming(payloadType, payload, ids, signers...)
}

// SignNaming is Sign with the keyid each signature names:
// keyIDs[i] for signers[i], "" for none (the member is left out). The
// keyid is a hint to verifiers; this API tries every pinned key whatever
// it says, while other DSSE verifiers skip a signature whose keyid is not
// their verifier's (docs/architecture.md, DSSE interoperability).
//
// ECDSA P-256 signers receive SHA-256(PAE) with crypto.SHA256 and return an
// ASN.1 DER signature, so a KMS-backed crypto.Signer (ECC_NIST_P256,
// ECDSA_SHA_256) works; Ed25519 signers receive PAE itself with
// crypto.Hash(0). Every signature is checked under its public key before it
// is returned, so a misconfigured signer fails here rather than at the API.
func SignNaming(payloadType string, payload []byte, keyIDs []string, signers ...crypto.Signer) ([]byte, error) {
	if len(signers) == 0 {
		return nil, errors.New("dsse: Sign needs at least one signer")
	}
	if len(keyIDs) != len(signers) {
		return nil, fmt.Errorf("dsse: %d keyids for %d signers", len(keyIDs), len(signers))
	}
	pae := PAE(payloadType, payload)
	env := Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(payload),
		Signatures:  make([]EnvelopeSignature, 0, len(signers)),
	}
	for i, s := range signers {
		pub, err := supportedKey(s.Public())
		if err != nil {
			return nil, fmt.Errorf("dsse: signer %d: %w", i, err)
		}
		var sig []byte
		if _, ok := pub.(*ecdsa.PublicKey); ok {
			digest := sha256.Sum256(pae)
			sig, err = s.Sign(rand.Reader, digest[:], crypto.SHA256)
		} else {
			sig, err = s.Sign(rand.Reader, pae, crypto.Hash(0))
		}
		if err != nil {
			return nil, fmt.Errorf("dsse: signer %d: %w", i, err)
		}
		if !verifySignature(pub, pae, sig) {
			return nil, fmt.Errorf("dsse: signer %d produced a signature that does not verify under its public key (an ECDSA signer must return ASN.1 DER, not r‖s)", i)
		}
		env.Signatures = append(env.Signatures, EnvelopeSignature{KeyID: keyIDs[i], Sig: base64.StdEncoding.EncodeToString(sig)})
	}
	return json.Marshal(env)
}

// verifySignature checks sig over pae under pub (as returned by supportedKey):
// ECDSA P-256 over SHA-256(pae) with an ASN.1 DER signature, or Ed25519 over
// pae itself.
func verifySignature(pub crypto.PublicKey, pae, sig []byte) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		digest := sha256.Sum256(pae)
		return ecdsa.VerifyASN1(k, digest[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, pae, sig)
	}
	return false
}

// GenerateKey makes a new signing key: alg is "ecdsa-p256" or "ed25519".
func GenerateKey(alg string) (crypto.Signer, error) {
	switch alg {
	case AlgECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case AlgEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("dsse: unknown key algorithm %q (want %q or %q)", alg, AlgECDSAP256, AlgEd25519)
}

// MarshalPrivateKeyPEM encodes a local ECDSA P-256 or Ed25519 private key as
// a PKCS#8 "PRIVATE KEY" PEM block.
func MarshalPrivateKeyPEM(k crypto.Signer) ([]byte, error) {
	if _, err := supportedKey(k.Public()); err != nil {
		return nil, fmt.Errorf("dsse: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("dsse: encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKeyPEM reads one ECDSA P-256 or Ed25519 private key from a
// PKCS#8 "PRIVATE KEY" or SEC1 "EC PRIVATE KEY" PEM block. An "EC PARAMETERS"
// block (as `openssl ecparam -genkey` writes) is skipped; any other block is
// an error.
func ParsePrivateKeyPEM(data []byte) (crypto.Signer, error) {
	var signer crypto.Signer
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		data = rest
		var key any
		var err error
		switch block.Type {
		case "EC PARAMETERS":
			continue
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		default:
			return nil, fmt.Errorf("dsse: unexpected PEM block %q in a private key file", block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("dsse: %s: %w", block.Type, err)
		}
		if signer != nil {
			return nil, errors.New("dsse: more than one private key in the PEM data")
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("dsse: unsupported private key type %T", key)
		}
		if _, err := supportedKey(s.Public()); err != nil {
			return nil, fmt.Errorf("dsse: %w", err)
		}
		signer = s
	}
	if signer == nil {
		return nil, errors.New("dsse: no PRIVATE KEY or EC PRIVATE KEY PEM block found")
	}
	return signer, nil
}

// MarshalPublicKeyPEM encodes an ECDSA P-256 or Ed25519 public key as a
// "PUBLIC KEY" (SubjectPublicKeyInfo) PEM block.
func MarshalPublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	pub, err := supportedKey(pub)
	if err != nil {
		return nil, fmt.Errorf("dsse: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("dsse: encoding public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
