// Package kmssign adapts AWS KMS asymmetric keys: fetching a key's public
// key (for release pins) and signing with kms:Sign as a crypto.Signer (for
// the release CLI). Only ECC_NIST_P256 with ECDSA_SHA_256 is used.
package kmssign

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
)

// API is the part of the KMS client this package uses.
type API interface {
	GetPublicKey(ctx context.Context, in *kms.GetPublicKeyInput, opts ...func(*kms.Options)) (*kms.GetPublicKeyOutput, error)
	Sign(ctx context.Context, in *kms.SignInput, opts ...func(*kms.Options)) (*kms.SignOutput, error)
}

// PublicKey fetches and parses a KMS key's public key.
func PublicKey(ctx context.Context, c API, keyID string) (crypto.PublicKey, error) {
	out, err := c.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return nil, fmt.Errorf("kms GetPublicKey %s: %w", keyID, err)
	}
	pub, err := x509.ParsePKIXPublicKey(out.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("kms key %s: %w", keyID, err)
	}
	return pub, nil
}

// Signer signs SHA-256 digests with a KMS ECC_NIST_P256 key (ASN.1 DER
// signatures, as crypto/ecdsa produces).
type Signer struct {
	ctx    context.Context
	client API
	keyID  string
	pub    crypto.PublicKey
}

// NewSigner fetches the key's public key once and returns a signer.
func NewSigner(ctx context.Context, c API, keyID string) (*Signer, error) {
	pub, err := PublicKey(ctx, c, keyID)
	if err != nil {
		return nil, err
	}
	// Signs outlive the call that made the signer (a function's start):
	// they keep its values, not its cancellation.
	return &Signer{ctx: context.WithoutCancel(ctx), client: c, keyID: keyID, pub: pub}, nil
}

// Public returns the key's public key.
func (s *Signer) Public() crypto.PublicKey { return s.pub }

// Sign signs a SHA-256 digest with kms:Sign (MessageType DIGEST).
func (s *Signer) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != crypto.SHA256 {
		return nil, fmt.Errorf("kms signer: only SHA-256 digests are supported")
	}
	out, err := s.client.Sign(s.ctx, &kms.SignInput{KeyId: aws.String(s.keyID), Message: digest,
		MessageType: types.MessageTypeDigest, SigningAlgorithm: types.SigningAlgorithmSpecEcdsaSha256})
	if err != nil {
		return nil, fmt.Errorf("kms Sign %s: %w", s.keyID, err)
	}
	return out.Signature, nil
}
