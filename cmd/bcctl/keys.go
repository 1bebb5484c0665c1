package main

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// keygenCommand makes a signing key: a release signer's, or a node's
// (nodes.register takes its public PEM; the agent signs its heartbeats).
func (c *cli) keygenCommand() *cobra.Command {
	var out, alg string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --out KEY.pem [--alg ecdsa-p256|ed25519] [--force]",
		Short: "Make a signing key (a release signer's or a node's); print its keyid and public PEM (for pins or nodes register)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return usageErr(errors.New("keygen: --out is required"))
			}
			k, err := release.GenerateKey(alg)
			if err != nil {
				return usageErr(err)
			}
			pem, err := release.MarshalPrivateKeyPEM(k)
			if err != nil {
				return localErr(err)
			}
			if err := dsse.WriteKeyFile(out, pem, force, "a private key"); err != nil {
				return localErr(err)
			}
			return c.printPublic(k.Public())
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the private key to (PKCS#8 PEM, mode 0600)")
	cmd.Flags().StringVar(&alg, "alg", release.AlgECDSAP256, "ecdsa-p256 or ed25519")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key file (the old private key is lost)")
	_ = cmd.RegisterFlagCompletionFunc("alg", fixed(release.AlgECDSAP256, release.AlgEd25519))
	return cmd
}

// pubkeyCommand prints a key's keyid and public PEM.
func (c *cli) pubkeyCommand() *cobra.Command {
	var keyFile, kmsKey, logOrigin string
	cmd := &cobra.Command{
		Use:   "pubkey (--key KEY.pem | --kms-key ID) [--log-origin ORIGIN]",
		Short: "Print a signing key's keyid and public PEM (for pins), or a release log key's verifier key",
		Long: `Prints a signing key's keyid (on stderr) and its public key as PEM, what release pins and node
registrations take. With --log-origin, the key is a release log key and it prints instead the C2SP
signed-note verifier key of the log of that origin (<origin>+<key hash>+<base64 key>): what bcctl
releases verify (--log-key, BC_RELEASE_LOG_VKEY) and bcd-agent (--log-key) pin.`,
		Args: cobra.NoArgs,
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
			if logOrigin != "" {
				k, err := release.NewLogKey(logOrigin, signers[0].Public())
				if err != nil {
					return localErr(err)
				}
				_, err = fmt.Fprintln(c.out, k.VerifierKey())
				return err
			}
			return c.printPublic(signers[0].Public())
		},
	}
	cmd.Flags().StringVar(&logOrigin, "log-origin", "", "print the release log verifier key of this origin (BC_RELEASE_LOG_ORIGIN of the deployment)")
	cmd.Flags().StringVar(&keyFile, "key", "", "private key file (PEM)")
	cmd.Flags().StringVar(&kmsKey, "kms-key", "", "KMS key id, ARN or alias (BC_KMS_ENDPOINT for local-kms)")
	return cmd
}

func (c *cli) printPublic(pub crypto.PublicKey) error {
	id, err := release.KeyID(pub)
	if err != nil {
		return localErr(err)
	}
	pem, err := release.MarshalPublicKeyPEM(pub)
	if err != nil {
		return localErr(err)
	}
	fmt.Fprintf(c.errOut, "keyid: %s\n", id)
	_, err = c.out.Write(pem)
	return err
}

// Keyid modes of bcctl sign --keyid (anything else is the keyid itself).
const (
	keyIDSPKI = "spki"
	keyIDNone = "none"
)

// signCommand signs a release statement into a DSSE envelope, after
// checking the statement as the API will.
func (c *cli) signCommand() *cobra.Command {
	var statement, out, keyID string
	var keys, kmsKeys []string
	cmd := &cobra.Command{
		Use:   "sign --statement FILE (--key KEY.pem | --kms-key ID)... [--keyid spki|none|ID] [--out FILE]",
		Short: "Sign a release statement into a DSSE envelope (the manifest of releases register)",
		Long: `Checks the release statement as releases register will (its fields, their rules, expiry), then signs
it into a DSSE envelope with each key, and says what it signed on stderr.

Each signature names its key by --keyid: spki (the default) writes the hex SHA-256 of the key's
SubjectPublicKeyInfo DER, the keyid bcctl keygen and pubkey print and the API reports; none leaves
the keyid out; anything else is written as the keyid (one key only). The API tries every pinned
key whatever a keyid says. Other DSSE verifiers (go-securesystemslib, sigstore) skip a signature
whose keyid is not their verifier's: sign with --keyid none for them, or with the keyid they expect.
ECDSA signatures are ASN.1 DER.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if statement == "" || len(keys)+len(kmsKeys) == 0 {
				return usageErr(errors.New("sign: --statement and at least one --key or --kms-key are required"))
			}
			n := len(keys) + len(kmsKeys)
			if keyID != keyIDSPKI && keyID != keyIDNone && n > 1 {
				return usageErr(fmt.Errorf("sign: --keyid %q names one key, and %d keys sign: use spki or none", keyID, n))
			}
			payload, err := os.ReadFile(statement)
			if err != nil {
				return localErr(err)
			}
			st, err := checkStatement(statement, payload, c.now())
			if err != nil {
				return localErr(err)
			}
			signers, err := c.loadSigners(cmd.Context(), keys, kmsKeys)
			if err != nil {
				return localErr(err)
			}
			ids := make([]string, len(signers))
			for i, s := range signers {
				switch keyID {
				case keyIDSPKI:
					if ids[i], err = release.KeyID(s.Public()); err != nil {
						return localErr(err)
					}
				case keyIDNone:
				default:
					ids[i] = keyID
				}
			}
			env, err := release.SignEnvelopeNaming(payload, ids, signers...)
			if err != nil {
				return localErr(err)
			}
			if out != "" {
				if err := os.WriteFile(out, append(env, '\n'), 0o644); err != nil {
					return localErr(err)
				}
			} else if _, err := fmt.Fprintln(c.out, string(env)); err != nil {
				return err
			}
			named := "no keyid"
			if keyID != keyIDNone {
				named = "keyid " + strings.Join(ids, ", ")
			}
			dest := "stdout"
			if out != "" {
				dest = out
			}
			fmt.Fprintf(c.errOut, "signed release %s (sequence %d) with %s (%s) → %s\n",
				st.Version, st.Sequence, strictjson.Plural(len(signers), "key"), named, dest)
			return nil
		},
	}
	cmd.Flags().StringVar(&statement, "statement", "", "release statement JSON file (checked, then signed as is)")
	cmd.Flags().StringVar(&out, "out", "", "write the envelope here instead of stdout")
	cmd.Flags().StringArrayVar(&keys, "key", nil, "private key file (repeatable)")
	cmd.Flags().StringArrayVar(&kmsKeys, "kms-key", nil, "KMS key id, ARN or alias (repeatable; BC_KMS_ENDPOINT for local-kms)")
	cmd.Flags().StringVar(&keyID, "keyid", keyIDSPKI, "the keyid each signature names: spki (hex SHA-256 of the key's SubjectPublicKeyInfo DER), none, or an ID (one key only)")
	_ = cmd.RegisterFlagCompletionFunc("keyid", fixed(keyIDSPKI, keyIDNone))
	return cmd
}

// checkStatement checks a release statement file as releases register will
// (release.ParseStatement), saying in its own words what a file that is
// already a signed manifest is.
func checkStatement(name string, payload []byte, now time.Time) (release.Statement, error) {
	st, err := release.ParseStatement(payload, now)
	if err == nil {
		return st, nil
	}
	if looksSigned(payload) {
		return st, fmt.Errorf("%s is already a signed manifest (a DSSE envelope): register it with bcctl releases register --manifest %s", name, name)
	}
	msg := err.Error()
	if e := apierr.As(err); e != nil {
		msg = strings.ReplaceAll(e.Message, "manifest.payload.", "")
		msg = strings.ReplaceAll(msg, "manifest.payload", "the statement")
	}
	return st, fmt.Errorf("%s is not a valid release statement: %s (nothing signed)", name, msg)
}

// looksSigned reports whether JSON is a DSSE envelope rather than a
// statement: an object with payloadType or signatures.
func looksSigned(data []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	_, pt := probe["payloadType"]
	_, sigs := probe["signatures"]
	return pt || sigs
}

func (c *cli) loadSigners(ctx context.Context, keyFiles, kmsKeys []string) ([]crypto.Signer, error) {
	var out []crypto.Signer
	for _, f := range keyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		k, err := release.ParsePrivateKeyPEM(data)
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
