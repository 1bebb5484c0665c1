package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// The console's own script and style, and htmx as the pinned npm package
// ships it (assets/htmx.min.js: a test holds it byte-identical to
// node_modules/htmx.org/dist/htmx.min.js of package-lock.json's version).
//
//go:embed assets/*
var assetFS embed.FS

// asset is one embedded file served under a name that carries its hash,
// so it can be cached for good and a page never runs a stale script.
type asset struct {
	url  string
	body []byte
	ct   string
}

var (
	assetsByName = map[string]*asset{} // console.js → its asset
	assetsByURL  = map[string]*asset{} // console-1a2b3c4d5e6f.js → its asset
)

func init() {
	entries, err := fs.ReadDir(assetFS, "assets")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		body, err := assetFS.ReadFile("assets/" + e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(body)
		ext := path.Ext(e.Name())
		if strings.HasSuffix(e.Name(), ".min.js") {
			ext = ".min.js"
		}
		hashed := strings.TrimSuffix(e.Name(), ext) + "-" + hex.EncodeToString(sum[:6]) + ext
		a := &asset{url: Prefix + "assets/" + hashed, body: body, ct: mime.TypeByExtension(path.Ext(e.Name()))}
		if a.ct == "" {
			a.ct = "application/octet-stream"
		}
		assetsByName[e.Name()] = a
		assetsByURL[hashed] = a
	}
}

// AssetURL is where an embedded asset is served (its hashed name).
func AssetURL(name string) string {
	if a, ok := assetsByName[name]; ok {
		return a.url
	}
	return ""
}

func serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := assetsByURL[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ct)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	_, _ = w.Write(a.body)
}
