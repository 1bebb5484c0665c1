// Package kmskeys reads the public halves of KMS keys (the release keys of
// BC_RELEASE_KMS_KEYS) and signs with the release log key
// (BC_RELEASE_LOG_KEY): the option the mains of releases.register and the
// reconciler name (api.ReadsKMSKeys, api.SignsReleaseLog), and the local
// gateway's, so no other function links the KMS client.
package kmskeys

import (
	"context"
	"crypto"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/kmssign"
)

// FromKMS reads keys from KMS (BC_KMS_ENDPOINT: a local KMS API).
func FromKMS() app.Option { return app.WithPublicKeys(newReader) }

// Client is the KMS client on awsCfg (BC_KMS_ENDPOINT).
func Client(awsCfg aws.Config, cfg app.Config) *kms.Client {
	return kms.NewFromConfig(awsCfg, func(ko *kms.Options) {
		if cfg.KMSEndpoint != "" {
			ko.BaseEndpoint = aws.String(cfg.KMSEndpoint)
		}
	})
}

func newReader(awsCfg aws.Config, cfg app.Config) app.PublicKeys {
	return reader{Client(awsCfg, cfg)}
}

type reader struct{ kms *kms.Client }

func (r reader) PublicKey(ctx context.Context, id string) (crypto.PublicKey, error) {
	return kmssign.PublicKey(ctx, r.kms, id)
}

func (r reader) Signer(ctx context.Context, id string) (crypto.Signer, error) {
	return kmssign.NewSigner(ctx, r.kms, id)
}

// Health lists one key.
func (r reader) Health(ctx context.Context) error {
	_, err := r.kms.ListKeys(ctx, &kms.ListKeysInput{Limit: aws.Int32(1)})
	return err
}
