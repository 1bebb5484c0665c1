package oapigo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/interop/oapigo"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// client.gen.go is what oapi-codegen makes of docs/openapi.json today
// (make docs writes it).
func TestGeneratedClientIsCurrent(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "test/interop/oapigo/oapi-codegen.yaml")
	out := filepath.Join(t.TempDir(), "client.gen.go")
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", cfg, "-o", out, "docs/openapi.json")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "test/interop/oapigo/client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("test/interop/oapigo/client.gen.go is stale: run make docs")
	}
}

// A releases.register call through the oapi-codegen client: the manifest
// is a typed envelope (built from what release.SignEnvelope writes, as a
// client would read bcctl sign's file), and an error answer is typed:
// code a string enum, message and details.
func TestGeneratedClientRegistersARelease(t *testing.T) {
	st := teststack.Start(t)
	key := teststack.DevReleaseKey(t)
	c, err := oapigo.NewClientWithResponses(st.URL, oapigo.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer dev:admin")
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	stmt := []byte(`{"version":"1.0.0","sequence":1,"binaries":[{"platform":"linux/arm64","url":"https://dl.example.com/bcd","sha256":"` +
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" + `","size":1}]}`)
	signed, err := release.SignEnvelope(stmt, key)
	if err != nil {
		t.Fatal(err)
	}
	var manifest oapigo.Envelope
	if err := json.Unmarshal(signed, &manifest); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := c.ReleasesRegisterWithResponse(ctx, oapigo.RegisterReleaseInput{TenantId: "platform", Manifest: manifest})
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil || resp.JSON200.Release.Version != "1.0.0" || resp.JSON200.Replayed {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body)
	}

	// The same version with another sequence: a typed 409.
	manifest = oapigo.Envelope{}
	signed, _ = release.SignEnvelope(bytes.Replace(stmt, []byte(`"sequence":1`), []byte(`"sequence":2`), 1), key)
	_ = json.Unmarshal(signed, &manifest)
	resp, err = c.ReleasesRegisterWithResponse(ctx, oapigo.RegisterReleaseInput{TenantId: "platform", Manifest: manifest})
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON409 == nil {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body)
	}
	e := resp.JSON409.Error
	var code string = string(e.Code) // a named string type, not interface{}
	if code != "CONFLICT" || e.Message == "" || e.Details.Version == nil || *e.Details.Version != "1.0.0" || resp.JSON409.RequestId == "" {
		t.Errorf("409 %+v", resp.JSON409)
	}

	// No signatures at all: a typed 400 with the reason as an enum.
	manifest.Signatures = []oapigo.EnvelopeSignature{}
	resp, err = c.ReleasesRegisterWithResponse(ctx, oapigo.RegisterReleaseInput{TenantId: "platform", Manifest: manifest})
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON400 == nil || resp.JSON400.Error.Details.Reason == nil || string(*resp.JSON400.Error.Details.Reason) != release.ReasonUnknownKey {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body)
	}
}
