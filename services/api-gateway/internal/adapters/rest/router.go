// Package rest is the operators' admin API under /api/v1: read the node
// groups and instances the gateway mirrors, scale a group, retry or
// force-delete an instance. Every request needs a bearer token; read-only
// tokens may only read. Errors are JSON {"code","message","details"}.
package rest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"

	"github.com/nodesmith/nodesmith/libs/sealed"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// DefaultMaxBodyBytes bounds request bodies.
const DefaultMaxBodyBytes = 1 << 20

// Options configure the handler.
type Options struct {
	// MaxBodyBytes bounds request bodies (DefaultMaxBodyBytes when zero).
	MaxBodyBytes int64
	Logger       *slog.Logger
	Registry     prometheus.Registerer
	// SecretsKey seals cloud credentials written to accounts; nil refuses
	// such writes (503) but accepts accounts without credentials.
	SecretsKey *sealed.Key
	// RateLimit is the steady rate (requests per second) each bearer token
	// may make through this handler, RateBurst how many at once; zero
	// disables the limit. Past it a request gets 429 with Retry-After.
	RateLimit float64
	RateBurst int
	// MaxWatchers bounds the open GET /watch streams (DefaultMaxWatchers
	// when zero); past it a watch gets 429.
	MaxWatchers int
	// WatchBuffer is how many changes a watch stream may fall behind
	// before it gets a fresh snapshot instead (DefaultWatchBuffer when
	// zero).
	WatchBuffer int
	// WatchKeepalive is the interval of the streams' keepalive comments
	// (DefaultWatchKeepalive when zero).
	WatchKeepalive time.Duration
	// Shutdown, closed when the server starts shutting down, makes the
	// open watch streams send a bye event and end (so a graceful shutdown
	// need not wait for their clients to leave). Register its closing with
	// http.Server.RegisterOnShutdown.
	Shutdown <-chan struct{}
}

type handler struct {
	svc     *app.Service
	auth    *Authenticator
	log     *slog.Logger
	maxBody int64
	metrics *metrics
	secrets *sealed.Key
	limiter *tokenLimiter

	watchers       *watchers
	watchBuffer    int
	watchKeepalive time.Duration
	watchMetrics   *watchMetrics
	shutdown       <-chan struct{}
}

type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	rateLimited *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_rest_requests_total",
			Help: "Admin API requests, by route pattern, method and HTTP status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodesmith_gateway_rest_request_duration_seconds",
			Help:    "Admin API latency, by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_rest_rate_limited_total",
			Help: "Admin API requests refused with 429 because their bearer token exceeded --rest-rate-limit on this replica, by the token's role.",
		}, []string{"role"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.rateLimited)
	}
	return m
}

// Route is one route of the API, as registered (for the OpenAPI test).
type Route struct {
	Method, Pattern string
}

// NewHandler returns the admin API.
func NewHandler(svc *app.Service, auth *Authenticator, o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxWatchers <= 0 {
		o.MaxWatchers = DefaultMaxWatchers
	}
	if o.WatchBuffer <= 0 {
		o.WatchBuffer = DefaultWatchBuffer
	}
	if o.WatchKeepalive <= 0 {
		o.WatchKeepalive = DefaultWatchKeepalive
	}
	h := &handler{svc: svc, auth: auth, log: o.Logger, maxBody: o.MaxBodyBytes, metrics: newMetrics(o.Registry), secrets: o.SecretsKey,
		limiter:  newTokenLimiter(o.RateLimit, o.RateBurst),
		watchers: &watchers{max: int64(o.MaxWatchers)}, watchBuffer: o.WatchBuffer, watchKeepalive: o.WatchKeepalive,
		watchMetrics: newWatchMetrics(o.Registry), shutdown: o.Shutdown}

	r := chi.NewRouter()
	r.Use(h.observe, h.recoverer, h.limitBody, h.authenticate)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, newError(http.StatusNotFound, contract.CodeNotFound, "no such route: "+r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, newError(http.StatusMethodNotAllowed, contract.CodeUnimplemented, r.Method+" is not allowed on "+r.URL.Path))
	})
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/nodegroups", h.listGroups)
		r.Get("/nodegroups/{id}", h.getGroup)
		r.Put("/nodegroups/{id}", h.putGroup)
		r.Patch("/nodegroups/{id}", h.patchGroup)
		r.Delete("/nodegroups/{id}", h.deleteGroup)
		r.Post("/nodegroups/{id}/scale", h.scaleGroup)
		r.Post("/nodegroups/{id}/adopt", h.adopt)
		r.Get("/instances", h.listInstances)
		r.Get("/instances/{id}", h.getInstance)
		r.Post("/instances/{id}/retry", h.instanceAction(ports.ActionRetry, http.StatusOK))
		r.Delete("/instances/{id}", h.instanceAction(ports.ActionForceDelete, http.StatusAccepted))
		r.Post("/instances/{id}/delete", h.deleteInstanceGracefully)
		r.Post("/reconciler/release-orphans", h.releaseOrphans)
		r.Get("/templates", h.listTemplates)
		r.Get("/templates/{name}", h.getTemplate)
		r.Put("/templates/{name}", h.putTemplate)
		r.Patch("/templates/{name}", h.patchTemplate)
		r.Delete("/templates/{name}", h.deleteCatalog(app.KindTemplates))
		r.Get("/accounts", h.listAccounts)
		r.Get("/accounts/{name}", h.getAccount)
		r.Put("/accounts/{name}", h.putAccount)
		r.Delete("/accounts/{name}", h.deleteCatalog(app.KindAccounts))
		r.Get("/hooks", h.listHooks)
		r.Get("/hooks/{name}", h.getHook)
		r.Put("/hooks/{name}", h.putHook)
		r.Delete("/hooks/{name}", h.deleteCatalog(app.KindHooks))
		r.Get("/transitions", h.listTransitions)
		r.Get("/offerings/unavailable", h.unavailableOfferings)
		r.Get("/watch", h.watch) // watchRoute
		r.Get("/status", h.status)
		r.Get("/openapi.json", h.openAPI)
	})
	return r
}

// Routes lists the routes NewHandler serves.
func Routes(hnd http.Handler) []Route {
	var out []Route
	if r, ok := hnd.(chi.Routes); ok {
		_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			out = append(out, Route{Method: method, Pattern: strings.TrimSuffix(route, "/")})
			return nil
		})
	}
	return out
}

type roleKey struct{}

// reauthKey carries a func reporting whether the request's token is still
// valid (tokens files are re-read): long streams check it now and then.
type reauthKey struct{}

func roleFrom(r *http.Request) Role {
	role, _ := r.Context().Value(roleKey{}).(Role)
	return role
}

// authenticate requires a bearer token for every request: read-only
// tokens may GET and HEAD, everything else needs admin. Anonymous requests
// get 401 before routing, so the route table is not probeable.
func (h *handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r.Header.Get("Authorization"))
		role := RoleNone
		if ok && h.auth != nil {
			role = h.auth.Authenticate(token)
		}
		if role == RoleNone {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nodesmith"`)
			msg := "a bearer token is required"
			if ok {
				msg = "invalid bearer token"
			}
			h.writeError(w, r, newError(http.StatusUnauthorized, contract.CodeUnauthenticated, msg))
			return
		}
		// Per token, after authentication: unknown tokens cannot fill
		// the table, and one busy script cannot starve the others.
		if ok, wait := h.limiter.allow(token, time.Now()); !ok {
			h.rateLimited(w, r, role, wait)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && role < RoleAdmin {
			h.writeError(w, r, newError(http.StatusForbidden, contract.CodePermissionDenied, "this token is read-only").with("role", role.String()))
			return
		}
		ctx := context.WithValue(r.Context(), roleKey{}, role)
		ctx = context.WithValue(ctx, reauthKey{}, func() bool { return h.auth.Authenticate(token) != RoleNone })
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func bearer(header string) (string, bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(header), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (h *handler) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > h.maxBody {
			h.writeError(w, r, newError(http.StatusRequestEntityTooLarge, contract.CodeInvalidArgument, "request body exceeds "+strconv.FormatInt(h.maxBody, 10)+" bytes"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
		next.ServeHTTP(w, r)
	})
}

func (h *handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(p)
				}
				h.log.ErrorContext(r.Context(), "panic in REST handler", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				h.writeError(w, r, newError(http.StatusInternalServerError, contract.CodeInternal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines of the watch stream).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// observe records metrics by route pattern (never the raw path: ids would
// explode the label set).
func (h *handler) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		default:
			method = "OTHER" // clients choose methods; keep the label set bounded
		}
		if route != "unmatched" {
			// The server span (otelhttp, outside the router) is named
			// after the route pattern only now that routing happened.
			span := trace.SpanFromContext(r.Context())
			span.SetName(method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		if route != watchRoute {
			// A watch stream's duration is how long its client stayed,
			// not latency: it would only fill the +Inf bucket.
			h.metrics.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		}
		h.metrics.requests.WithLabelValues(route, method, strconv.Itoa(rec.status)).Inc()
	})
}
