package api_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// TestHostileBodiesStayBounded sends every hostile shape of 256 KiB through
// the gateway as an authenticated principal without a grant, under a 256 MB
// memory limit (what a Lambda has): each is refused with INVALID_INPUT before
// authorization, and allocates at most a few MB. Before the hardening issue a
// 200 KB body of nested brackets allocated more than 3 GB.
func TestHostileBodiesStayBounded(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
	pins := benchPins(t)
	d := deny("no grant")
	g, _ := newGateway(d, false)
	list := api.Bind(api.Lookup("pools.list"), func(context.Context, *api.Call, *api.ListPoolsInput) (any, error) {
		t.Error("pools.list handler reached")
		return nil, nil
	})
	register := api.Bind(api.Lookup("releases.register"), func(_ context.Context, _ *api.Call, in *api.RegisterReleaseInput) (any, error) {
		_, err := pins.Verify(in.Manifest, time.Now())
		return nil, err
	})
	const maxAlloc = 8 << 20
	for _, c := range hostileBodies(api.MaxBody - 64) {
		t.Run(c.name, func(t *testing.T) {
			ep := list
			if _, ok := c.input().(*api.RegisterReleaseInput); ok {
				ep = register
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			resp := g.Serve(context.Background(), ep, jwtRequest("mallory", c.body))
			runtime.ReadMemStats(&after)
			if resp.StatusCode == 403 {
				// The manifest shapes pass decoding (any object is a
				// manifest) and stop at the decision, which is fine too.
				wantError(t, resp, 403, apierr.PermissionDenied)
			} else {
				env := wantError(t, resp, 400, apierr.InvalidInput)
				if strings.HasPrefix(c.name, "deep-") && env.Error.Details["reason"] != "too_deep" {
					t.Errorf("reason = %v, want too_deep", env.Error.Details["reason"])
				}
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > maxAlloc {
				t.Errorf("allocated %d bytes for a %d-byte body (limit %d)", n, len(c.body), maxAlloc)
			}
		})
	}
}

// TestHostileManifestsStayBounded verifies the manifest shapes as
// releases.register does once allowed, with the same bound.
func TestHostileManifestsStayBounded(t *testing.T) {
	pins := benchPins(t)
	for _, c := range hostileBodies(api.MaxBody - 64) {
		if _, ok := c.input().(*api.RegisterReleaseInput); !ok {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			refused := refuse([]byte(c.body), c.input(), pins)
			runtime.ReadMemStats(&after)
			if !refused {
				t.Fatal("a hostile manifest was accepted")
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
				t.Errorf("allocated %d bytes (limit 8 MiB)", n)
			}
		})
	}
}
