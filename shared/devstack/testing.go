package devstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
)

// shared is the one stack of a test binary (Shared, Main).
var shared struct {
	once  sync.Once
	stack *Stack
	err   error
}

// Shared returns the test binary's stack, starting it on first use:
// dynalite in memory and local-kms seeded with localstack/kms-seed.yaml (the
// dev release key DevReleaseKeyID). Tests isolate their data with NewTable.
// A package using it calls Main from TestMain so the stack is closed; should
// the binary die first, the kernel kills the servers (Linux).
// BC_DEVSTACK_LOG=debug prints the servers' output to stderr.
//
// Packages that devstack imports (shared/dynamo) use it from an external
// test package (package dynamo_test) to avoid an import cycle.
func Shared(tb testing.TB) *Stack {
	tb.Helper()
	shared.once.Do(func() {
		root, err := Root()
		if err != nil {
			shared.err = err
			return
		}
		logger := slog.New(slog.DiscardHandler)
		if lvl := os.Getenv("BC_DEVSTACK_LOG"); lvl != "" {
			var l slog.Level
			_ = l.UnmarshalText([]byte(lvl))
			logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
		}
		shared.stack, shared.err = Start(context.Background(), Options{
			Root: root, KMSSeed: filepath.Join(root, KMSSeedFile), Logger: logger})
	})
	if shared.err != nil {
		tb.Fatalf("devstack: %v", shared.err)
	}
	return shared.stack
}

// Main runs the tests and closes the shared stack: call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if shared.stack != nil {
		if err := shared.stack.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "devstack: close: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// NewTable creates a table with the control plane's definition under a
// unique name, so tests of one binary never share state, and deletes it when
// the test ends. dynalite has no TTL; that is not an error here.
func NewTable(tb testing.TB, s *Stack) (tableName string) {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "bc-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := s.DynamoDB()
	if _, err := schema.CreateTable(ctx, client, name); err != nil {
		tb.Fatalf("devstack: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

// LogSigner is a release-log checkpoint signer for origin on a fresh ECDSA
// P-256 key of s's local-kms (kms:Sign, as in production), for a test's
// own log.
func LogSigner(tb testing.TB, s *Stack, origin string) *release.LogSigner {
	tb.Helper()
	ctx := context.Background()
	c := s.KMS()
	k, err := c.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecEccNistP256, KeyUsage: kmstypes.KeyUsageTypeSignVerify})
	if err != nil {
		tb.Fatal(err)
	}
	ks, err := kmssign.NewSigner(ctx, c, aws.ToString(k.KeyMetadata.KeyId))
	if err != nil {
		tb.Fatal(err)
	}
	signer, err := release.NewLogSigner(origin, ks)
	if err != nil {
		tb.Fatal(err)
	}
	return signer
}

// DevLogKey is the dev release log's key (DevReleaseLogKeyID under
// DevReleaseLogOrigin, of the shared stack's local-kms): what the agents
// of a test stack pin.
func DevLogKey(tb testing.TB) *release.LogKey {
	tb.Helper()
	pub, err := kmssign.PublicKey(context.Background(), Shared(tb).KMS(), DevReleaseLogKeyID)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := release.NewLogKey(DevReleaseLogOrigin, pub)
	if err != nil {
		tb.Fatal(err)
	}
	return &k
}
