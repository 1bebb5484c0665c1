// Package console is the web console: server-rendered pages (html/template)
// of a pool's timeline, its nodes, reservations, rollouts and the release
// log, drawn from the API's own methods called in process with the viewer's
// credentials through the gateway (Caller), so a viewer sees exactly what
// their own API calls would answer. It has no store and no account system
// of its own: the shell and its assets are public; every fragment and
// action carries the viewer's bearer token (htmx sends it from the
// browser's session storage) and is decided by the API's grants.
package console

import (
	"embed"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Prefix is where the console is served, deployed and locally.
const Prefix = "/console/"

// OIDC is the sign-in of a deployed console: authorization code with PKCE
// in the browser, against the issuer the API's JWT authorizer trusts.
type OIDC struct {
	Issuer   string // the JWT authorizer's issuer
	ClientID string // a public client (no secret); the authorizer's audience
	// AuthorizationEndpoint and TokenEndpoint override discovery (Cognito
	// serves them on its hosted domain, not on the issuer's).
	AuthorizationEndpoint string
	TokenEndpoint         string
	Scopes                string // default "openid"
}

// Config is what the wiring gives the console.
type Config struct {
	Caller *Caller
	// Dev offers the local sign-in that picks a dev:<principal> (the local
	// gateway's dev tokens), suggesting DevPrincipals; the Lambda never sets
	// it, and its gateway refuses dev tokens anyway.
	Dev           bool
	DevPrincipals []string
	OIDC          OIDC
	Now           func() time.Time
	Logger        *slog.Logger
	// Poll is how often a page refreshes while something moves (default 5 s).
	Poll time.Duration
	// PageNodes is how many nodes a timeline page shows (default
	// NodesPerPage).
	PageNodes int
}

// Console serves the pages.
type Console struct {
	cfg  Config
	tmpl *template.Template
	mux  *http.ServeMux
	csp  string
}

//go:embed templates/*.html
var templateFS embed.FS

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Second
	}
	if cfg.PageNodes <= 0 || cfg.PageNodes > api.MaxUsageNodes {
		cfg.PageNodes = NodesPerPage
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux()}
	t, err := template.New("").Funcs(c.funcs()).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	c.tmpl = t
	c.csp = contentSecurityPolicy(cfg.OIDC)
	c.routes()
	return c, nil
}

// ServeHTTP sets the headers every answer carries, then routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", c.csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	c.mux.ServeHTTP(w, r)
}

func (c *Console) routes() {
	c.mux.HandleFunc("GET /console/assets/{name}", serveAsset)
	c.mux.HandleFunc("GET /console/signin", c.signin)
	c.mux.HandleFunc("GET /console/callback", c.shell)
	c.mux.HandleFunc("GET /console/settings", c.shell)
	c.mux.HandleFunc("GET /console/{$}", c.shell)
	c.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusFound)
	})
	// Pages: the shell of each is public and holds no data; its fragment
	// (/console/f/…) is fetched with the viewer's token.
	for _, p := range []string{"pools", "pools/{pool}", "pools/{pool}/nodes/{node}", "reservations/{id}", "rollouts", "rollouts/{id}", "releases"} {
		c.mux.HandleFunc("GET /console/"+p, c.shell)
	}
	c.mux.HandleFunc("GET /console/f/{$}", c.fragment(c.poolsPage))
	c.mux.HandleFunc("GET /console/f/pools", c.fragment(c.poolsPage))
	c.mux.HandleFunc("GET /console/f/pools/{pool}", c.fragment(c.poolPage))
	c.mux.HandleFunc("GET /console/f/pools/{pool}/nodes/{node}", c.fragment(c.nodePage))
	c.mux.HandleFunc("GET /console/f/reservations/{id}", c.fragment(c.reservationPage))
	c.mux.HandleFunc("GET /console/f/rollouts", c.fragment(c.rolloutsPage))
	c.mux.HandleFunc("GET /console/f/rollouts/{id}", c.fragment(c.rolloutPage))
	c.mux.HandleFunc("GET /console/f/releases", c.fragment(c.releasesPage))
	// Actions change state: POST only, with the bearer token in a header
	// (never a cookie), so a cross-site form cannot make one.
	c.mux.HandleFunc("POST /console/a/{action}", c.action)
}

// contentSecurityPolicy: scripts and styles only from the console itself
// (no inline script, no eval), no framing, and connections only to itself
// and the sign-in provider's endpoints.
func contentSecurityPolicy(o OIDC) string {
	connect := []string{"'self'"}
	for _, u := range []string{o.Issuer, o.TokenEndpoint} {
		if origin := originOf(u); origin != "" && !strings.Contains(strings.Join(connect, " "), origin) {
			connect = append(connect, origin)
		}
	}
	forms := []string{"'self'"}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " +
		strings.Join(connect, " ") + "; form-action " + strings.Join(forms, " ") +
		"; frame-ancestors 'none'; base-uri 'none'"
}

func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// Frame is the page frame: no data of the API, only where to fetch it
// and how to sign in.
type Frame struct {
	Title    string
	Dev      bool
	OIDC     OIDC
	Page     string
	NoSignIn bool
}

func (c *Console) shell(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "shell", Frame{Title: "Better Compute console", Dev: c.cfg.Dev, OIDC: c.cfg.OIDC,
		Page: strings.TrimPrefix(r.URL.Path, "/console")})
}

type signinData struct {
	Frame
	Principals []string
}

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "signin", signinData{Frame: Frame{Title: "Sign in · Better Compute console",
		Dev: c.cfg.Dev, OIDC: c.cfg.OIDC, NoSignIn: true}, Principals: c.cfg.DevPrincipals})
}

func (c *Console) render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	if err := c.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		c.cfg.Logger.Error("console render", "template", name, "error", err.Error())
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// link is a console path for the viewer's tenant.
func (c *Console) link(v Viewer, path string) string {
	return path + "?tenant=" + url.QueryEscape(v.Tenant)
}

func (c *Console) funcs() template.FuncMap {
	return template.FuncMap{
		"asset": AssetURL,
		// utc shows a time in UTC; the script adds the viewer's local time
		// as its title (hover).
		"utc": func(t any) template.HTML {
			var at time.Time
			switch x := t.(type) {
			case time.Time:
				at = x
			case *time.Time:
				if x == nil {
					return "—"
				}
				at = *x
			default:
				return ""
			}
			if at.IsZero() {
				return "—"
			}
			return template.HTML(`<time datetime="` + at.UTC().Format(time.RFC3339) + `">` + at.UTC().Format("2006-01-02 15:04") + ` UTC</time>`)
		},
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"pct":     func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) + " %" },
		"link": func(tenant, path string, kv ...string) string {
			q := url.Values{"tenant": {tenant}}
			for i := 0; i+1 < len(kv); i += 2 {
				q.Set(kv[i], kv[i+1])
			}
			return path + "?" + q.Encode()
		},
		"add":    func(a, b int) int { return a + b },
		"plural": plural,
		"join":   strings.Join,
		"rfc":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}
}
