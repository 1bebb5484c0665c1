package app_test

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

func statement(version string, seq int64) []byte {
	return []byte(fmt.Sprintf(`{"version":%q,"sequence":%d,"binaries":[`+
		`{"platform":"linux/amd64","url":"https://dl.example.com/bcd-%[1]s-amd64","sha256":"%064x","size":1048576},`+
		`{"platform":"linux/arm64","url":"https://dl.example.com/bcd-%[1]s-arm64","sha256":"%064x","size":1048577}]}`,
		version, seq, seq, seq+1))
}

func manifest(t *testing.T, payload []byte, signers ...crypto.Signer) json.RawMessage {
	t.Helper()
	env, err := release.SignEnvelope(payload, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func newKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := release.GenerateKey("ecdsa-p256")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReleasesEndToEnd(t *testing.T) {
	key := newKey(t)
	h := newHarness(t, setup{config: func(c *app.Config) { c.PinsFile = teststack.WritePins(t, key.Public()) }})
	m := manifest(t, statement("1.4.0", 7), key)
	reg := map[string]any{"tenantId": "platform", "manifest": m}

	a := h.call("admin", "releases.register", reg)
	if a.Status != 200 || a.Body["replayed"] != false {
		t.Fatalf("register: %d %s", a.Status, a.Raw)
	}
	rel := a.Body["release"].(map[string]any)
	keyID, _ := release.KeyID(key.Public())
	if rel["version"] != "1.4.0" || rel["sequence"] != 7.0 || !strings.HasPrefix(rel["manifestDigest"].(string), "sha256:") ||
		fmt.Sprint(rel["signers"]) != fmt.Sprint([]any{keyID}) || len(rel["binaries"].([]any)) != 2 {
		t.Fatalf("release: %s", a.Raw)
	}
	if by := rel["registeredBy"].(map[string]any); by["tenantId"] != "platform" || by["principal"] != "admin" {
		t.Fatalf("registeredBy: %v", by)
	}
	// The release is entry 0 of the log, under a checkpoint the dev log
	// key signed: a tree of one entry, whose root is the payload's leaf.
	logged := a.Body["log"].(map[string]any)
	pub, err := kmssign.PublicKey(context.Background(), devstack.Shared(t).KMS(), devstack.DevReleaseLogKeyID)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := release.NewLogKey(devstack.DevReleaseLogOrigin, pub)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := lk.Open([]byte(logged["checkpoint"].(string)))
	if err != nil || logged["index"] != 0.0 || cp.Size != 1 || cp.Root != release.LeafHash(statement("1.4.0", 7)) {
		t.Fatalf("log: %v: checkpoint %+v, %v", logged, cp, err)
	}

	if a = h.call("admin", "releases.register", reg); a.Status != 200 || a.Body["replayed"] != true {
		t.Fatalf("replay: %d %s", a.Status, a.Raw)
	}
	if a = h.call("alice", "releases.register", reg); a.Status != 403 || a.code() != "PERMISSION_DENIED" {
		t.Fatalf("alice: %d %s", a.Status, a.Raw)
	}
	conflict := map[string]any{"tenantId": "platform", "manifest": manifest(t, statement("1.4.0", 8), key)}
	if a = h.call("admin", "releases.register", conflict); a.Status != 409 || a.code() != "CONFLICT" {
		t.Fatalf("conflict: %d %s", a.Status, a.Raw)
	}
	rollback := map[string]any{"tenantId": "platform", "manifest": manifest(t, statement("1.3.9", 6), key)}
	if a = h.call("admin", "releases.register", rollback); a.Status != 400 || a.detail("reason") != "rollback" {
		t.Fatalf("rollback: %d %s", a.Status, a.Raw)
	}
	unpinned := map[string]any{"tenantId": "platform", "manifest": manifest(t, statement("1.5.0", 9), newKey(t))}
	if a = h.call("admin", "releases.register", unpinned); a.Status != 400 || a.detail("reason") != "unknown_key" {
		t.Fatalf("unpinned: %d %s", a.Status, a.Raw)
	}
	// Nothing refused above was recorded.
	a = h.call("admin", "releases.list", map[string]any{"tenantId": "platform"})
	if a.Status != 200 || len(a.Body["releases"].([]any)) != 1 {
		t.Fatalf("list: %d %s", a.Status, a.Raw)
	}
}

func TestReleasesListCursors(t *testing.T) {
	key := newKey(t)
	h := newHarness(t, setup{config: func(c *app.Config) { c.PinsFile = teststack.WritePins(t, key.Public()) }})
	for i := 1; i <= 5; i++ {
		a := h.call("admin", "releases.register", map[string]any{"tenantId": "platform",
			"manifest": manifest(t, statement(fmt.Sprintf("2.%d.0", i), int64(i)), key)})
		if a.Status != 200 {
			t.Fatalf("register %d: %s", i, a.Raw)
		}
	}
	var versions []any
	cursor := ""
	for pages := 0; ; pages++ {
		in := map[string]any{"tenantId": "platform", "limit": 2}
		if cursor != "" {
			in["cursor"] = cursor
		}
		a := h.call("admin", "releases.list", in)
		if a.Status != 200 || pages > 3 {
			t.Fatalf("page %d: %s", pages, a.Raw)
		}
		for _, r := range a.Body["releases"].([]any) {
			versions = append(versions, r.(map[string]any)["version"])
		}
		next, _ := a.Body["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
		if pages == 0 {
			// The first page's cursor, forged or replayed elsewhere, is refused.
			forged := []map[string]any{
				{"tenantId": "platform", "cursor": next[:len(next)-2] + "AA"},
				{"tenantId": "platform", "cursor": "e30." + strings.SplitN(next, ".", 2)[1]},
				{"tenantId": "other-tenant", "cursor": next},
			}
			for _, f := range forged {
				if a := h.call("admin", "releases.list", f); a.Status != 400 || a.detail("field") != "cursor" {
					t.Errorf("forged cursor %v: %d %s", f, a.Status, a.Raw)
				}
			}
		}
	}
	if fmt.Sprint(versions) != "[2.5.0 2.4.0 2.3.0 2.2.0 2.1.0]" {
		t.Fatalf("versions %v", versions)
	}
}

// A release signed through KMS (local-kms) verifies under a KMS-pinned key
// whose public key the rollout module fetched at start.
func TestReleaseSignedWithKMSPinnedKey(t *testing.T) {
	s := devstack.Shared(t)
	ctx := context.Background()
	client := s.KMS()
	created, err := client.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecEccNistP256, KeyUsage: kmstypes.KeyUsageTypeSignVerify})
	if err != nil {
		t.Fatal(err)
	}
	keyID := aws.ToString(created.KeyMetadata.KeyId)
	h := newHarness(t, setup{config: func(c *app.Config) { c.ReleaseKMSKeys = []string{keyID} }})
	signer, err := kmssign.NewSigner(ctx, client, keyID)
	if err != nil {
		t.Fatal(err)
	}
	a := h.call("admin", "releases.register", map[string]any{"tenantId": "platform", "manifest": manifest(t, statement("3.0.0", 1), signer)})
	if a.Status != 200 {
		t.Fatalf("register: %s", a.Raw)
	}
	want, _ := release.KeyID(signer.Public())
	if got := a.Body["release"].(map[string]any)["signers"]; fmt.Sprint(got) != fmt.Sprint([]any{want}) {
		t.Fatalf("signers %v, want [%s]", got, want)
	}
}

func TestReleaseConfigurationFailsAtStart(t *testing.T) {
	key := newKey(t)
	cases := map[string]func(*app.Config){
		"no pins":              func(c *app.Config) {},
		"threshold above pins": func(c *app.Config) { c.PinsFile = teststack.WritePins(t, key.Public()); c.ReleaseThreshold = 2 },
		"same key twice is one": func(c *app.Config) {
			c.PinsFile = teststack.WritePins(t, key.Public(), key.Public())
			c.ReleaseThreshold = 2
		},
		"unreadable pins file": func(c *app.Config) { c.PinsFile = filepath.Join(t.TempDir(), "missing.pem") },
		"not PEM":              func(c *app.Config) { c.Pins = "not a key" },
		"unknown KMS key":      func(c *app.Config) { c.ReleaseKMSKeys = []string{"00000000-0000-0000-0000-000000000000"} },
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := startHarness(t, setup{config: cfg}); err == nil {
				t.Fatal("start succeeded, want a configuration error")
			}
		})
	}
}

// The releases.list Lambda serves without release pins (its role has no
// kms:GetPublicKey); the releases.register Lambda refuses to start without.
func TestOnlyRegisterNeedsPins(t *testing.T) {
	s := devstack.Shared(t)
	cfg := app.Config{Table: devstack.NewTable(t, s), Region: s.Region, DynamoEndpoint: s.DynamoEndpoint,
		KMSEndpoint: s.KMSEndpoint, ReleaseThreshold: 1, CursorKey: "k"}
	a, err := app.New(context.Background(), cfg, app.WithDecider(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Endpoint(context.Background(), (&rolloutapp.Module{}).ReleasesList()); err != nil {
		t.Fatalf("releases.list without pins: %v", err)
	}
	if _, err := a.Endpoint(context.Background(), (&rolloutapp.Module{}).ReleasesRegister()); err == nil {
		t.Fatal("releases.register started without pins")
	}
}

// ReleasePins lists each configured key with the setting that pinned it,
// in configuration order: what `make run` prints at start.
func TestReleasePinsSayWhereEachCameFrom(t *testing.T) {
	s := devstack.Shared(t)
	fileKey, inlineKey := newKey(t), newKey(t)
	file := teststack.WritePins(t, fileKey.Public())
	inline, err := release.MarshalPublicKeyPEM(inlineKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{Region: s.Region, KMSEndpoint: s.KMSEndpoint, PinsFile: file, Pins: string(inline),
		ReleaseKMSKeys: []string{devstack.DevReleaseKeyAlias}, ReleaseThreshold: 1,
		ReleaseLogKey: devstack.DevReleaseLogKeyID, ReleaseLogOrigin: devstack.DevReleaseLogOrigin}
	// A build whose main names no KMS reader says so instead of pinning less.
	bare, err := app.New(context.Background(), cfg, app.WithDecider(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rolloutapp.ReleasePins(context.Background(), bare); err == nil || !strings.Contains(err.Error(), "kmskeys.FromKMS") {
		t.Errorf("BC_RELEASE_KMS_KEYS in a build without the KMS reader: %v", err)
	}
	a, err := app.New(context.Background(), cfg, app.WithDecider(testPolicy), kmskeys.FromKMS())
	if err != nil {
		t.Fatal(err)
	}
	pins, err := rolloutapp.ReleasePins(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	id := func(k crypto.PublicKey) string { s, _ := release.KeyID(k); return s }
	root, _ := devstack.Root()
	devPEM, err := os.ReadFile(filepath.Join(root, devstack.PinsFile))
	if err != nil {
		t.Fatal(err)
	}
	devKeys, err := release.ParsePEMBundle(devPEM)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		id(fileKey.Public()) + " BC_RELEASE_PINS_FILE " + file,
		id(inlineKey.Public()) + " BC_RELEASE_PINS ",
		id(devKeys[0]) + " BC_RELEASE_KMS_KEYS " + devstack.DevReleaseKeyAlias,
	}
	var got []string
	for _, p := range pins {
		got = append(got, p.KeyID+" "+p.Variable+" "+p.From)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pins:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The start keeps what it loaded: make run prints Pins, not a second read.
	mod := &rolloutapp.Module{}
	if mod.Pins() != nil {
		t.Error("pins before the start loaded them")
	}
	if _, err := a.Endpoint(context.Background(), mod.ReleasesRegister()); err != nil {
		t.Fatal(err)
	}
	if kept := mod.Pins(); len(kept) != len(pins) || kept[0].KeyID != pins[0].KeyID || kept[2].From != pins[2].From {
		t.Errorf("Pins after Endpoints = %v, want %v", kept, pins)
	}
}
