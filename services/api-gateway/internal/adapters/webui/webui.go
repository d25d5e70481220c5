// Package webui serves the gateway's status page: static HTML, CSS and a
// little JavaScript that read the admin API (node groups, instances per
// state, recent transitions and errors) with the operator's bearer token
// and refresh themselves. The files hold no data and no token, so they are
// served without authentication; the data comes from /api/v1, which
// requires a token as always.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the page is served.
const Prefix = "/ui/"

// ContentSecurityPolicy allows the page its own script, style and API
// calls and nothing else: no inline script or style, no other origin, no
// framing, no form posts.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page under Prefix (mount it at Prefix).
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		// Small files: always revalidate, so an upgraded gateway never
		// runs a stale script against a newer API.
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// No directory listings: only the files themselves and the index.
		if p := strings.TrimPrefix(r.URL.Path, Prefix); p != "" && strings.HasSuffix(p, "/") {
			http.NotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// Redirect sends a browser from the root to the page.
func Redirect() http.Handler {
	return http.RedirectHandler(Prefix, http.StatusFound)
}
