// Package blackbox is the end-to-end suite that knows the API only through
// HTTP and the project's client (shared/client). It runs against any URL:
//
//	make e2e BC_API_URL=https://… BC_TOKEN=<JWT of a principal granted everything>
//	         [BC_E2E_REGISTER_RELEASES=1 BC_E2E_RELEASE_KEY=<a private key file pinned by that deployment>]
//
// Without BC_E2E_URL (what `make e2e` sets from BC_API_URL) it starts the
// local stack in-process — real dynalite and local-kms behind the local
// gateway — which is how CI runs it. Under `make lambda-test` (the
// artefacts of test/lambdastack in the environment) every request also goes
// to the real bootstraps under the Lambda runtime interface emulator, with
// the policy file and with a remote Better IAM, and any answer that differs
// from the local gateway's fails the test. Every run uses fresh tenant and pool ids,
// so it can run again and again against the same deployment.
//
// Against a deployment it never registers a release unless asked to:
// releases are the platform's, and a test registration must take a sequence
// above every real one (it uses the clock in microseconds), after which that
// deployment refuses every normal sequence as a rollback. Only throwaway
// deployments should set BC_E2E_REGISTER_RELEASES=1.
package blackbox

import (
	"context"
	"crypto"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
	"github.com/bettercompute/control-plane/test/lambdastack"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// target is the API under test.
type target struct {
	admin      *client.Client // a principal granted everything
	anonymous  *client.Client // no credentials
	releaseKey crypto.Signer  // pinned by the deployment; nil: releases are not registered
	local      bool
}

// registerReleases reports whether the suite may register releases here.
func (tg *target) registerReleases() bool {
	return tg.releaseKey != nil && (tg.local || os.Getenv("BC_E2E_REGISTER_RELEASES") == "1")
}

func newTarget(t *testing.T) *target {
	t.Helper()
	if url := os.Getenv("BC_E2E_URL"); url != "" {
		tg := &target{admin: client.New(url, os.Getenv("BC_E2E_TOKEN")), anonymous: client.New(url, "")}
		if f := os.Getenv("BC_E2E_RELEASE_KEY"); f != "" {
			tg.releaseKey = teststack.LoadKey(t, f) // relative: from the repository root, where `make e2e` runs
		}
		return tg
	}
	url := ""
	if art, ok := lambdastack.FromEnv(); ok {
		// make lambda-test: every request also goes to the built Lambdas under
		// the runtime interface emulator, in both Better IAM modes, and their
		// answers must equal the local gateway's.
		ref := teststack.Start(t, teststack.WithCursorKey(lambdastack.CursorKey))
		url = lambdastack.Twin(t, ref.URL,
			lambdastack.New(t, art, lambdastack.PolicyFile).StartAll(t).URL,
			lambdastack.New(t, art, lambdastack.RemoteIAM).StartAll(t).URL)
	} else {
		url = teststack.Start(t, teststack.WithCursorKey("blackbox")).URL
	}
	return &target{admin: client.New(url, "dev:admin"), anonymous: client.New(url, ""),
		releaseKey: teststack.DevReleaseKey(t), local: true}
}

// unique returns prefix plus a random suffix valid as a tenant or pool id.
func unique(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// wantCode fails unless err is an API error with that code.
func wantCode(t *testing.T, err error, code apierr.Code) *apierr.Error {
	t.Helper()
	e := apierr.As(err)
	if e == nil || e.Code != code {
		t.Fatalf("want %s, got %v", code, err)
	}
	return e
}

type obj = map[string]any

func TestAuthentication(t *testing.T) {
	tg := newTarget(t)
	err := tg.anonymous.Call(context.Background(), "pools.list", obj{"tenantId": unique("t")}, nil)
	if !tg.local {
		// In AWS, API Gateway's JWT authorizer answers a request without a
		// token itself, before any function: 401 {"message":"Unauthorized"}.
		if err == nil || !strings.Contains(err.Error(), "401") && apierr.CodeOf(err) != apierr.Unauthenticated {
			t.Fatalf("want 401, got %v", err)
		}
		return
	}
	wantCode(t, err, apierr.Unauthenticated)
}

// What every deployment answers without anything being written: a list, and
// manifests that must be refused.
func TestReleaseRefusals(t *testing.T) {
	tg := newTarget(t)
	ctx := context.Background()
	var list struct {
		Releases []release.Release `json:"releases"`
	}
	if err := tg.admin.Call(ctx, "releases.list", obj{"tenantId": "platform", "limit": 1}, &list); err != nil {
		t.Fatal(err)
	}
	stranger, err := release.GenerateKey("ed25519")
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.SignEnvelope([]byte(`{"version":"0.0.1","sequence":1,"binaries":[{"platform":"linux/arm64","url":"https://dl.example.com/bcd","sha256":"`+fmt.Sprintf("%064d", 0)+`","size":1}]}`), stranger)
	if err != nil {
		t.Fatal(err)
	}
	e := wantCode(t, tg.admin.Call(ctx, "releases.register", obj{"tenantId": "platform", "manifest": rawJSON(env)}, nil), apierr.InvalidInput)
	if e.Details["reason"] != "unknown_key" {
		t.Fatalf("a manifest signed by an unpinned key: reason %v", e.Details["reason"])
	}
	tampered := obj{"tenantId": "platform", "manifest": obj{"payloadType": release.PayloadType, "payload": "e30", "signatures": []obj{}}}
	e = wantCode(t, tg.admin.Call(ctx, "releases.register", tampered, nil), apierr.InvalidInput)
	if e.Details["reason"] != "unknown_key" {
		t.Fatalf("reason %v", e.Details["reason"])
	}
}

func TestReleaseRegisterAndList(t *testing.T) {
	tg := newTarget(t)
	if !tg.registerReleases() {
		// Never in CI: the in-process stack always registers (dev key).
		t.Skip("not registering releases on a deployment: set BC_E2E_REGISTER_RELEASES=1 and BC_E2E_RELEASE_KEY on a throwaway one")
	}
	ctx := context.Background()
	// A sequence above anything a deployment has seen: the clock in microseconds.
	seq := time.Now().UnixMicro()
	version := fmt.Sprintf("0.0.%d", seq)
	stmt := fmt.Sprintf(`{"version":%q,"sequence":%d,"binaries":[{"platform":"linux/arm64","url":"https://dl.example.com/bcd","sha256":"%064x","size":1}]}`, version, seq, seq)
	env, err := release.SignEnvelope([]byte(stmt), tg.releaseKey)
	if err != nil {
		t.Fatal(err)
	}
	// The typed client (shared/client/methods.go, generated from the catalog).
	in := &api.RegisterReleaseInput{Tenant: api.Tenant{TenantID: "platform"}, Manifest: strictjson.Object(env)}
	reg, err := tg.admin.ReleasesRegister(ctx, in)
	if err != nil || reg.Replayed || reg.Release.Version != version {
		t.Fatalf("register: %+v %v", reg, err)
	}
	if reg, err = tg.admin.ReleasesRegister(ctx, in); err != nil || !reg.Replayed {
		t.Fatalf("replay: %+v %v", reg, err)
	}
	list, err := tg.admin.ReleasesList(ctx, &api.ListReleasesInput{Tenant: api.Tenant{TenantID: "platform"}, Page: api.Page{Limit: ptr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Releases) != 1 || list.Releases[0].Version != version {
		t.Fatalf("the newest release is not first: %+v", list.Releases)
	}
}

type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

func ptr[T any](v T) *T { return &v }

// A tenant's whole path: pool, quota, reservation, release, with another
// tenant unable to see any of it.
func TestCapacityPath(t *testing.T) {
	tg := newTarget(t)
	ctx := context.Background()
	acme, other, pool := unique("acme"), unique("other"), unique("pool")
	c := tg.admin // the typed client (shared/client/methods.go)

	if _, err := c.PoolsCreate(ctx, &api.CreatePoolInput{Tenant: api.Tenant{TenantID: acme}, PoolID: pool, Resources: api.Resources{"gpu.h100": 4}}); err != nil {
		t.Fatal(err)
	}
	getQuota := func(tenant string) api.Quota {
		out, err := c.QuotasGet(ctx, &api.GetQuotaInput{Tenant: api.Tenant{TenantID: tenant}, PoolID: pool, Resource: "gpu.h100"})
		if err != nil {
			t.Fatal(err)
		}
		return out.Quota
	}
	if q := getQuota(acme); q.Max != 4 || q.Used != 0 {
		t.Fatalf("owner quota %+v", q)
	}
	end := time.Now().UTC().Add(2 * time.Hour)
	create := &api.CreateReservationInput{Tenant: api.Tenant{TenantID: acme}, PoolID: pool, Resource: "gpu.h100", Count: 3,
		Window: api.ReservationWindow{End: end}, ClientToken: ptr(unique("tok"))}
	created, err := c.ReservationsCreate(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	r := created.Reservation
	if r.State != api.Placed || len(r.DeviceIDs) != 3 || len(r.History) != 2 || r.History[1].State != api.Placed {
		t.Fatalf("reservation %+v", r)
	}
	if q := getQuota(acme); q.Used != 3 {
		t.Fatalf("quota after create %+v", q)
	}
	// The pool's one node shows the three devices held now.
	usage, err := c.PoolsUsage(ctx, &api.PoolUsageInput{Tenant: api.Tenant{TenantID: acme}, PoolID: pool, Resource: "gpu.h100"})
	if err != nil {
		t.Fatal(err)
	}
	if u := usage.Usage; u.Page.BusyNow != 3 || u.Page.Devices != 4 || len(u.Nodes) != 1 || len(u.Nodes[0].Busy) != 1 ||
		u.Nodes[0].Busy[0].ReservationID != r.ReservationID {
		t.Fatalf("usage %+v", u)
	}
	// All four devices are free for an hour from the first whole hour the
	// three are not held in; the quota has one left.
	avail, err := c.PoolsAvailability(ctx, &api.PoolAvailabilityInput{Tenant: api.Tenant{TenantID: acme}, PoolID: pool, Resource: "gpu.h100",
		Count: 4, Hours: 1})
	if err != nil {
		t.Fatal(err)
	}
	free := end.Truncate(time.Hour)
	if !free.Equal(end) {
		free = free.Add(time.Hour)
	}
	if a := avail.Availability; len(a.Offerings) == 0 || !a.Offerings[0].EarliestStart.Equal(free) || a.Offerings[0].Nodes != 1 ||
		a.Quota != (api.QuotaFit{Max: 4, Used: 3, Fits: false}) || a.Partial {
		t.Fatalf("availability %+v, want the first start at %s", a, free)
	}
	// The same clientToken again returns the same reservation.
	if again, err := c.ReservationsCreate(ctx, create); err != nil || again.Reservation.ReservationID != r.ReservationID {
		t.Fatalf("clientToken replay: %+v %v", again, err)
	}
	// Two more do not fit the quota of 4: the error carries the numbers.
	over := *create
	over.Count, over.ClientToken = 2, nil
	_, err = c.ReservationsCreate(ctx, &over)
	if e := wantCode(t, err, apierr.QuotaExceeded); e.Details["reservationId"] == nil || e.Details["requested"] != float64(2) ||
		e.Details["used"] != float64(3) || e.Details["max"] != float64(4) {
		t.Fatalf("QUOTA_EXCEEDED details %v", e.Details)
	}
	// Another tenant sees nothing of acme's.
	_, err = c.ReservationsGet(ctx, &api.GetReservationInput{Tenant: api.Tenant{TenantID: other}, ReservationID: r.ReservationID})
	wantCode(t, err, apierr.NotFound)
	_, err = c.PoolsGet(ctx, &api.GetPoolInput{Tenant: api.Tenant{TenantID: other}, PoolID: pool})
	wantCode(t, err, apierr.NotFound)
	if list, err := c.ReservationsList(ctx, &api.ListReservationsInput{Tenant: api.Tenant{TenantID: other}}); err != nil || len(list.Reservations) != 0 {
		t.Fatalf("other tenant's list: %+v %v", list, err)
	}
	// Following cursors a page of one at a time finds acme's placed
	// reservation; the one refused over quota is listed when rejected
	// ones are asked for.
	ids := func(state *string) []string {
		var out []string
		for page, err := range c.ReservationsListPages(ctx, api.ListReservationsInput{Tenant: api.Tenant{TenantID: acme}, State: state, Page: api.Page{Limit: ptr(1)}}) {
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range page.Reservations {
				out = append(out, x.ReservationID)
			}
		}
		return out
	}
	if listed, rejected := ids(nil), ids(ptr("rejected")); len(listed) != 1 || listed[0] != r.ReservationID || len(rejected) != 1 {
		t.Fatalf("pages of acme's reservations: %v, rejected %v", listed, rejected)
	}

	released, err := c.ReservationsRelease(ctx, &api.ReleaseReservationInput{Tenant: api.Tenant{TenantID: acme}, ReservationID: r.ReservationID})
	if err != nil {
		t.Fatal(err)
	}
	if released.Reservation.State != api.Released || released.Reservation.ReleasedBy != api.ReleasedByTenant {
		t.Fatalf("released %+v", released.Reservation)
	}
	if q := getQuota(acme); q.Used != 0 {
		t.Fatalf("quota after release %+v", q)
	}
	// Bad input gets a clear error naming the field.
	bad := *create
	bad.Count, bad.ClientToken = 0, nil
	_, err = c.ReservationsCreate(ctx, &bad)
	if e := wantCode(t, err, apierr.InvalidInput); e.Details["field"] != "count" {
		t.Fatalf("details %v", e.Details)
	}
}
