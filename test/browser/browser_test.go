// Package browser runs the web console in a real browser: Debian's
// chromium, headless, driven by chromedp, against the whole control plane
// in process (test/teststack: the local gateway with the console mounted,
// dynalite and local-kms), with reference agents heartbeating. Each
// scenario waits on the page's state, never on time. axe-core (the pinned
// npm package) checks each page; the screenshots land in build/console-shots
// (BC_CONSOLE_SHOTS=docs writes them into docs/console/ instead, as the
// docs show them).
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/console"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// Chromium is Debian's package (make browser installs it when missing).
const Chromium = "/usr/bin/chromium"

// wait bounds each wait on the page: generous, since a busy machine is slow.
const wait = 90 * time.Second

type suite struct {
	t     *testing.T
	st    *teststack.Stack
	root  string
	shots string
	alloc context.Context
	log   *teststack.RequestLog
	// dialogs are the confirmation texts the page asked, per tab.
	mu         sync.Mutex
	dialogs    []string
	dialogErrs []string
}

func newSuite(t *testing.T) *suite {
	if _, err := os.Stat(Chromium); err != nil {
		t.Fatalf("%s is missing: `make browser` installs Debian's chromium (make test does it first)", Chromium)
	}
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	log := &teststack.RequestLog{}
	s := &suite{t: t, st: teststack.Start(t, teststack.WithRequestLog(log)), log: log, root: root, shots: filepath.Join(root, "build", "console-shots")}
	if os.Getenv("BC_CONSOLE_SHOTS") == "docs" {
		s.shots = filepath.Join(root, "docs", "console")
	}
	if err := os.MkdirAll(s.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.IgnoreCertErrors, // the stand-in identity provider's TLS certificate is the test's own
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	s.alloc = alloc
	return s
}

// tab opens a fresh browser tab (its own session storage) of the given
// size; every JavaScript dialog is recorded and accepted.
func (s *suite) tab(t *testing.T, width, height int64) context.Context {
	ctx, cancel := chromedp.NewContext(s.alloc)
	t.Cleanup(cancel)
	viewport := []chromedp.EmulateViewportOption{}
	if width < 600 {
		viewport = append(viewport, chromedp.EmulateMobile)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height, viewport...)); err != nil {
		t.Fatal(err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			s.mu.Lock()
			s.dialogs = append(s.dialogs, ev.Message)
			if err != nil {
				s.dialogErrs = append(s.dialogErrs, fmt.Sprintf("accepting %q: %v", ev.Message, err))
			}
			s.mu.Unlock()
		}
	}()
	return ctx
}

func (s *suite) lastDialog() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dialogs) == 0 {
		return ""
	}
	return s.dialogs[len(s.dialogs)-1]
}

func (s *suite) run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		s.mu.Lock()
		dialogs := strings.Join(s.dialogErrs, "\n")
		s.mu.Unlock()
		t.Fatalf("%v\npage text:\n%s\ndialog errors:\n%s", err, text, dialogs)
	}
}

// eval is a JavaScript expression's value on the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// until waits for a JavaScript condition on the page, across navigations
// (an evaluation that a navigation interrupts is tried again).
func until(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var last error
		for {
			ok, err := chromedp.Evaluate[bool](`!!(`+js+`)`)(ctx, tg)
			if err == nil && ok {
				return nil
			}
			if err != nil {
				last = err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w (last error: %v)", js, ctx.Err(), last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// textHas waits for the main content to say words.
func textHas(words string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(words)
	return until(`document.getElementById("main") && document.getElementById("main").innerText.includes(` + string(q) + `)`)
}

// press clicks the button labelled label once the page has a live one.
func press(label string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(label)
	return clickWhenLive(`[...document.querySelectorAll("#main button")].find(b => b.textContent.trim() === ` + string(q) + `)`)
}

// pressCSS is press for the button a CSS selector finds.
func pressCSS(sel string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(sel)
	return clickWhenLive(`document.querySelector(` + string(q) + `)`)
}

// clickWhenLive clicks the element the expression finds, and returns once
// it has. The page's own refresh swaps its content every few seconds: a
// button found in one evaluation may be gone by the next, and a new one
// does nothing until htmx has processed it (its internal data says
// firstInitCompleted, some milliseconds after the swap). So the click is
// made from a timer, after the evaluation returns (its confirmation
// dialog then blocks no evaluation of ours), on the element found there
// and then — live, and processed where htmx handles it (the button or its
// form), in the same JavaScript task as the click — and the action ends on the evaluation that sees it made. A
// timer that finds none leaves the next evaluation to try again.
func clickWhenLive(find string) chromedp.Action[chromedp.Void] {
	return until(`(() => {
		const live = b => { const h = b.closest("[hx-post], [hx-get]"); return !h || (h["htmx-internal-data"] || {}).firstInitCompleted; };
		const find = () => { const b = ` + find + `; return b && b.isConnected && live(b) ? b : null; };
		if (window.__bcPress === "clicked") { window.__bcPress = undefined; return true; }
		if (window.__bcPress === "pending" || !find()) return false;
		window.__bcPress = "pending";
		setTimeout(() => { const b = find(); window.__bcPress = b ? "clicked" : undefined; if (b) b.click(); }, 0);
		return false;
	})()`)
}

// signIn uses the local sign-in as principal, acting as tenant.
func (s *suite) signIn(t *testing.T, ctx context.Context, principal, tenant string) {
	t.Helper()
	s.run(t, ctx,
		chromedp.Navigate(s.st.URL+"/console/"),
		until(`location.pathname === "/console/signin" && document.getElementById("dev-signin")`),
		chromedp.SendKeys(chromedp.CSS(`#principal`), principal),
		chromedp.SetValue(chromedp.CSS(`#tenant`), tenant),
		chromedp.Click(chromedp.CSS(`#dev-signin button[type=submit]`)),
		until(`document.getElementById("whoami").innerText.includes("dev:`+principal+`")`),
		until(`document.querySelector("#page") || document.querySelector(".problem")`),
	)
}

func (s *suite) open(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	s.run(t, ctx, chromedp.Navigate(s.st.URL+path), until(`document.querySelector("#page") || document.querySelector("#main .problem")`))
}

func (s *suite) shot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	act := chromedp.CaptureScreenshot()
	if full {
		act = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, act)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// axe runs axe-core (node_modules/axe-core, pinned in package-lock.json) on
// the page and fails on every violation it reports.
func (s *suite) axe(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(s.root, "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatalf("axe-core: %v (make tools installs it)", err)
	}
	type violation struct {
		ID     string `json:"id"`
		Impact string `json:"impact"`
		Help   string `json:"help"`
		Nodes  []struct {
			Target []any `json:"target"`
		} `json:"nodes"`
	}
	eval[int](t, ctx, string(src)+"\n;0")
	res, err := chromedp.Run(ctx, chromedp.Evaluate[[]violation](`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res {
		var where []string
		for _, n := range v.Nodes {
			where = append(where, fmt.Sprint(n.Target...))
		}
		t.Errorf("axe on %s: %s (%s): %s — %s", page, v.ID, v.Impact, v.Help, strings.Join(where, "; "))
	}
}

func TestConsoleInTheBrowser(t *testing.T) {
	start := time.Now()
	s := newSuite(t)
	admin := client.New(s.st.URL, "dev:admin")
	alice := client.New(s.st.URL, "dev:alice")
	for _, p := range []struct {
		id    string
		count int
	}{{"gpu-pool-1", 16}, {"lab", 16}, {"fleet-a", 32}, {"fleet-b", 16}} {
		call(t, admin, "pools.create", map[string]any{"tenantId": "acme", "poolId": p.id, "resources": map[string]any{"gpu.h100": p.count}}, nil)
	}
	registerRelease(t, admin, "1.0.0", 1)
	registerRelease(t, admin, "1.1.0", 2)
	f := newFleet(t, s.st)
	f.addNodes(t, "lab", 2)
	f.addNodes(t, "fleet-a", 4)
	f.addNodes(t, "fleet-b", 2)
	f.run(t)
	now := time.Now().UTC()

	t.Run("sign in", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "alice", "acme")
		s.run(t, ctx, textHas("gpu-pool-1"), textHas("free now"))
		s.shot(t, ctx, "pools", false)
		s.axe(t, ctx, "pools")
	})

	var booked []string
	t.Run("a pool's timeline shows the bookings just made", func(t *testing.T) {
		for _, w := range [][2]time.Time{{now.Add(time.Minute), now.Add(3 * time.Hour)}, {now.Add(26 * time.Hour), now.Add(50 * time.Hour)}} {
			var out api.ReservationResult
			call(t, alice, "reservations.create", map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resource": "gpu.h100", "count": 4,
				"window": map[string]any{"start": w[0], "end": w[1]}}, &out)
			booked = append(booked, out.Reservation.ReservationID)
		}
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "alice", "acme")
		s.open(t, ctx, "/console/pools/gpu-pool-1?tenant=acme")
		for _, id := range booked {
			s.run(t, ctx, until(`[...document.querySelectorAll("svg.timeline a")].some(a => a.getAttribute("href").includes("/console/reservations/`+id+`?tenant=acme"))`))
		}
		s.run(t, ctx, until(`document.querySelector("svg.timeline .b.placed") && document.querySelector("svg.timeline .now")`))
		// Zoomed in to a week, each bar names its reservation and window.
		s.open(t, ctx, "/console/pools/gpu-pool-1?tenant=acme&days=7")
		for _, id := range booked {
			s.run(t, ctx, until(`[...document.querySelectorAll("svg.timeline .b title")].some(e => e.textContent.includes("`+id+`"))`))
		}
		s.shot(t, ctx, "timeline", false)
		s.axe(t, ctx, "pool timeline")
	})

	t.Run("availability answered and booked", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "alice", "acme")
		s.open(t, ctx, "/console/pools/gpu-pool-1?tenant=acme&count=8&hours=6&topology=node")
		s.run(t, ctx, textHas("can start"), until(`document.querySelector("svg.timeline rect.offer")`))
		s.shot(t, ctx, "availability", false)
		s.run(t, ctx, pressCSS(`#availability button.primary`), until(`document.querySelector("#outcome .ok")`))
		if d := s.lastDialog(); !strings.Contains(d, "Book 8 × gpu.h100") {
			t.Errorf("the booking's confirmation said %q", d)
		}
		s.run(t, ctx, until(`document.getElementById("outcome").innerText.includes("Booked: reservation")`))
	})

	t.Run("a refused create explained", func(t *testing.T) {
		// acme's quota on gpu-pool-1 is 16: what is held plus 16 does not fit.
		body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resource": "gpu.h100", "count": 16,
			"window": map[string]any{"end": now.Add(time.Hour)}})
		resp, err := alice.Do(context.Background(), "reservations.create", body)
		if err != nil || resp.Status != 429 {
			t.Fatalf("the over-quota create: %v %d %s", err, resp.Status, resp.Body)
		}
		var env struct {
			Error struct{ Details map[string]any }
		}
		_ = json.Unmarshal(resp.Body, &env)
		id, _ := env.Error.Details["reservationId"].(string)
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "alice", "acme")
		s.open(t, ctx, "/console/reservations/"+id+"?tenant=acme")
		s.run(t, ctx, textHas("rejected"), textHas("quota on this pool did not fit"))
		s.shot(t, ctx, "refused", false)
		s.axe(t, ctx, "reservation")
	})

	t.Run("cordon a node with confirmation and see the band", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "ops", "acme")
		s.open(t, ctx, "/console/pools/lab/nodes/gpu.h100-node-1?tenant=acme")
		s.run(t, ctx, textHas("ready"))
		s.axe(t, ctx, "node")
		s.run(t, ctx, chromedp.SendKeys(chromedp.CSS(`#cordon-reason`), "psu-swap"),
			pressCSS(`.actions button[type=submit]`),
			until(`document.getElementById("outcome").innerText.includes("is cordoned")`))
		if d := s.lastDialog(); !strings.Contains(d, "Cordon gpu.h100-node-1: no new reservation is placed on it") {
			t.Errorf("the cordon's confirmation said %q", d)
		}
		s.run(t, ctx, textHas("cordoned by operator"))
		s.shot(t, ctx, "node", false)
		s.open(t, ctx, "/console/pools/lab?tenant=acme&days=7")
		s.run(t, ctx, until(`document.querySelector("svg.timeline rect.band.cordoned")`))
		s.shot(t, ctx, "cordoned", false)
	})

	t.Run("a rollout watched to completion", func(t *testing.T) {
		var out api.RolloutResult
		call(t, admin, "rollouts.create", map[string]any{"tenantId": "platform", "version": "1.0.0", "pools": []string{"fleet-a", "fleet-b"},
			"waves": []map[string]any{{"nodes": 1}, {"percent": 100}}, "bakeSeconds": 0, "maxUnavailable": 2, "progressDeadlineSeconds": 120}, &out)
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "admin", "platform")
		s.open(t, ctx, "/console/rollouts/"+out.Rollout.RolloutID+"?tenant=platform")
		// The page refreshes itself while the rollout moves: no reload here.
		s.run(t, ctx, until(`document.querySelector("#page[data-live]") !== null || document.getElementById("main").innerText.includes("completed")`),
			textHas("completed"), textHas("6/6 updated"))
		s.shot(t, ctx, "rollout", true)
		s.axe(t, ctx, "rollout")
		s.open(t, ctx, "/console/rollouts?tenant=platform")
		s.run(t, ctx, textHas(out.Rollout.RolloutID), until(`document.querySelector(".wave.w-done")`))
		s.axe(t, ctx, "rollouts")
	})

	t.Run("a rollout paused and aborted", func(t *testing.T) {
		var out api.RolloutResult
		call(t, admin, "rollouts.create", map[string]any{"tenantId": "platform", "version": "1.1.0", "pools": []string{"fleet-b"},
			"waves": []map[string]any{{"nodes": 1}, {"percent": 100}}, "bakeSeconds": 3600, "maxUnavailable": 1, "progressDeadlineSeconds": 120}, &out)
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "admin", "platform")
		s.open(t, ctx, "/console/rollouts/"+out.Rollout.RolloutID+"?tenant=platform")
		s.run(t, ctx, textHas("1/2 updated"), press("Pause"), textHas("paused"))
		if d := s.lastDialog(); !strings.Contains(d, "Pause rollout") {
			t.Errorf("the pause's confirmation said %q", d)
		}
		// While it is paused the open page keeps asking; a refresh that
		// finds the rollout as it was reads it once and nothing more.
		n := s.log.Len()
		deadline := time.Now().Add(wait)
		for count(s.log.Since(n), "rollouts.get") < 6 {
			if time.Now().After(deadline) {
				t.Fatalf("the paused rollout's page refreshed %d times in %s", count(s.log.Since(n), "rollouts.get"), wait)
			}
			time.Sleep(100 * time.Millisecond) // polling the log for the page's refreshes
		}
		polls, calls, rcu, changed := rolloutPolls(s.log.Since(n))
		t.Logf("an open paused rollout page: %d refreshes, %d re-rendered, %d DynamoDB calls, %.1f read units: %.1f reads a refresh, %.0f read units a minute at the deployed 5 s",
			polls, changed, calls, rcu, float64(calls)/float64(polls), rcu/float64(polls)*12)
		if changed > 1 {
			t.Errorf("%d of %d refreshes of an unchanged paused rollout read its nodes again", changed, polls)
		}
		s.run(t, ctx, press("Abort"), textHas("rolled_back"))
		if d := s.lastDialog(); !strings.Contains(d, "1 updated nodes go back (1 to 1.0.0)") {
			t.Errorf("the abort's confirmation said %q", d)
		}
		s.shot(t, ctx, "rollout-aborted", true)
		s.open(t, ctx, "/console/rollouts?tenant=platform")
		s.run(t, ctx, textHas(out.Rollout.RolloutID), textHas("completed"))
		s.shot(t, ctx, "rollouts", false)
	})

	vkey := devstack.DevLogKey(t).VerifierKey()
	pin := func(t *testing.T, ctx context.Context) {
		s.open(t, ctx, "/console/settings?tenant=platform")
		s.run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#logkey-setting`)), chromedp.SetValue(chromedp.CSS(`#logkey-setting`), vkey),
			chromedp.Click(chromedp.CSS(`#settings button[type=submit]`)), until(`document.getElementById("settings-saved").innerText === "Saved."`))
	}
	t.Run("the log verified in the browser", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "admin", "platform")
		pin(t, ctx)
		s.axe(t, ctx, "settings")
		s.open(t, ctx, "/console/releases?tenant=platform")
		s.run(t, ctx, until(`document.querySelector("#checkpoint-status.ok")`),
			until(`document.querySelectorAll(".incl.ok").length === 2 && document.querySelectorAll(".incl.bad").length === 0`))
		s.shot(t, ctx, "releases", false)
		s.axe(t, ctx, "releases")
	})

	t.Run("a tampered checkpoint shown red", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "admin", "platform")
		pin(t, ctx)
		// The console's answer is changed on its way: the checkpoint claims
		// a third entry, its signature stays.
		paused := chromedp.Events(ctx, fetch.RequestPaused)
		go func() {
			for e, err := range paused {
				if err != nil {
					return
				}
				b, err := chromedp.Call(ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: e.RequestID})
				if err != nil {
					return
				}
				tampered := strings.ReplaceAll(string(b.Body), "dev.bettercompute.local/releases\n2\n", "dev.bettercompute.local/releases\n3\n")
				_, _ = chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID,
					ResponseCode: e.ResponseStatusCode, ResponseHeaders: e.ResponseHeaders, Body: []byte(tampered)})
			}
		}()
		if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
			{URLPattern: "*/console/f/releases*", RequestStage: fetch.RequestStageResponse}}}); err != nil {
			t.Fatal(err)
		}
		s.open(t, ctx, "/console/releases?tenant=platform")
		s.run(t, ctx, until(`document.querySelector("#checkpoint-status.bad")`),
			textHas("not verified: the signature does not verify under the pinned key"))
		s.shot(t, ctx, "releases-tampered", false)
	})

	t.Run("a tenant without a grant sees PERMISSION_DENIED", func(t *testing.T) {
		ctx := s.tab(t, 1280, 900)
		s.signIn(t, ctx, "mallory", "acme")
		s.run(t, ctx, textHas("PERMISSION_DENIED"))
		s.open(t, ctx, "/console/pools/gpu-pool-1?tenant=acme")
		s.run(t, ctx, textHas("PERMISSION_DENIED"))
		s.open(t, ctx, "/console/reservations/"+booked[0]+"?tenant=acme")
		s.run(t, ctx, textHas("PERMISSION_DENIED"))
		text := eval[string](t, ctx, `document.body.innerText`)
		for _, leak := range []string{booked[0], "gpu.h100", "free now"} {
			if strings.Contains(text, leak) && !strings.Contains(text, "reservations/"+leak) {
				t.Errorf("a viewer without a grant is shown %q:\n%s", leak, text)
			}
		}
		s.shot(t, ctx, "denied", false)
		s.axe(t, ctx, "denied")
	})

	t.Run("deployed sign-in: OIDC authorization code with PKCE", func(t *testing.T) {
		// The console as the Lambda serves it: no dev sign-in, a gateway that
		// refuses dev tokens, the viewer from the authorizer's claims.
		idp := newIdentityProvider(t, "admin")
		g := *s.st.App.Gateway
		g.AllowDevTokens = false
		c, err := console.New(console.Config{Caller: console.CallerFor(&g, s.st.Endpoints), OIDC: console.OIDC{Issuer: idp.srv.URL, ClientID: "console"}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(idp.authorizer(c))
		t.Cleanup(srv.Close)
		ctx := s.tab(t, 1280, 900)
		s.run(t, ctx, chromedp.Navigate(srv.URL+"/console/pools?tenant=acme"),
			until(`location.pathname === "/console/signin" && document.getElementById("oidc-signin")`),
			chromedp.SetValue(chromedp.CSS(`#tenant`), "acme"),
			chromedp.Click(chromedp.CSS(`#oidc-signin button[type=submit]`)),
			until(`location.pathname === "/console/pools" && document.getElementById("whoami").innerText.includes("admin@example.com")`),
			textHas("gpu-pool-1"))
		idp.mu.Lock()
		errs := idp.errs
		idp.mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("the provider refused: %v", errs)
		}
		if u := eval[string](t, ctx, `location.href`); strings.Contains(u, "code=") || strings.Contains(u, "token") {
			t.Errorf("the address holds a credential: %s", u)
		}
		if c := eval[string](t, ctx, `document.cookie`); c != "" {
			t.Errorf("the console set a cookie: %q", c)
		}
		if tok := eval[string](t, ctx, `sessionStorage.getItem("bc.token") || ""`); strings.Count(tok, ".") != 2 {
			t.Errorf("the session holds %q, want the ID token", tok)
		}
		if tok := eval[string](t, ctx, `localStorage.getItem("bc.token") || ""`); tok != "" {
			t.Errorf("the token is in localStorage")
		}
	})

	t.Run("a phone-width screenshot", func(t *testing.T) {
		ctx := s.tab(t, 375, 812)
		s.signIn(t, ctx, "alice", "acme")
		s.open(t, ctx, "/console/pools/gpu-pool-1?tenant=acme")
		s.run(t, ctx, until(`document.querySelector("svg.timeline")`))
		if width := eval[int](t, ctx, `document.documentElement.scrollWidth`); width > 375 {
			t.Errorf("the page is %d px wide at 375 px: it scrolls sideways", width)
		}
		s.shot(t, ctx, "phone-timeline", false)
		s.open(t, ctx, "/console/reservations/"+booked[0]+"?tenant=acme")
		if width := eval[int](t, ctx, `document.documentElement.scrollWidth`); width > 375 {
			t.Errorf("the reservation page is %d px wide at 375 px", width)
		}
		s.shot(t, ctx, "phone-reservation", false)
	})
	t.Logf("browser suite: %s", time.Since(start).Round(time.Millisecond))
}

// rolloutPolls adds up the rollout page's refreshes in lines: each reads
// rollouts.get; one that found a change also reads rollouts.nodes.
func rolloutPolls(lines []teststack.RequestLine) (polls, calls int, rcu float64, changed int) {
	for _, line := range lines {
		switch line.Method {
		case "rollouts.get":
			polls++
		case "rollouts.nodes":
			changed++
		default:
			continue
		}
		calls += int(line.Calls)
		rcu += line.RCU
	}
	return
}

func count(lines []teststack.RequestLine, method string) int {
	n := 0
	for _, l := range lines {
		if l.Method == method {
			n++
		}
	}
	return n
}
