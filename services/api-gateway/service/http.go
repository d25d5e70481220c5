package service

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/webui"
)

// restRoot serves the REST port: the status page under /ui/ (no token:
// it holds no data), a redirect from / to it, and everything else through
// the admin API, which requires a token (so unknown paths still get 401,
// never a hint of what exists).
//
// It is a plain dispatcher rather than an http.ServeMux on purpose: a
// ServeMux sets Request.Pattern, which makes otelhttp rename the server
// span to the mux pattern after the admin API named it after its route.
func restRoot(api http.Handler) http.Handler {
	ui := webui.Handler()
	redirect := webui.Redirect()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			nameSpan(r, "/")
			redirect.ServeHTTP(w, r)
		case p == strings.TrimSuffix(webui.Prefix, "/"):
			nameSpan(r, webui.Prefix)
			http.Redirect(w, r, webui.Prefix, http.StatusMovedPermanently)
		case strings.HasPrefix(p, webui.Prefix):
			nameSpan(r, webui.Prefix+"*")
			ui.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

func nameSpan(r *http.Request, route string) {
	method := r.Method
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "HTTP" // clients choose methods; keep span names bounded
	}
	span := trace.SpanFromContext(r.Context())
	span.SetName(method + " " + route)
	span.SetAttributes(attribute.String("http.route", route))
}
