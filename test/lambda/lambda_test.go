//go:build lambdatest

// Package lambda runs the real bootstraps under the official Lambda runtime
// interface emulator (test/lambdastack): every function starts with the
// environment the synthesized template gives it and answers its sample
// event, the reconciler moves reservations on a scheduled event, a bad
// configuration fails the init as Lambda reports it (Runtime.ExitError) with
// a clear log line, and a payload that is not an API Gateway event is
// answered, not crashed on. It reports each function's init time as the
// emulator measures it.
//
// It needs the artefacts of `make lambda-test` (the build tag keeps it out
// of `go test ./...`): the emulator, the bootstraps and the template.
package lambda

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/test/lambdastack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// EnvReport names the file the init times are written to.
const EnvReport = "BC_LAMBDA_REPORT"

func artefacts(t *testing.T) lambdastack.Artefacts {
	t.Helper()
	art, ok := lambdastack.FromEnv()
	if !ok {
		t.Fatalf("run through make lambda-test: %s, %s and %s name the emulator, the bootstraps and the template",
			lambdastack.EnvRIE, lambdastack.EnvBootstraps, lambdastack.EnvTemplate)
	}
	return art
}

func sample(t *testing.T, name string) []byte {
	t.Helper()
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "events", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emfRecords checks every JSON line of a function's output that claims to
// be an EMF record against the specification and returns the records.
func emfRecords(t *testing.T, f *lambdastack.Function) [][]metrics.Point {
	t.Helper()
	var out [][]metrics.Point
	for _, line := range f.Lines() {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		points, ok, err := metrics.Parse([]byte(line))
		if err != nil {
			t.Errorf("%s wrote an invalid EMF record: %v\n%s", f.Name, err, line)
		}
		if ok {
			out = append(out, points)
		}
	}
	return out
}

// Every function of the template starts under the emulator with the
// template's environment, answers its sample event, and writes its request
// (or pass) record as valid EMF. The emulator's init time of each is
// reported.
func TestEveryFunctionStartsAndAnswers(t *testing.T) {
	art := artefacts(t)
	st := lambdastack.New(t, art, lambdastack.PolicyFile).StartAll(t)
	if len(st.Functions) != len(api.Catalog)+2 { // and the reconciler and the console
		t.Fatalf("%d functions in the template, want %d", len(st.Functions), len(api.Catalog)+2)
	}
	spec := st.Template.Functions[api.ReconcilerFunction]
	if spec.Reserved != 1 || spec.LogFormat != "JSON" {
		t.Errorf("reconciler: reserved concurrency %d, log format %q", spec.Reserved, spec.LogFormat)
	}
	type row struct {
		name   string
		initMS float64
	}
	var rows []row // in name order: Names is sorted
	for _, name := range st.Template.Names() {
		f := st.Functions[name]
		status, body, err := f.Invoke(context.Background(), sample(t, name))
		if err != nil || status != 200 {
			t.Errorf("%s: invoke: %d %s %v\n%s", name, status, body, err, f.Output())
			continue
		}
		if name == api.ReconcilerFunction {
			if string(body) != "null" {
				t.Errorf("reconciler answered %s", body)
			}
		} else {
			var resp events.APIGatewayV2HTTPResponse
			if err := json.Unmarshal(body, &resp); err != nil || resp.StatusCode == 0 || resp.Headers["x-request-id"] == "" {
				t.Errorf("%s: not an API Gateway answer: %s", name, body)
			}
			if len(emfRecords(t, f)) != 1 {
				t.Errorf("%s: want one request record, output:\n%s", name, f.Output())
			}
		}
		inits := f.InitDurations()
		if len(inits) != 1 || f.Count("INIT RTDONE(status: success)") != 1 {
			t.Errorf("%s: %d inits (%v), want one that succeeded:\n%s", name, len(inits), inits, f.Output())
			continue
		}
		rows = append(rows, row{name, inits[0]})
	}
	var report strings.Builder
	fmt.Fprintf(&report, "Init time under the Lambda runtime interface emulator (INIT REPORT durationMs), %s:\n", time.Now().UTC().Format(time.RFC3339))
	var total float64
	for _, r := range rows {
		fmt.Fprintf(&report, "  %-22s %6.2f ms\n", r.name, r.initMS)
		total += r.initMS
	}
	if len(rows) > 0 {
		fmt.Fprintf(&report, "  %-22s %6.2f ms\n", "mean", total/float64(len(rows)))
	}
	t.Log(report.String())
	if path := os.Getenv(EnvReport); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// The reconciler, invoked with EventBridge's scheduled event, moves a
// reservation whose window has started to active; its pass record (EMF)
// counts the transitions.
func TestReconcilerTakesTheScheduledEvent(t *testing.T) {
	st := lambdastack.New(t, artefacts(t), lambdastack.PolicyFile).StartAll(t)
	c := client.New(st.URL, "dev:admin")
	ctx := context.Background()
	if err := c.Call(ctx, "pools.create", map[string]any{"tenantId": "acme", "poolId": "pool-1", "resources": map[string]int{"gpu.h100": 2}}, nil); err != nil {
		t.Fatal(err)
	}
	var created struct {
		Reservation struct{ ReservationID, State string }
	}
	end := time.Now().UTC().Add(time.Hour).Format(time.RFC3339)
	if err := c.Call(ctx, "reservations.create", map[string]any{"tenantId": "acme", "poolId": "pool-1", "resource": "gpu.h100",
		"count": 1, "window": map[string]any{"end": end}}, &created); err != nil || created.Reservation.State != "placed" {
		t.Fatalf("create: %+v %v", created, err)
	}
	rec := st.Functions[api.ReconcilerFunction]
	if status, body, err := rec.Invoke(ctx, sample(t, api.ReconcilerFunction)); err != nil || status != 200 || string(body) != "null" {
		t.Fatalf("scheduled event: %d %s %v\n%s", status, body, err, rec.Output())
	}
	var got struct {
		Reservation struct{ State string }
	}
	if err := c.Call(ctx, "reservations.get", map[string]any{"tenantId": "acme", "reservationId": created.Reservation.ReservationID}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Reservation.State != "active" {
		t.Errorf("after the pass the reservation is %q, want active", got.Reservation.State)
	}
	var transitioned float64
	for _, points := range emfRecords(t, rec) {
		for _, p := range points {
			if p.Name == "transitioned" {
				transitioned += p.Values[0]
			}
		}
	}
	if transitioned < 2 {
		t.Errorf("pass records count %v transitions, want placed→binding→active:\n%s", transitioned, rec.Output())
	}
}

// With a remote Better IAM the functions ask it (and the answers are the
// policy file's: test/blackbox compares them under make lambda-test).
func TestRemoteBetterIAMIsAsked(t *testing.T) {
	st := lambdastack.New(t, artefacts(t), lambdastack.RemoteIAM).StartAll(t)
	c := client.New(st.URL, "dev:admin")
	if err := c.Call(context.Background(), "pools.list", map[string]any{"tenantId": "acme"}, nil); err != nil {
		t.Fatal(err)
	}
	if st.Decisions() != 1 {
		t.Errorf("the remote Better IAM made %d decisions, want 1", st.Decisions())
	}
	for _, kv := range st.Environment(t, "pools-list") {
		if strings.HasPrefix(kv, "BC_POLICY_FILE=") {
			t.Errorf("remote mode still sets %s", kv)
		}
	}
}

// A bad configuration fails the init: the runtime exits, the emulator
// reports Runtime.ExitError (as Lambda does), and the function's one log
// line says what is wrong.
func TestBadConfigurationIsAnInitExitError(t *testing.T) {
	d := lambdastack.New(t, artefacts(t), lambdastack.PolicyFile)
	for _, tc := range []struct{ fn, env, says string }{
		{"pools-get", "BC_LOG_LEVEL=verbose", "BC_LOG_LEVEL must be debug, info, warn or error"},
		{"pools-list", "BC_CURSOR_SECRET_ARN=" + lambdastack.CursorSecretARN + "-gone", "BC_CURSOR_SECRET_ARN: reading the cursor key"},
	} {
		t.Run(tc.fn, func(t *testing.T) {
			f := d.Start(t, tc.fn, tc.env)
			status, _, err := f.Invoke(context.Background(), sample(t, tc.fn))
			if err != nil || status == 200 {
				t.Fatalf("invoke with %s: %d %v, want the emulator's failure", tc.env, status, err)
			}
			if f.Count("Runtime.ExitError") == 0 {
				t.Errorf("no Runtime.ExitError in the emulator's output:\n%s", f.Output())
			}
			found := false
			for _, line := range f.Lines() {
				var l struct{ Level, Msg, Error string }
				if json.Unmarshal([]byte(line), &l) == nil && l.Level == "ERROR" && l.Msg == "configuration" && strings.Contains(l.Error, tc.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("no JSON line {level ERROR, msg configuration, error …%s…}:\n%s", tc.says, f.Output())
			}
		})
	}
}

// Whatever else reaches an API function is answered INVALID_INPUT
// (not_api_gateway_event) and the process lives on: one init for all.
func TestOtherPayloadsAreAnsweredNotCrashedOn(t *testing.T) {
	f := lambdastack.New(t, artefacts(t), lambdastack.PolicyFile).Start(t, "pools-get")
	for _, payload := range [][]byte{[]byte(`[1,2]`), []byte(`"ping"`), []byte(`{}`), []byte(`null`), sample(t, api.ReconcilerFunction)} {
		status, body, err := f.Invoke(context.Background(), payload)
		var resp events.APIGatewayV2HTTPResponse
		if err != nil || status != 200 || json.Unmarshal(body, &resp) != nil || resp.StatusCode != 400 ||
			!strings.Contains(resp.Body, "not_api_gateway_event") {
			t.Errorf("payload %s: %d %s %v", payload, status, body, err)
		}
	}
	status, body, err := f.Invoke(context.Background(), sample(t, "pools-get"))
	var resp events.APIGatewayV2HTTPResponse
	if err != nil || status != 200 || json.Unmarshal(body, &resp) != nil || !slices.Contains([]int{200, 404}, resp.StatusCode) {
		t.Errorf("an API event afterwards: %d %s %v", status, body, err)
	}
	if n := f.Count("INIT START(type: on-demand, phase: init)"); n != 1 {
		t.Errorf("%d inits, want 1 (the process must survive every payload):\n%s", n, f.Output())
	}
}
