package devstack

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/iam"
)

const helperEnv = "BC_DEVSTACK_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helper()
		return
	}
	Main(m)
}

// helper starts a stack, prints its children's pids and waits to be killed
// (TestChildrenDieWithParent).
func helper() {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(s.PIDs())
	select {}
}

func root(t *testing.T) string {
	t.Helper()
	r, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readPEM(t *testing.T, path, typ string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != typ {
		t.Fatalf("%s: no %s PEM block", path, typ)
	}
	return b.Bytes
}

// The committed dev key files agree with each other and with the seed, and
// the seed names DevReleaseKeyID and DevReleaseKeyAlias.
func TestDevKeyFilesAgree(t *testing.T) {
	r := root(t)
	priv, err := x509.ParseECPrivateKey(readPEM(t, filepath.Join(r, KeyFile), "EC PRIVATE KEY"))
	if err != nil {
		t.Fatalf("%s must be SEC1 EC PRIVATE KEY (local-kms needs it): %v", KeyFile, err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if pins := readPEM(t, filepath.Join(r, PinsFile), "PUBLIC KEY"); !bytes.Equal(pins, der) {
		t.Fatalf("%s is not the public key of %s", PinsFile, KeyFile)
	}
	seed, err := os.ReadFile(filepath.Join(r, KMSSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"KeyId: " + DevReleaseKeyID, "AliasName: " + DevReleaseKeyAlias, "TargetKeyId: " + DevReleaseKeyID} {
		if !strings.Contains(string(seed), want) {
			t.Errorf("%s does not contain %q", KMSSeedFile, want)
		}
	}
}

func TestDevDefaultsExist(t *testing.T) {
	for k, v := range DevDefaults(root(t)) {
		if strings.HasSuffix(k, "_FILE") {
			if _, err := os.Stat(v); err != nil {
				t.Errorf("%s: %v", k, err)
			}
		}
	}
}

func TestStart(t *testing.T) {
	s := Shared(t)
	ctx := context.Background()
	for _, ep := range []string{s.DynamoEndpoint, s.KMSEndpoint} {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
			t.Errorf("endpoint %q, want http://127.0.0.1:<port>", ep)
		}
	}
	if s.Region != DefaultRegion {
		t.Errorf("region %q, want %q", s.Region, DefaultRegion)
	}

	t.Run("table", func(t *testing.T) {
		name := NewTable(t, s)
		other := NewTable(t, s)
		if name == other {
			t.Fatalf("NewTable returned %q twice", name)
		}
		out, err := s.DynamoDB().DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Table.TableStatus != dbtypes.TableStatusActive {
			t.Errorf("table status %s", out.Table.TableStatus)
		}
		if len(out.Table.GlobalSecondaryIndexes) != 1 || aws.ToString(out.Table.GlobalSecondaryIndexes[0].IndexName) != schema.IndexDue {
			t.Errorf("indexes: %+v", out.Table.GlobalSecondaryIndexes)
		}
	})

	t.Run("kms seed", func(t *testing.T) {
		want := readPEM(t, filepath.Join(root(t), PinsFile), "PUBLIC KEY")
		for _, id := range []string{DevReleaseKeyID, DevReleaseKeyAlias} {
			out, err := s.KMS().GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(id)})
			if err != nil {
				t.Fatalf("GetPublicKey %s: %v", id, err)
			}
			if !bytes.Equal(out.PublicKey, want) {
				t.Errorf("GetPublicKey %s is not the key of %s", id, PinsFile)
			}
			if out.KeySpec != kmstypes.KeySpecEccNistP256 || out.KeyUsage != kmstypes.KeyUsageTypeSignVerify {
				t.Errorf("key %s: %s %s", id, out.KeySpec, out.KeyUsage)
			}
		}
		// A kms:Sign signature verifies under the pinned PEM.
		digest := sha256.Sum256([]byte("release statement"))
		sig, err := s.KMS().Sign(ctx, &kms.SignInput{KeyId: aws.String(DevReleaseKeyID), Message: digest[:],
			MessageType: kmstypes.MessageTypeDigest, SigningAlgorithm: kmstypes.SigningAlgorithmSpecEcdsaSha256})
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.ParsePKIXPublicKey(want)
		if err != nil {
			t.Fatal(err)
		}
		if !ecdsa.VerifyASN1(pub.(*ecdsa.PublicKey), digest[:], sig.Signature) {
			t.Error("kms:Sign signature does not verify under the pinned key")
		}
	})
}

// Close kills both servers; their ports stop answering.
func TestCloseStopsChildren(t *testing.T) {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pids := s.PIDs()
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range s.children {
		if !c.exited() {
			t.Errorf("%s (pid %d) running after Close", c.name, c.cmd.Process.Pid)
		}
	}
	for _, ep := range []string{s.DynamoEndpoint, s.KMSEndpoint} {
		u, _ := url.Parse(ep)
		if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", ep)
		}
	}
}

// State under StateDir survives a restart: dynalite's LevelDB and
// local-kms's data; the seed is applied once and is harmless the second time.
func TestStateDirPersists(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{StateDir: dir, KMSSeed: filepath.Join(root(t), KMSSeedFile)}
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := Start(ctx, opts); err == nil || !strings.Contains(err.Error(), "in use by another local stack") {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second stack on the same state dir: %v", err)
	}
	if _, err := schema.CreateTable(ctx, s.DynamoDB(), "persisted"); err != nil {
		t.Fatal(err)
	}
	item := map[string]dbtypes.AttributeValue{schema.AttrPK: &dbtypes.AttributeValueMemberS{Value: "p"},
		schema.AttrSK: &dbtypes.AttributeValueMemberS{Value: "s"}}
	if _, err := s.DynamoDB().PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("persisted"), Item: item}); err != nil {
		t.Fatal(err)
	}
	key, err := s.KMS().CreateKey(ctx, &kms.CreateKeyInput{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	before := []string{s.DynamoEndpoint, s.KMSEndpoint}
	s, err = Start(ctx, opts)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s.Close()
	if after := []string{s.DynamoEndpoint, s.KMSEndpoint}; !slices.Equal(after, before) {
		t.Errorf("endpoints moved across a restart: %v, then %v", before, after)
	}
	got, err := s.DynamoDB().GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("persisted"), Key: item, ConsistentRead: aws.Bool(true)})
	if err != nil || got.Item == nil {
		t.Fatalf("item lost across restart: %v %v", got, err)
	}
	if _, err := s.KMS().DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: key.KeyMetadata.KeyId}); err != nil {
		t.Errorf("kms key lost across restart: %v", err)
	}
	if _, err := s.KMS().GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(DevReleaseKeyID)}); err != nil {
		t.Errorf("seeded key after restart: %v", err)
	}
}

// A remembered port another process holds now is given up for a free
// one, and the new ports are remembered.
func TestRememberedPortsTakenFallBack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Start(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	first := readPorts(dir)
	if first.DynamoDB != portOf(s.DynamoEndpoint) || first.KMS != portOf(s.KMSEndpoint) {
		t.Errorf("remembered %+v, endpoints %s %s", first, s.DynamoEndpoint, s.KMSEndpoint)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"127.0.0.1:" + strconv.Itoa(first.DynamoDB), ":" + strconv.Itoa(first.KMS)} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("taking %s: %v", addr, err)
		}
		defer l.Close()
	}
	s, err = Start(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatalf("start with the remembered ports taken: %v", err)
	}
	defer s.Close()
	now := readPorts(dir)
	if now.DynamoDB == first.DynamoDB || now.KMS == first.KMS || now.DynamoDB != portOf(s.DynamoEndpoint) || now.KMS != portOf(s.KMSEndpoint) {
		t.Errorf("ports %+v after %+v were taken; endpoints %s %s", now, first, s.DynamoEndpoint, s.KMSEndpoint)
	}
	if _, err := s.KMS().ListKeys(ctx, &kms.ListKeysInput{}); err != nil {
		t.Error(err)
	}
}

// A state dir wiped (make clean) starts on the ports it had: those derived
// from its path, which a fresh one starts on; another dir derives others.
func TestPortsSurviveAWipe(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	want := preferredPorts(dir)
	if other := preferredPorts(dir + "-2"); other == want || want.KMS != want.DynamoDB+1 ||
		want.DynamoDB < derivedBase || want.KMS >= derivedBase+2*derivedSlots {
		t.Fatalf("derived ports %+v (another dir's %+v)", want, other)
	}
	for _, p := range []int{want.DynamoDB, want.KMS} {
		if !portFree("", p) {
			t.Skipf("port %d is held by another process", p)
		}
	}
	for run := range 2 {
		s, err := Start(ctx, Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if got := (ports{DynamoDB: portOf(s.DynamoEndpoint), KMS: portOf(s.KMSEndpoint)}); got != want {
			t.Errorf("run %d: ports %+v, want the derived %+v", run, got, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// local-kms on a port taken between the check and its bind exits during
// start, which is what startKMS takes as the cue to retry on PORT=0.
func TestKMSOnATakenPortExits(t *testing.T) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tl, err := findTools(root(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{Region: DefaultRegion, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := startKMSOn(ctx, tl, t.TempDir(), "", l.Addr().(*net.TCPAddr).Port, s)
	if err == nil || c == nil || !c.exited() {
		if c != nil {
			c.stop(time.Second)
		}
		t.Fatalf("local-kms on a taken port: err %v, exited %v", err, c != nil && c.exited())
	}
}

// local-kms skips a seed whose ECC key is not SEC1 PEM without failing:
// Start must fail instead.
func TestBadSeedFails(t *testing.T) {
	r := root(t)
	priv, err := x509.ParseECPrivateKey(readPEM(t, filepath.Join(r, KeyFile), "EC PRIVATE KEY"))
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	p := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	seed := "Keys:\n  Asymmetric:\n    Ecc:\n      - Metadata:\n          KeyId: " + DevReleaseKeyID +
		"\n          KeyUsage: SIGN_VERIFY\n        PrivateKeyPem: |\n          " +
		strings.ReplaceAll(strings.TrimSpace(string(p)), "\n", "\n          ") + "\n"
	path := filepath.Join(t.TempDir(), "seed.yaml")
	if err := os.WriteFile(path, []byte(seed), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Options{KMSSeed: path})
	if err == nil {
		s.Close()
		t.Fatal("Start accepted a seed local-kms skipped")
	}
	if !strings.Contains(err.Error(), "skipped the seed file") {
		t.Errorf("error %q does not say the seed was skipped", err)
	}

	if _, err := Start(context.Background(), Options{KMSSeed: filepath.Join(t.TempDir(), "missing.yaml")}); err == nil {
		t.Error("Start accepted a missing seed file")
	}
}

func TestMissingTools(t *testing.T) {
	_, err := Start(context.Background(), Options{Root: t.TempDir()})
	if !errors.Is(err, ErrToolsMissing) || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("error %v, want ErrToolsMissing saying to run make tools", err)
	}
}

func TestLineWriter(t *testing.T) {
	var lines []string
	w := &lineWriter{onLine: func(s string) { lines = append(lines, s) }}
	_, _ = w.Write([]byte("\x1b[36mINFO\x1b[0m[t] Local KMS started on 0.0.0.0:4599   \nhalf"))
	_, _ = w.Write([]byte(" line\n\n"))
	_, _ = w.Write([]byte("tail"))
	w.flush()
	want := []string{"INFO[t] Local KMS started on 0.0.0.0:4599", "half line", "tail"}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	if m := kmsStarted.FindStringSubmatch(lines[0]); m == nil || m[1] != "4599" {
		t.Errorf("kmsStarted does not match %q", lines[0])
	}
	if m := dynaliteListening.FindStringSubmatch("Dynalite listening at: http://127.0.0.1:4567"); m == nil || m[1] != "4567" {
		t.Error("dynaliteListening does not match dynalite's line")
	}
}

// The dev policy grants what localstack/policy.json promises (the README).
func TestDevPolicy(t *testing.T) {
	p, err := iam.LoadPolicy(filepath.Join(root(t), PolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		principal, permission, scope string
		allow                        bool
	}{
		{"admin", "compute:fleet:admin", "compute-fleet", true},
		{"admin", "compute:pools:admin", "tenant:globex", true},
		{"alice", "compute:reservations:create", "tenant:acme", true},
		{"alice", "compute:reservations:release", "tenant:acme", true},
		{"alice", "compute:quotas:read", "tenant:acme", true},
		{"alice", "compute:pools:read", "tenant:acme", true},
		{"alice", "compute:pools:admin", "tenant:acme", false},
		{"alice", "compute:reservations:create", "tenant:globex", false},
		{"alice", "compute:fleet:admin", "compute-fleet", false},
		{"ops", "compute:pools:admin", "tenant:acme", true},
		{"ops", "compute:pools:read", "tenant:acme", true},
		{"ops", "compute:pools:admin", "tenant:globex", false},
		{"ops", "compute:reservations:create", "tenant:acme", false},
		{"mallory", "compute:pools:read", "tenant:acme", false},
		{"fleet-agent", "compute:nodes:report", "node:gpu-pool-1/gpu.h100-node-0", true},
		{"fleet-agent", "compute:pools:read", "tenant:acme", false},
		{"fleet-agent", "compute:nodes:report", "tenant:acme", false},
	} {
		d, err := p.Decide(context.Background(), iam.Request{Principal: tc.principal, Permission: tc.permission, Scope: tc.scope})
		if err != nil || d.Allow != tc.allow {
			t.Errorf("%s %s @ %s: allow=%v err=%v, want %v", tc.principal, tc.permission, tc.scope, d.Allow, err, tc.allow)
		}
	}
}

// BenchmarkStart measures a cold start of both servers until they answer
// (in memory, seeded, as Shared starts them); Close is not timed.
func BenchmarkStart(b *testing.B) {
	r, err := Root()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Start(context.Background(), Options{Root: r, KMSSeed: filepath.Join(r, KMSSeedFile)})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// A client that drops its connection half way through a request body (a
// cancelled context does) leaves dynalite serving: unguarded, dynalite
// 4.0.0 rethrows the stream's error and exits.
func TestDynaliteSurvivesAbortedRequests(t *testing.T) {
	s := Shared(t)
	u, err := url.Parse(s.DynamoEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-amz-json-1.0\r\n"+
			"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{\"Limit\":", u.Host)
		conn.Close()
	}
	// The server still answers (after it has seen the aborts).
	for i := range 20 {
		_, err = s.DynamoDB().ListTables(context.Background(), &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		if err != nil {
			t.Fatalf("ListTables %d after aborted requests: %v", i, err)
		}
	}
}

// dynalite-guard keeps the trees of the expressions dynalite parsed: every
// answer must stay what dynalite alone gives. Each request below runs
// twice or shares an expression with another, so the second is answered
// from the cache: a condition still evaluated against the item as it is
// now, a malformed expression refused with its own error each time, and a
// name or value another expression of the request uses (or leaves unused)
// counted as dynalite counts it; and the same expressions with other
// values compare and write those values, refuse by their types, and read
// BETWEEN's bounds and attribute_type's name (a cache that kept the first
// request's values, or ignored what those two read, fails it).
func TestParsedExpressionsAnswerAsDynalite(t *testing.T) {
	s := Shared(t)
	table := NewTable(t, s)
	db := s.DynamoDB()
	ctx := context.Background()
	key := map[string]dbtypes.AttributeValue{
		schema.AttrPK: &dbtypes.AttributeValueMemberS{Value: "parse"}, schema.AttrSK: &dbtypes.AttributeValueMemberS{Value: "1"}}
	names := map[string]string{"#a": "a", "#b": "b"}
	vals := map[string]dbtypes.AttributeValue{":v": &dbtypes.AttributeValueMemberN{Value: "1"}}
	update := func(expr, cond string) error {
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
			UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: vals})
		return err
	}
	refusal := func(err error) string {
		var v interface {
			ErrorCode() string
			ErrorMessage() string
		}
		if !errors.As(err, &v) {
			return fmt.Sprint(err)
		}
		if ve := (*dbtypes.ConditionalCheckFailedException)(nil); errors.As(err, &ve) {
			return "ConditionalCheckFailed"
		}
		return v.ErrorCode() + ": " + v.ErrorMessage()
	}
	steps := []struct {
		expr, cond string
		want       string // "" succeeds, else a part of the refusal
	}{
		// The update uses #a and #b, the condition #b again.
		{"SET #a = :v, #b = :v", "attribute_not_exists(#b)", ""},
		// The same condition: the item has b now.
		{"SET #a = :v, #b = :v", "attribute_not_exists(#b)", "ConditionalCheckFailed"},
		// The same condition with an update that uses #a only: the
		// condition uses #b, so nothing is left unused.
		{"SET #a = :v", "attribute_not_exists(#b)", "ConditionalCheckFailed"},
		{"SET #a = :v", "attribute_exists(#b)", ""},
		// An update that uses #a and a condition that uses #a: #b unused.
		{"SET #a = :v", "attribute_exists(#a)", "unused"},
		{"SET #a = :v", "attribute_exists(#a)", "unused"},
		// Malformed, twice.
		{"SET #a = :v", "attribute_exists(#b", "Syntax error"},
		{"SET #a = :v", "attribute_exists(#b", "Syntax error"},
		{"SET #a = :v", "attribute_exists(#b)", ""},
	}
	var refusals []string
	for i, st := range steps {
		got := ""
		if err := update(st.expr, st.cond); err != nil {
			got = refusal(err)
		}
		if st.want == "" && got != "" || st.want != "" && !strings.Contains(got, st.want) {
			t.Errorf("step %d: %s if %s: got %q, want %q", i, st.expr, st.cond, got, st.want)
		}
		refusals = append(refusals, got)
	}
	if refusals[4] != refusals[5] || refusals[6] != refusals[7] {
		t.Errorf("a repeated refusal changed: %q then %q; %q then %q", refusals[4], refusals[5], refusals[6], refusals[7])
	}
	// A query's key condition, repeated, reads the items as they are.
	count := func() int32 {
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table),
			KeyConditionExpression:    aws.String("#p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": schema.AttrPK},
			ExpressionAttributeValues: map[string]dbtypes.AttributeValue{":p": &dbtypes.AttributeValueMemberS{Value: "parse"}}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Count
	}
	before := count()
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]dbtypes.AttributeValue{
		schema.AttrPK: &dbtypes.AttributeValueMemberS{Value: "parse"}, schema.AttrSK: &dbtypes.AttributeValueMemberS{Value: "2"}}}); err != nil {
		t.Fatal(err)
	}
	if after := count(); before != 1 || after != 2 {
		t.Errorf("the query counted %d items, then %d after a put; want 1, then 2", before, after)
	}

	// The same texts and names with other values: each request's own
	// values are the ones compared and written, their types decide the
	// refusals, and BETWEEN's bounds and attribute_type's name are read.
	n := func(v string) dbtypes.AttributeValue { return &dbtypes.AttributeValueMemberN{Value: v} }
	str := func(v string) dbtypes.AttributeValue { return &dbtypes.AttributeValueMemberS{Value: v} }
	valued := []struct {
		expr, cond string
		vals       map[string]dbtypes.AttributeValue
		want       string // "" succeeds, else a part of the refusal
		b          string // then b, when it succeeds
	}{
		{"SET #b = :w", "#a = :v", map[string]dbtypes.AttributeValue{":v": n("1"), ":w": n("7")}, "", "7"},
		{"SET #b = :w", "#a = :v", map[string]dbtypes.AttributeValue{":v": n("2"), ":w": n("8")}, "ConditionalCheckFailed", "7"},
		{"SET #b = :w", "#a = :v", map[string]dbtypes.AttributeValue{":v": n("1"), ":w": n("9")}, "", "9"},
		{"SET #b = #b + :w", "#a = :v", map[string]dbtypes.AttributeValue{":v": n("1"), ":w": n("1")}, "", "10"},
		{"SET #b = #b + :w", "#a = :v", map[string]dbtypes.AttributeValue{":v": n("1"), ":w": str("1")}, "Incorrect operand type", "10"},
		{"SET #b = :w", "#a BETWEEN :v AND :x", map[string]dbtypes.AttributeValue{":v": n("0"), ":w": n("11"), ":x": n("5")}, "", "11"},
		{"SET #b = :w", "#a BETWEEN :v AND :x", map[string]dbtypes.AttributeValue{":v": n("5"), ":w": n("12"), ":x": n("0")}, "upper bound", "11"},
		{"SET #b = :w", "attribute_type(#a, :v)", map[string]dbtypes.AttributeValue{":v": str("N"), ":w": n("13")}, "", "13"},
		{"SET #b = :w", "attribute_type(#a, :v)", map[string]dbtypes.AttributeValue{":v": str("Q"), ":w": n("14")}, "Invalid attribute type name", "13"},
	}
	for i, st := range valued {
		got := ""
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
			UpdateExpression: aws.String(st.expr), ConditionExpression: aws.String(st.cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: st.vals}); err != nil {
			got = refusal(err)
		}
		if st.want == "" && got != "" || st.want != "" && !strings.Contains(got, st.want) {
			t.Errorf("valued step %d: %s if %s: got %q, want %q", i, st.expr, st.cond, got, st.want)
		}
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := out.Item["b"].(*dbtypes.AttributeValueMemberN); !ok || b.Value != st.b {
			t.Errorf("valued step %d: %s if %s: b is %v, want %s", i, st.expr, st.cond, out.Item["b"], st.b)
		}
	}

	// The same texts with other names: each request's own names are the
	// paths written, and names that are the same attribute (one another, or
	// one the text names itself) overlap.
	named := []struct {
		expr  string
		names map[string]string
		want  string // "" succeeds, else a part of the refusal
	}{
		{"SET #m = :v", map[string]string{"#m": "m"}, ""},
		{"SET #m.#k = :v", map[string]string{"#m": "m", "#k": "x"}, ""},
		{"SET #m.#k = :v", map[string]string{"#m": "m", "#k": "y"}, ""},
		{"SET #p = :v, #q = :v", map[string]string{"#p": "c", "#q": "d"}, ""},
		{"SET #p = :v, #q = :v", map[string]string{"#p": "e", "#q": "e"}, "overlap with each other; must remove or rewrite one of these paths; path one: [e], path two: [e]"},
		{"SET #p = :v, #q = :v", map[string]string{"#p": "f", "#q": "g"}, ""},
		{"SET h = :v, #q = :v", map[string]string{"#q": "i"}, ""},
		{"SET h = :v, #q = :v", map[string]string{"#q": "h"}, "path one: [h], path two: [h]"},
	}
	for i, st := range named {
		v := n(fmt.Sprint(20 + i))
		if i == 0 {
			v = &dbtypes.AttributeValueMemberM{Value: map[string]dbtypes.AttributeValue{}}
		}
		got := ""
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
			UpdateExpression: aws.String(st.expr), ExpressionAttributeNames: st.names,
			ExpressionAttributeValues: map[string]dbtypes.AttributeValue{":v": v}}); err != nil {
			got = refusal(err)
		}
		if st.want == "" && got != "" || st.want != "" && !strings.Contains(got, st.want) {
			t.Errorf("named step %d: %s with %v: got %q, want %q", i, st.expr, st.names, got, st.want)
		}
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range out.Item {
		if nv, ok := v.(*dbtypes.AttributeValueMemberN); ok {
			got[k] = nv.Value
		}
	}
	if m, ok := out.Item["m"].(*dbtypes.AttributeValueMemberM); ok {
		for k, v := range m.Value {
			got["m."+k] = v.(*dbtypes.AttributeValueMemberN).Value
		}
	}
	want := map[string]string{"a": "1", "b": "13", "m.x": "21", "m.y": "22", "c": "23", "d": "23", "f": "25", "g": "25", "h": "26", "i": "26"}
	if !maps.Equal(got, want) {
		t.Errorf("after the named steps the item holds %v, want %v", got, want)
	}
}
