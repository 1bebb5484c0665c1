package browser

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/bettercompute/control-plane/shared/console"
)

// identityProvider is a stand-in OpenID provider on TLS: discovery, an
// authorize endpoint that signs the user in at once, and a token endpoint
// that hands out an ID token only for the code's PKCE verifier. issued
// holds the tokens it gave, by token, for the stand-in JWT authorizer.
type identityProvider struct {
	srv    *httptest.Server
	sub    string
	mu     sync.Mutex
	codes  map[string]url.Values // code → the authorize request
	issued map[string]map[string]string
	errs   []string
}

func newIdentityProvider(t *testing.T, sub string) *identityProvider {
	p := &identityProvider{sub: sub, codes: map[string]url.Values{}, issued: map[string]map[string]string{}}
	mux := http.NewServeMux()
	cors := func(w http.ResponseWriter) { w.Header().Set("Access-Control-Allow-Origin", "*") }
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		cors(w)
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "authorization_endpoint": p.srv.URL + "/authorize", "token_endpoint": p.srv.URL + "/token"})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("client_id") != "console" {
			p.fail("authorize: " + r.URL.RawQuery)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.codes["code-1"] = q
		p.mu.Unlock()
		http.Redirect(w, r, q.Get("redirect_uri")+"?code=code-1&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		cors(w)
		_ = r.ParseForm()
		p.mu.Lock()
		defer p.mu.Unlock()
		asked, ok := p.codes[r.PostForm.Get("code")]
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || r.PostForm.Get("grant_type") != "authorization_code" || r.PostForm.Get("redirect_uri") != asked.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != asked.Get("code_challenge") {
			p.errs = append(p.errs, "token: "+r.PostForm.Encode())
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		delete(p.codes, r.PostForm.Get("code")) // a code is used once
		claims := map[string]string{"sub": p.sub, "email": p.sub + "@example.com", "nonce": asked.Get("nonce"), "aud": "console", "iss": p.srv.URL}
		body, _ := json.Marshal(claims)
		token := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + base64.RawURLEncoding.EncodeToString(body) + ".sig"
		p.issued[token] = claims
		_ = json.NewEncoder(w).Encode(map[string]string{"id_token": token, "token_type": "Bearer"})
	})
	p.srv = httptest.NewTLSServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *identityProvider) fail(s string) { p.mu.Lock(); p.errs = append(p.errs, s); p.mu.Unlock() }

// authorizer plays API Gateway's JWT authorizer in front of the console:
// the data and action routes need a token the provider issued, whose
// claims it hands on; the frame and its assets are public.
func (p *identityProvider) authorizer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/console/f/") || strings.HasPrefix(r.URL.Path, "/console/a/") {
			p.mu.Lock()
			claims, ok := p.issued[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
			p.mu.Unlock()
			if !ok {
				http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
				return
			}
			r = r.WithContext(console.WithClaims(r.Context(), claims))
		}
		h.ServeHTTP(w, r)
	})
}
