// Package lambdastack runs the real Lambda bootstraps (functions/*, built for
// linux on the host's architecture with -tags lambda.norpc) under the
// official AWS Lambda Runtime Interface Emulator, one emulator per function,
// each with the environment the synthesized CloudFormation template gives
// that function: its references resolved to the local servers (dynalite,
// local-kms, a fresh table), dummy credentials, and a remote Better IAM or
// the policy file. A local gateway (shared/localgw, the same routing and
// events as `make run`) sends each route to its function's emulator, with
// API Gateway's JWT authorizer played by turning "Bearer dev:<principal>"
// into the claim sub = <principal>.
//
// `make lambda-test` builds the bootstraps, installs the pinned emulator and
// synthesizes the template, then runs test/lambda and the black-box suite
// (test/blackbox) through it; both find the artefacts through FromEnv.
package lambdastack

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/test/secretsapi"
)

// Where make lambda-test puts the artefacts.
const (
	EnvRIE        = "BC_LAMBDA_RIE"        // the emulator binary
	EnvBootstraps = "BC_LAMBDA_BOOTSTRAPS" // <dir>/<function>/bootstrap
	EnvTemplate   = "BC_LAMBDA_TEMPLATE"   // cdk.out/<stack>.template.json
)

// Artefacts are the emulator, the bootstraps and the template.
type Artefacts struct{ RIE, Bootstraps, Template string }

// FromEnv returns the artefacts make lambda-test names; ok is false outside it.
func FromEnv() (Artefacts, bool) {
	a := Artefacts{RIE: os.Getenv(EnvRIE), Bootstraps: os.Getenv(EnvBootstraps), Template: os.Getenv(EnvTemplate)}
	return a, a.RIE != "" && a.Bootstraps != "" && a.Template != ""
}

// IAMMode is how the functions reach Better IAM.
type IAMMode string

const (
	PolicyFile IAMMode = "policy-file" // BC_POLICY_FILE: localstack/policy.json in the function
	RemoteIAM  IAMMode = "remote-iam"  // BC_IAM_URL: an HTTP Better IAM deciding by the same policy
)

// The cursor key secret every deployment here holds, and its value (the
// reference stack of a comparison uses the same key).
const (
	CursorSecretARN = "arn:aws:secretsmanager:us-east-1:111122223333:secret:CursorKey-lambdastack"
	CursorKey       = "lambdastack-cursor-key"
)

// Deployment is the template's functions set up against the local servers.
type Deployment struct {
	Template *Template
	Local    Local
	decides  atomic.Int64
	art      Artefacts
}

var templates sync.Map // path → *Template

// New prepares a deployment on a fresh table of the shared local servers.
func New(tb testing.TB, art Artefacts, mode IAMMode) *Deployment {
	tb.Helper()
	tmpl, ok := templates.Load(art.Template)
	if !ok {
		t, err := LoadTemplate(art.Template)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl, _ = templates.LoadOrStore(art.Template, t)
	}
	root, err := devstack.Root()
	if err != nil {
		tb.Fatal(err)
	}
	dev := devstack.Shared(tb)
	secrets := secretsapi.Start(tb, map[string]string{CursorSecretARN: CursorKey})
	d := &Deployment{Template: tmpl.(*Template), art: art}
	extra := maps.Clone(dev.Env()) // the DynamoDB and KMS endpoints, AWS_REGION
	maps.Copy(extra, map[string]string{
		"BC_SECRETSMANAGER_ENDPOINT": secrets.URL, "AWS_DEFAULT_REGION": dev.Region,
		// Dummy credentials, as Lambda puts the role's in the environment.
		"AWS_ACCESS_KEY_ID": "AKIALAMBDASTACK", "AWS_SECRET_ACCESS_KEY": "lambdastack", "AWS_SESSION_TOKEN": "lambdastack",
		"PATH": "/usr/local/bin:/usr/bin:/bin", "TZ": ":UTC",
	})
	d.Local = Local{
		Table: devstack.NewTable(tb, dev), SigningKeyID: devstack.DevReleaseKeyID, LogKeyID: devstack.DevReleaseLogKeyID, CursorSecretARN: CursorSecretARN,
		PolicyFile: filepath.Join(root, devstack.PolicyFile), Extra: extra,
	}
	if mode == RemoteIAM {
		policy, err := iam.LoadPolicy(d.Local.PolicyFile)
		if err != nil {
			tb.Fatal(err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req iam.Request
			if r.Method != http.MethodPost || r.URL.Path != "/v1/decide" || json.NewDecoder(r.Body).Decode(&req) != nil {
				http.Error(w, "POST /v1/decide with a decision request", http.StatusBadRequest)
				return
			}
			dec, _ := policy.Decide(r.Context(), req)
			d.decides.Add(1)
			_ = json.NewEncoder(w).Encode(dec)
		}))
		tb.Cleanup(srv.Close)
		d.Local.IAMURL = srv.URL
	}
	return d
}

// Decisions is how many decisions the remote Better IAM made.
func (d *Deployment) Decisions() int64 { return d.decides.Load() }

// Environment is a function's environment here, with extra NAME=value
// entries last (they win).
func (d *Deployment) Environment(tb testing.TB, name string, extra ...string) []string {
	tb.Helper()
	env, err := d.Template.Environment(name, d.Local)
	if err != nil {
		tb.Fatal(err)
	}
	return append(env, extra...)
}

// Start runs one function under the emulator.
func (d *Deployment) Start(tb testing.TB, name string, extra ...string) *Function {
	tb.Helper()
	return StartFunction(tb, d.art.RIE, name, filepath.Join(d.art.Bootstraps, name, "bootstrap"), d.Environment(tb, name, extra...))
}

// Stack is every function of the template behind a local gateway.
type Stack struct {
	*Deployment
	URL       string
	Functions map[string]*Function
}

// StartAll runs every function and serves the API on Stack.URL.
func (d *Deployment) StartAll(tb testing.TB) *Stack {
	tb.Helper()
	s := &Stack{Deployment: d, Functions: map[string]*Function{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range d.Template.Names() {
		wg.Go(func() {
			f := d.Start(tb, name)
			mu.Lock()
			s.Functions[name] = f
			mu.Unlock()
		})
	}
	wg.Wait()
	var eps []api.Endpoint
	for _, m := range api.Catalog {
		if s.Functions[m.FunctionName()] == nil {
			tb.Fatalf("lambdastack: the template has no function for %s", m.Name)
		}
		eps = append(eps, api.NotServed(m)) // routing only: the emulator serves it
	}
	g := &api.Gateway{Logger: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(localgw.Handler(g, eps, localgw.WithInvoke(s.invoke)))
	tb.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// invoke plays API Gateway's part: the JWT authorizer's claims, the Lambda
// integration, and its answer when the function fails (500, as an HTTP API
// answers a function error).
func (s *Stack) invoke(ctx context.Context, ep api.Endpoint, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	if p, ok := strings.CutPrefix(ev.Headers["authorization"], "Bearer dev:"); ok && strings.TrimSpace(p) != "" {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: map[string]string{"sub": strings.TrimSpace(p), "iss": "https://lambdastack.local/"}}}
	}
	internal := events.APIGatewayV2HTTPResponse{StatusCode: http.StatusInternalServerError,
		Headers: map[string]string{"content-type": "application/json"}, Body: `{"message":"Internal Server Error"}`}
	payload, err := json.Marshal(ev)
	if err != nil {
		return internal
	}
	status, body, err := s.Functions[ep.Method.FunctionName()].Invoke(ctx, payload)
	var resp events.APIGatewayV2HTTPResponse
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &resp) != nil || resp.StatusCode == 0 {
		return internal
	}
	return resp
}
