// Package console is the sidecar's web console: one HTML page, its
// stylesheet and its JavaScript modules, embedded in the binary and served
// by `leasehold serve` under /ui/.
//
// The assets hold no data, so they are served without the bearer token;
// the page reads everything through the /v1 API with the token the
// operator types in (kept in the tab's sessionStorage). The handler sets a
// Content-Security-Policy that admits only the console's own files
// (default-src 'self', no inline script or style), answers every asset with
// an ETag and Cache-Control: no-cache, so a browser revalidates after an
// upgrade instead of running a stale script against a newer API, and
// answers only GET and HEAD.
//
// The console lives outside openapi.yaml: the sidecar dispatches /ui and
// /ui/… to Handler before echo sees the request (see sidecar.Server.Handler),
// so echo's routes remain exactly the document's operations.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy every console answer carries: the
// page may load scripts, styles, images and API calls from its own origin
// only, and may not be framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// contentTypes maps the extensions of the assets to their media types,
// spelled here rather than taken from the mime package, whose table the
// host's /etc/mime.types can change.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console: /ui redirects to /ui/, /ui/ is the page,
// /ui/NAME an asset; anything else under /ui/ is 404.
func Handler() http.Handler {
	files := make(map[string]asset)
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		name := strings.TrimPrefix(p, "assets/")
		files[name] = asset{body: body, contentType: contentTypes[path.Ext(name)], etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a build defect.
		panic("console: embedded assets: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok || f.contentType == "" {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", f.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}

// Owns says whether a request path is the console's: /ui or anything
// under /ui/.
func Owns(path string) bool {
	return path == strings.TrimSuffix(Prefix, "/") || strings.HasPrefix(path, Prefix)
}
