package main

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// keygenCommand makes a release signing key.
func (c *cli) keygenCommand() *cobra.Command {
	var out, alg string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --out KEY.pem [--alg ecdsa-p256|ed25519] [--force]",
		Short: "Make a release signing key; print its keyid and public PEM (for pins)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return usageErr(errors.New("keygen: --out is required"))
			}
			k, err := rollout.GenerateKey(alg)
			if err != nil {
				return usageErr(err)
			}
			pem, err := rollout.MarshalPrivateKeyPEM(k)
			if err != nil {
				return localErr(err)
			}
			if err := writeKeyFile(out, pem, force); err != nil {
				return localErr(err)
			}
			return c.printPublic(k.Public())
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the private key to (PKCS#8 PEM, mode 0600)")
	cmd.Flags().StringVar(&alg, "alg", rollout.AlgECDSAP256, "ecdsa-p256 or ed25519")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key file (the old private key is lost)")
	_ = cmd.RegisterFlagCompletionFunc("alg", fixed(rollout.AlgECDSAP256, rollout.AlgEd25519))
	return cmd
}

// writeKeyFile writes a private key with mode 0600, refusing to replace an
// existing file unless force: a key that signed releases must not vanish by
// a repeated command.
func writeKeyFile(path string, pem []byte, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keygen: %s exists; not replacing a private key (use --force to replace it)", path)
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

// pubkeyCommand prints a key's keyid and public PEM.
func (c *cli) pubkeyCommand() *cobra.Command {
	var keyFile, kmsKey string
	cmd := &cobra.Command{
		Use:   "pubkey (--key KEY.pem | --kms-key ID)",
		Short: "Print a signing key's keyid and public PEM (for pins)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var signers []crypto.Signer
			var err error
			switch {
			case keyFile != "" && kmsKey == "":
				signers, err = c.loadSigners(cmd.Context(), []string{keyFile}, nil)
			case kmsKey != "" && keyFile == "":
				signers, err = c.loadSigners(cmd.Context(), nil, []string{kmsKey})
			default:
				return usageErr(errors.New("pubkey: give one of --key and --kms-key"))
			}
			if err != nil {
				return localErr(err)
			}
			return c.printPublic(signers[0].Public())
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "private key file (PEM)")
	cmd.Flags().StringVar(&kmsKey, "kms-key", "", "KMS key id, ARN or alias (BC_KMS_ENDPOINT for local-kms)")
	return cmd
}

func (c *cli) printPublic(pub crypto.PublicKey) error {
	id, err := rollout.KeyID(pub)
	if err != nil {
		return localErr(err)
	}
	pem, err := rollout.MarshalPublicKeyPEM(pub)
	if err != nil {
		return localErr(err)
	}
	fmt.Fprintf(c.errOut, "keyid: %s\n", id)
	_, err = c.out.Write(pem)
	return err
}

// signCommand signs a release statement into a DSSE envelope.
func (c *cli) signCommand() *cobra.Command {
	var statement, out string
	var keys, kmsKeys []string
	cmd := &cobra.Command{
		Use:   "sign --statement FILE (--key KEY.pem | --kms-key ID)... [--out FILE]",
		Short: "Sign a release statement into a DSSE envelope (the manifest of releases register)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if statement == "" || len(keys)+len(kmsKeys) == 0 {
				return usageErr(errors.New("sign: --statement and at least one --key or --kms-key are required"))
			}
			payload, err := os.ReadFile(statement)
			if err != nil {
				return localErr(err)
			}
			signers, err := c.loadSigners(cmd.Context(), keys, kmsKeys)
			if err != nil {
				return localErr(err)
			}
			env, err := rollout.SignEnvelope(payload, signers...)
			if err != nil {
				return localErr(err)
			}
			if out != "" {
				return localErr(os.WriteFile(out, append(env, '\n'), 0o644))
			}
			_, err = fmt.Fprintln(c.out, string(env))
			return err
		},
	}
	cmd.Flags().StringVar(&statement, "statement", "", "release statement JSON file (signed as is)")
	cmd.Flags().StringVar(&out, "out", "", "write the envelope here instead of stdout")
	cmd.Flags().StringArrayVar(&keys, "key", nil, "private key file (repeatable)")
	cmd.Flags().StringArrayVar(&kmsKeys, "kms-key", nil, "KMS key id, ARN or alias (repeatable; BC_KMS_ENDPOINT for local-kms)")
	return cmd
}

func (c *cli) loadSigners(ctx context.Context, keyFiles, kmsKeys []string) ([]crypto.Signer, error) {
	var out []crypto.Signer
	for _, f := range keyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		k, err := rollout.ParsePrivateKeyPEM(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, k)
	}
	if len(kmsKeys) == 0 {
		return out, nil
	}
	client, err := c.kmsClient(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range kmsKeys {
		s, err := kmssign.NewSigner(ctx, client, id)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// kmsClient talks to AWS KMS, or to BC_KMS_ENDPOINT (local-kms) when set.
func (c *cli) kmsClient(ctx context.Context) (*kms.Client, error) {
	endpoint := c.getenv("BC_KMS_ENDPOINT")
	cfg, err := c.awsConfig(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	return kms.NewFromConfig(cfg, func(o *kms.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
