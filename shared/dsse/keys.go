// Package dsse signs and opens DSSE envelopes (DSSE v1.0.2) under a set of
// pinned ECDSA P-256 / Ed25519 keys with a threshold: the release manifests
// (pinned release keys) and the node reports (the node's one registered key)
// share it.
package dsse

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// Pins are the keys an envelope must be signed by: at least Threshold
// distinct pinned keys must sign.
type Pins struct {
	keys      map[string]crypto.PublicKey // keyid -> *ecdsa.PublicKey (P-256) or ed25519.PublicKey
	ids       []string                    // sorted keyids
	threshold int
}

// KeyID is the hex SHA-256 of the public key's SubjectPublicKeyInfo DER.
// Only the supported key types (ECDSA P-256 and Ed25519) have one.
func KeyID(pub crypto.PublicKey) (string, error) {
	pub, err := supportedKey(pub)
	if err != nil {
		return "", fmt.Errorf("dsse: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("dsse: encoding public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// supportedKey returns pub in its canonical form (*ecdsa.PublicKey on P-256,
// or ed25519.PublicKey), or an error for any other key.
func supportedKey(pub crypto.PublicKey) (crypto.PublicKey, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k == nil || k.Curve != elliptic.P256() {
			return nil, errors.New("unsupported ECDSA curve (only P-256 is supported)")
		}
		return k, nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("wrong Ed25519 public key size %d", len(k))
		}
		return k, nil
	case *ed25519.PublicKey:
		if k == nil {
			return nil, errors.New("nil Ed25519 public key")
		}
		return supportedKey(*k)
	case nil:
		return nil, errors.New("no public key")
	default:
		return nil, fmt.Errorf("unsupported key type %T (only ECDSA P-256 and Ed25519 are supported)", pub)
	}
}

// ParsePEMBundle parses concatenated "PUBLIC KEY" PEM blocks (ECDSA P-256 or
// Ed25519 only). Text between blocks (comments) is ignored, but a block that
// does not decode, has another type, or holds another key type is an error
// naming the block (1-based), so that a damaged bundle never silently pins
// fewer keys.
func ParsePEMBundle(data []byte) ([]crypto.PublicKey, error) {
	begin := []byte("-----BEGIN")
	var keys []crypto.PublicKey
	for n := 1; ; n++ {
		block, rest := pem.Decode(data)
		if block == nil {
			if bytes.Contains(data, begin) {
				return nil, fmt.Errorf("dsse: PEM block %d does not decode", n)
			}
			break
		}
		// pem.Decode skips a damaged block and returns the next one: the
		// consumed text must contain exactly one BEGIN line.
		if bytes.Count(data[:len(data)-len(rest)], begin) != 1 {
			return nil, fmt.Errorf("dsse: PEM block %d does not decode", n)
		}
		data = rest
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("dsse: PEM block %d is %q, want \"PUBLIC KEY\"", n, block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("dsse: PEM block %d (PUBLIC KEY): %w", n, err)
		}
		if pub, err = supportedKey(pub); err != nil {
			return nil, fmt.Errorf("dsse: PEM block %d (PUBLIC KEY): %w", n, err)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, errors.New("dsse: no PUBLIC KEY PEM block found")
	}
	return keys, nil
}

// NewPins pins keys (deduplicated by keyid) with a threshold that must be in
// 1..number of distinct keys: anything else is a configuration error at start
// (a misconfiguration), never a request error.
func NewPins(keys []crypto.PublicKey, threshold int) (*Pins, error) {
	p := &Pins{keys: make(map[string]crypto.PublicKey, len(keys)), threshold: threshold}
	for i, k := range keys {
		k, err := supportedKey(k)
		if err != nil {
			return nil, fmt.Errorf("dsse: pin %d: %w", i, err)
		}
		id, err := KeyID(k)
		if err != nil {
			return nil, fmt.Errorf("dsse: pin %d: %w", i, err)
		}
		if _, dup := p.keys[id]; !dup {
			p.keys[id] = k
			p.ids = append(p.ids, id)
		}
	}
	slices.Sort(p.ids)
	if threshold < 1 || threshold > len(p.ids) {
		return nil, fmt.Errorf("dsse: threshold %d must be between 1 and the number of distinct pinned keys (%d)",
			threshold, len(p.ids))
	}
	return p, nil
}

// KeyIDs lists the pinned keys' ids, sorted.
func (p *Pins) KeyIDs() []string { return slices.Clone(p.ids) }

// Threshold is the number of distinct pinned keys that must sign.
func (p *Pins) Threshold() int { return p.threshold }

// WriteKeyFile writes a private key's PEM with mode 0600, refusing to
// replace an existing file unless force: a key that signed releases, or
// that a node is registered under, must not vanish by a repeated command.
// what names the key in the refusal ("a private key", "a node key").
func WriteKeyFile(path string, pem []byte, force bool, what string) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keygen: %s exists; not replacing %s (use --force to replace it)", path, what)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(pem); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
