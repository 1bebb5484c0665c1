package main

import (
	"context"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func keygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("out", "", "file to write the private key to (PKCS#8 PEM, mode 0600)")
	alg := fs.String("alg", "ecdsa-p256", "ecdsa-p256 or ed25519")
	force := fs.Bool("force", false, "replace an existing key file (the old private key is lost)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("keygen: -out is required")
	}
	k, err := rollout.GenerateKey(*alg)
	if err != nil {
		return err
	}
	pem, err := rollout.MarshalPrivateKeyPEM(k)
	if err != nil {
		return err
	}
	if err := writeKeyFile(*out, pem, *force); err != nil {
		return err
	}
	return printPublic(k.Public())
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
		return fmt.Errorf("keygen: %s exists; not replacing a private key (use -force to replace it)", path)
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

func pubkey(args []string) error {
	fs := flag.NewFlagSet("pubkey", flag.ContinueOnError)
	keyFile := fs.String("key", "", "private key file (PEM)")
	kmsKey := fs.String("kms-key", "", "KMS key id, ARN or alias")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var signers []crypto.Signer
	var err error
	switch {
	case *keyFile != "" && *kmsKey == "":
		signers, err = loadSigners(context.Background(), multi{*keyFile}, nil)
	case *kmsKey != "" && *keyFile == "":
		signers, err = loadSigners(context.Background(), nil, multi{*kmsKey})
	default:
		return errors.New("pubkey: give one of -key and -kms-key")
	}
	if err != nil {
		return err
	}
	return printPublic(signers[0].Public())
}

func printPublic(pub crypto.PublicKey) error {
	id, err := rollout.KeyID(pub)
	if err != nil {
		return err
	}
	pem, err := rollout.MarshalPublicKeyPEM(pub)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "keyid: %s\n", id)
	_, err = os.Stdout.Write(pem)
	return err
}

func sign(args []string) error {
	fs := flag.NewFlagSet("sign", flag.ContinueOnError)
	statement := fs.String("statement", "", "release statement JSON file (signed as is)")
	out := fs.String("out", "", "write the envelope here instead of stdout")
	var keys, kmsKeys multi
	fs.Var(&keys, "key", "private key file (repeatable)")
	fs.Var(&kmsKeys, "kms-key", "KMS key id, ARN or alias (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *statement == "" || len(keys)+len(kmsKeys) == 0 {
		return errors.New("sign: -statement and at least one -key or -kms-key are required")
	}
	payload, err := os.ReadFile(*statement)
	if err != nil {
		return err
	}
	signers, err := loadSigners(context.Background(), keys, kmsKeys)
	if err != nil {
		return err
	}
	env, err := rollout.SignEnvelope(payload, signers...)
	if err != nil {
		return err
	}
	if *out != "" {
		return os.WriteFile(*out, append(env, '\n'), 0o644)
	}
	_, err = fmt.Println(string(env))
	return err
}

func loadSigners(ctx context.Context, keyFiles, kmsKeys multi) ([]crypto.Signer, error) {
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
	client, err := kmsClient(ctx)
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
func kmsClient(ctx context.Context) (*kms.Client, error) {
	endpoint := os.Getenv("BC_KMS_ENDPOINT")
	cfg, err := awsConfig(ctx, endpoint != "")
	if err != nil {
		return nil, err
	}
	return kms.NewFromConfig(cfg, func(o *kms.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
