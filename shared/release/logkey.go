package release

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Signature types of c2sp.org/signed-note.
const (
	TypeEd25519 byte = 0x01 // Ed25519 over the note text
	TypeECDSA   byte = 0x02 // ECDSA over SHA-256 of the note text, ASN.1 DER (as transparency-dev/witness)
)

// LogKey is the log key's identity in notes: the key name (the log's origin),
// its signature type, its public key and the 32-bit key ID signatures carry.
type LogKey struct {
	Name string
	Type byte
	ID   uint32
	pub  crypto.PublicKey
	enc  []byte // the public key as the verifier key encodes it
}

// NewLogKey is origin's log key for pub: ECDSA P-256 (what KMS ECC_NIST_P256
// and local-kms sign with) or Ed25519.
func NewLogKey(origin string, pub crypto.PublicKey) (LogKey, error) {
	if origin == "" || strings.ContainsAny(origin, " +\n\t") {
		return LogKey{}, fmt.Errorf("log origin %q: a key name has no spaces or '+'", origin)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return LogKey{}, fmt.Errorf("log key: ECDSA on %s, want P-256", k.Curve.Params().Name)
		}
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return LogKey{}, err
		}
		// signed-note 0x02: the key ID hashes the DER SPKI alone.
		sum := sha256.Sum256(der)
		return LogKey{Name: origin, Type: TypeECDSA, ID: binary.BigEndian.Uint32(sum[:4]), pub: k, enc: der}, nil
	case ed25519.PublicKey:
		h := sha256.New()
		h.Write([]byte(origin + "\n"))
		h.Write([]byte{TypeEd25519})
		h.Write(k)
		return LogKey{Name: origin, Type: TypeEd25519, ID: binary.BigEndian.Uint32(h.Sum(nil)[:4]), pub: k, enc: []byte(k)}, nil
	}
	return LogKey{}, fmt.Errorf("log key: %T, want ECDSA P-256 or Ed25519", pub)
}

// VerifierKey is the key as a note verifier key, what a node or an auditor
// pins: <name>+<key ID, 8 hex digits>+base64(type ‖ public key).
func (k LogKey) VerifierKey() string {
	return fmt.Sprintf("%s+%08x+%s", k.Name, k.ID, base64.StdEncoding.EncodeToString(append([]byte{k.Type}, k.enc...)))
}

// ParseVerifierKey reads a pinned verifier key, checking its key ID.
func ParseVerifierKey(vkey string) (LogKey, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return LogKey{}, errors.New("log verifier key: want <name>+<id>+<key>")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(parts[2])
	if err != nil || len(raw) < 2 {
		return LogKey{}, errors.New("log verifier key: the key is not base64")
	}
	var pub crypto.PublicKey
	switch raw[0] {
	case TypeECDSA:
		if pub, err = x509.ParsePKIXPublicKey(raw[1:]); err != nil {
			return LogKey{}, fmt.Errorf("log verifier key: %w", err)
		}
	case TypeEd25519:
		if len(raw) != 1+ed25519.PublicKeySize {
			return LogKey{}, errors.New("log verifier key: an Ed25519 key is 32 bytes")
		}
		pub = ed25519.PublicKey(raw[1:])
	default:
		return LogKey{}, fmt.Errorf("log verifier key: signature type 0x%02x, want 0x01 or 0x02", raw[0])
	}
	k, err := NewLogKey(parts[0], pub)
	if err != nil {
		return LogKey{}, err
	}
	if id, err := strconv.ParseUint(parts[1], 16, 32); err != nil || uint32(id) != k.ID || len(parts[1]) != 8 {
		return LogKey{}, fmt.Errorf("log verifier key: key ID %q, the key's is %08x", parts[1], k.ID)
	}
	return k, nil
}

// verifier is k as a note.Verifier.
type verifier struct{ k LogKey }

func (v verifier) Name() string    { return v.k.Name }
func (v verifier) KeyHash() uint32 { return v.k.ID }
func (v verifier) Verify(msg, sig []byte) bool {
	switch pub := v.k.pub.(type) {
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(pub, d[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(pub, msg, sig)
	}
	return false
}

// Open verifies a signed checkpoint under k and returns it: the note must
// carry a valid signature of k, and its origin must be k's name.
func (k LogKey) Open(signed []byte) (Checkpoint, error) {
	if len(signed) > MaxCheckpoint {
		return Checkpoint{}, fmt.Errorf("checkpoint: %d bytes, more than %d", len(signed), MaxCheckpoint)
	}
	n, err := note.Open(signed, note.VerifierList(verifier{k}))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := ParseCheckpoint([]byte(n.Text))
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != k.Name {
		return Checkpoint{}, fmt.Errorf("checkpoint: origin %q, the log key's is %q", c.Origin, k.Name)
	}
	return c, nil
}

// LogSigner signs checkpoints with the log key (a KMS key in production:
// shared/kmssign's crypto.Signer).
type LogSigner struct {
	key LogKey
	s   crypto.Signer
}

// NewLogSigner is the log's checkpoint signer for origin.
func NewLogSigner(origin string, s crypto.Signer) (*LogSigner, error) {
	k, err := NewLogKey(origin, s.Public())
	if err != nil {
		return nil, err
	}
	return &LogSigner{key: k, s: s}, nil
}

// Key is the signer's key.
func (s *LogSigner) Key() LogKey { return s.key }

// Sign signs c as a note; c's origin must be the key's name.
func (s *LogSigner) Sign(c Checkpoint) ([]byte, error) {
	if c.Origin != s.key.Name {
		return nil, fmt.Errorf("checkpoint origin %q, the log key's is %q", c.Origin, s.key.Name)
	}
	return note.Sign(&note.Note{Text: string(c.Text())}, noteSigner{s})
}

type noteSigner struct{ s *LogSigner }

func (n noteSigner) Name() string    { return n.s.key.Name }
func (n noteSigner) KeyHash() uint32 { return n.s.key.ID }
func (n noteSigner) Sign(msg []byte) ([]byte, error) {
	if n.s.key.Type == TypeEd25519 {
		return n.s.s.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	d := sha256.Sum256(msg)
	return n.s.s.Sign(rand.Reader, d[:], crypto.SHA256)
}
