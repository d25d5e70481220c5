package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// GET /api/v1/watch streams the read model's changes as server-sent events
// (https://html.spec.whatwg.org/multipage/server-sent-events.html), so a
// client follows a scale-up or scale-down without polling. Each event has
// an id (increasing per connection), a name and one line of JSON:
//
//	snapshot       {"groups":[Group...]}: first, and again whenever the
//	               server dropped changes (a client too slow to keep up,
//	               state reloaded); it replaces everything the client held
//	group          Group: a group was created or changed, or its counts did
//	transition     TransitionEntry: an instance changed state
//	deleted-group  {"id":"G"}
//	bye            {}: the server is shutting down; reconnect elsewhere
//
// and a ": keepalive" comment every WatchKeepalive. The JSON is that of
// GET /nodegroups items and GET /transitions items: no secret appears.
// Ids are per connection and Last-Event-ID is ignored: a reconnecting
// client starts from a fresh snapshot.

// watchRoute is the route pattern of the watch stream.
const watchRoute = "/api/v1/watch"

// Watch defaults.
const (
	DefaultMaxWatchers    = 100
	DefaultWatchBuffer    = 256
	DefaultWatchKeepalive = 15 * time.Second
	// watchWriteSlack is how long one write may take beyond the keepalive
	// interval: the write deadline, extended before each write, is the
	// keepalive interval plus this, so a client that stops reading is cut
	// off while an idle stream never is.
	watchWriteSlack = 10 * time.Second
)

type watchMetrics struct {
	watchers prometheus.Gauge
	events   *prometheus.CounterVec
	resyncs  prometheus.Counter
}

func newWatchMetrics(reg prometheus.Registerer) *watchMetrics {
	m := &watchMetrics{
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodesmith_gateway_rest_watchers",
			Help: "Open GET /api/v1/watch streams on this replica.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodesmith_gateway_rest_watch_events_total",
			Help: "Events sent on GET /api/v1/watch streams, by event name (keepalive comments excluded).",
		}, []string{"event"}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodesmith_gateway_rest_watch_resyncs_total",
			Help: "Fresh snapshots sent to watch streams that fell a whole buffer behind (or after the read model reloaded state) instead of their dropped changes.",
		}),
	}
	for _, e := range []string{EventSnapshot, EventGroup, EventTransition, EventDeletedGroup, EventBye} {
		m.events.WithLabelValues(e)
	}
	if reg != nil {
		reg.MustRegister(m.watchers, m.events, m.resyncs)
	}
	return m
}

// watchers bounds the open streams.
type watchers struct {
	max  int64
	open atomic.Int64
}

func (c *watchers) acquire() bool {
	if c.open.Add(1) > c.max {
		c.open.Add(-1)
		return false
	}
	return true
}

func (c *watchers) release() { c.open.Add(-1) }

func (h *handler) watch(w http.ResponseWriter, r *http.Request) {
	if !acceptsEventStream(r.Header.Values("Accept")) {
		h.writeError(w, r, newError(http.StatusNotAcceptable, contract.CodeInvalidArgument, "this endpoint serves text/event-stream only").with("header", "Accept"))
		return
	}
	if !h.watchers.acquire() {
		h.writeError(w, r, newError(http.StatusTooManyRequests, contract.CodeResourceExhausted,
			fmt.Sprintf("too many open watch streams on this gateway (at most %d); retry later", h.watchers.max)).
			with("maxWatchers", h.watchers.max))
		return
	}
	defer h.watchers.release()
	sub, snap, err := h.svc.Watch(r.URL.Query().Get("group"), h.watchBuffer)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer sub.Close()
	h.watchMetrics.watchers.Inc()
	defer h.watchMetrics.watchers.Dec()

	s := &sseWriter{w: w, rc: http.NewResponseController(w), window: h.watchKeepalive + watchWriteSlack, metrics: h.watchMetrics}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	// Reverse proxies (nginx) buffer responses unless told not to.
	hdr.Set("X-Accel-Buffering", "no")
	if err := s.extend(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return
	}
	w.WriteHeader(http.StatusOK)
	if s.send(EventSnapshot, h.snapshotJSON(snap)) != nil {
		return
	}
	stillAuthorized, _ := r.Context().Value(reauthKey{}).(func() bool)
	keepalive := time.NewTicker(h.watchKeepalive)
	defer keepalive.Stop()
	resync := func() error {
		h.watchMetrics.resyncs.Inc()
		return s.send(EventSnapshot, h.snapshotJSON(sub.Resync()))
	}
	for {
		var err error
		// A lost buffer first: the changes still in it are stale.
		select {
		case <-sub.Lost():
			err = resync()
		default:
		}
		if err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.shutdown:
			_ = s.send(EventBye, struct{}{})
			return
		case <-sub.Lost():
			err = resync()
		case ev := <-sub.Events():
			err = h.sendChange(s, ev)
		case <-keepalive.C:
			// A token removed from its file ends the streams it opened.
			if stillAuthorized != nil && !stillAuthorized() {
				h.log.InfoContext(r.Context(), "watch stream ended: its bearer token is no longer valid")
				return
			}
			err = s.comment("keepalive")
		}
		if err != nil {
			h.log.DebugContext(r.Context(), "watch stream ended", "err", err)
			return
		}
	}
}

func (h *handler) snapshotJSON(snap []app.GroupSnapshot) WatchSnapshot {
	out := WatchSnapshot{Groups: make([]Group, 0, len(snap))}
	for _, g := range snap {
		out.Groups = append(out.Groups, h.group(g.Group, g.Counts))
	}
	return out
}

func (h *handler) sendChange(s *sseWriter, ev app.WatchEvent) error {
	switch ev.Kind {
	case app.WatchGroup:
		return s.send(EventGroup, h.group(ev.Group, ev.Counts))
	case app.WatchGroupDeleted:
		return s.send(EventDeletedGroup, WatchDeletedGroup{ID: ev.GroupID})
	case app.WatchTransition:
		return s.send(EventTransition, transitionJSON(ev.Transition))
	}
	return nil
}

// sseWriter writes events, flushing each and extending the connection's
// write deadline first: the server's WriteTimeout is meant for ordinary
// requests and would otherwise cut the stream.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	window  time.Duration
	id      uint64
	metrics *watchMetrics
	buf     []byte
}

// extend pushes the write deadline window ahead. (The ReadTimeout needs
// nothing: net/http clears the read deadline once a bodiless request is
// read, and HTTP/2 applies it to the request body only.)
func (s *sseWriter) extend() error {
	return s.rc.SetWriteDeadline(time.Now().Add(s.window))
}

func (s *sseWriter) send(event string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encoding %s event: %w", event, err)
	}
	s.id++
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = strconv.AppendUint(s.buf, s.id, 10)
	s.buf = append(s.buf, "\nevent: "...)
	s.buf = append(s.buf, event...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, b...) // json.Marshal never writes a newline
	s.buf = append(s.buf, "\n\n"...)
	if err := s.write(); err != nil {
		return err
	}
	s.metrics.events.WithLabelValues(event).Inc()
	return nil
}

func (s *sseWriter) comment(text string) error {
	s.buf = append(append(append(s.buf[:0], ": "...), text...), "\n\n"...)
	return s.write()
}

func (s *sseWriter) write() error {
	if err := s.extend(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// acceptsEventStream reports whether the Accept headers allow
// text/event-stream (no header allows anything).
func acceptsEventStream(values []string) bool {
	if len(values) == 0 {
		return true
	}
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
					continue
				}
			}
			if mt == "text/event-stream" || mt == "text/*" || mt == "*/*" {
				return true
			}
		}
	}
	return false
}
