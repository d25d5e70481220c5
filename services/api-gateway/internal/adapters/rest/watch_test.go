package rest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/rest"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// sseEvent is one parsed server-sent event; comment holds a comment line's
// text (and nothing else is set).
type sseEvent struct {
	id          int
	event, data string
	comment     string
}

// sseStream reads events from a response body in the background.
type sseStream struct {
	events chan sseEvent
	done   chan error // the read's end (io.EOF for a clean end)
}

func readSSE(body io.Reader) *sseStream {
	s := &sseStream{events: make(chan sseEvent, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				ev.comment = strings.TrimSpace(strings.TrimPrefix(line, ":"))
			case strings.HasPrefix(line, "id: "):
				ev.id, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if ev.data != "" {
					s.events <- sseEvent{event: "error", data: "more than one data line"}
				}
				ev.data = strings.TrimPrefix(line, "data: ")
			default:
				s.events <- sseEvent{event: "error", data: "unexpected line " + line}
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		s.done <- err
	}()
	return s
}

// next returns the next event, skipping keepalive comments.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	for {
		select {
		case ev := <-s.events:
			if ev.comment != "" {
				continue
			}
			if ev.event == "error" {
				t.Fatalf("malformed stream: %s", ev.data)
			}
			return ev
		case err := <-s.done:
			t.Fatalf("stream ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
	}
}

// watchServer serves the fixture's handler on a real connection.
func watchServer(t *testing.T, f *fixture) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	return srv
}

// watchResponse is the head of a watch response, and the body of an
// error.
type watchResponse struct {
	status int
	proto  string
	header http.Header
	body   []byte
}

// openWatch starts GET path on srv with token and returns the response
// (the caller checks the status) and, for 200, the stream of its body
// (closed at the test's end).
func openWatch(t *testing.T, srv *httptest.Server, path, token string) (watchResponse, *sseStream) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	head := watchResponse{status: resp.StatusCode, proto: resp.Proto, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		head.body, _ = io.ReadAll(resp.Body)
		return head, nil
	}
	return head, readSSE(resp.Body)
}

func decode[T any](t *testing.T, data string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatalf("event data %q: %v", data, err)
	}
	return v
}

// putInstance stores an instance of web in state, with its history
// extended by the move into it (as lifecycle writes records).
func (f *fixture) putInstance(id string, state domain.InstanceState, reason string) {
	key := "web." + id
	rec := &domain.Instance{ID: id, Group: "web", ProviderID: providerid.Placeholder("web", id)}
	if v, ok := f.rm.Instance(id); ok {
		cp := *v.Record
		cp.History = slices.Clone(cp.History)
		rec = &cp
	}
	rec.History = append(rec.History, domain.Transition{From: rec.State, To: state, Reason: reason, At: time.Now()})
	rec.State = state
	f.rev++
	f.rm.PutInstance(key, f.rev, rec)
}

// The stream starts with a snapshot whose groups are exactly GET
// /nodegroups' items; then a new instance's transition and its group's new
// counts, a scale and a delete arrive as events, in order, with ids
// increasing by one. No secret of the records is ever sent.
func TestWatchStream(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixtureWith(t, func(o *rest.Options) { o.Registry = reg })
	f.seed()
	f.answerSetTarget()
	srv := watchServer(t, f)
	resp, s := openWatch(t, srv, "/api/v1/watch", readOnlyToken)
	if resp.status != http.StatusOK {
		t.Fatalf("status %d", resp.status)
	}
	if ct := resp.header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	var raw strings.Builder
	lastID := 0
	next := func(want string) sseEvent {
		t.Helper()
		ev := s.next(t)
		if ev.event != want {
			t.Fatalf("event %q (%s), want %q", ev.event, ev.data, want)
		}
		if ev.id != lastID+1 {
			t.Errorf("id %d after %d", ev.id, lastID)
		}
		lastID = ev.id
		raw.WriteString(ev.data)
		return ev
	}

	snap := decode[map[string][]json.RawMessage](t, next(rest.EventSnapshot).data)
	list := decode[struct{ Items []json.RawMessage }](t, string(f.do(t, call{method: "GET", path: "/api/v1/nodegroups", token: readOnlyToken}).body))
	if len(snap["groups"]) != 1 || !jsonEqual(t, snap["groups"][0], list.Items[0]) {
		t.Fatalf("snapshot groups %s differ from GET /nodegroups items %s", snap["groups"], list.Items)
	}
	if g := decode[rest.Group](t, string(snap["groups"][0])); g.Instances["RUNNING"] != 3 {
		t.Errorf("snapshot counts = %v", g.Instances)
	}

	f.putInstance("i-4", domain.StatePending, "created")
	f.putInstance("i-4", domain.StateCreating, "dispatched in batch b-9")
	tr := decode[rest.TransitionEntry](t, next(rest.EventTransition).data)
	if tr.Instance != "i-4" || tr.Group != "web" || tr.To != "PENDING" || tr.Reason != "created" || tr.At == "" {
		t.Errorf("first transition = %+v", tr)
	}
	if g := decode[rest.Group](t, next(rest.EventGroup).data); g.Instances["PENDING"] != 1 || g.Instances["RUNNING"] != 3 {
		t.Errorf("counts after the creation = %v", g.Instances)
	}
	tr = decode[rest.TransitionEntry](t, next(rest.EventTransition).data)
	if tr.From != "PENDING" || tr.To != "CREATING" || tr.Reason != "dispatched in batch b-9" {
		t.Errorf("second transition = %+v", tr)
	}
	if g := decode[rest.Group](t, next(rest.EventGroup).data); g.Instances["PENDING"] != 0 || g.Instances["CREATING"] != 1 {
		t.Errorf("counts after the dispatch = %v", g.Instances)
	}
	// The transition item is exactly GET /transitions' newest.
	recent := decode[struct{ Items []json.RawMessage }](t, string(f.do(t, call{method: "GET", path: "/api/v1/transitions?limit=1", token: readOnlyToken}).body))
	if want, _ := json.Marshal(tr); !jsonEqual(t, recent.Items[0], want) {
		t.Errorf("transition event %s differs from GET /transitions item %s", want, recent.Items[0])
	}

	if r := f.do(t, call{method: "POST", path: "/api/v1/nodegroups/web/scale", token: adminToken, body: `{"targetSize":5}`}); r.status != 200 {
		t.Fatalf("scale: %d %s", r.status, r.body)
	}
	if g := decode[rest.Group](t, next(rest.EventGroup).data); g.TargetSize != 5 || g.Instances["CREATING"] != 1 {
		t.Errorf("group after the scale = %+v", g)
	}
	f.rev++
	f.rm.DeleteGroup("web", f.rev)
	if d := decode[rest.WatchDeletedGroup](t, next(rest.EventDeletedGroup).data); d.ID != "web" {
		t.Errorf("deleted-group = %+v", d)
	}
	for _, secret := range []string{"s3cr3t", "hunter2", "p4ssw0rd", "joined i-"} {
		if strings.Contains(raw.String(), secret) {
			t.Errorf("the stream carries %q", secret)
		}
	}
	if n := metricstest.Value(t, reg, "nodesmith_gateway_rest_watchers", nil); n != 1 {
		t.Errorf("watchers gauge = %v", n)
	}
	if n := metricstest.Value(t, reg, "nodesmith_gateway_rest_watch_events_total", map[string]string{"event": "transition"}); n != 2 {
		t.Errorf("transition events counted = %v", n)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		t.Fatalf("not JSON: %s / %s", a, b)
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return string(ax) == string(by)
}

func (f *fixture) putGroup(id string, target int32) {
	f.rev++
	f.rm.PutGroup(id, f.rev, &domain.NodeGroup{ID: id, MinSize: 0, MaxSize: 100, TargetSize: target})
}

// ?group=G streams only G's events; an unknown group is 404.
func TestWatchGroupFilter(t *testing.T) {
	f := newFixture(t)
	f.seed()
	f.putGroup("gpu", 0)
	srv := watchServer(t, f)
	_, s := openWatch(t, srv, "/api/v1/watch?group=gpu", readOnlyToken)
	snap := decode[rest.WatchSnapshot](t, s.next(t).data)
	if len(snap.Groups) != 1 || snap.Groups[0].ID != "gpu" {
		t.Fatalf("snapshot = %+v", snap)
	}
	f.putGroup("web", 7)
	f.putInstance("i-9", domain.StatePending, "created")
	f.putGroup("gpu", 2)
	if ev := s.next(t); ev.event != rest.EventGroup || decode[rest.Group](t, ev.data).ID != "gpu" {
		t.Fatalf("first event after the snapshot = %+v, want gpu's", ev)
	}

	resp, _ := openWatch(t, srv, "/api/v1/watch?group=nope", readOnlyToken)
	if resp.status != http.StatusNotFound || !strings.Contains(string(resp.body), `"not_found"`) {
		t.Errorf("unknown group: %d %s", resp.status, resp.body)
	}
}

// Anonymous and unknown tokens get 401; read-only tokens may watch; a
// client that accepts only JSON gets 406; before the read model loaded,
// 503.
func TestWatchAuth(t *testing.T) {
	f := newFixture(t)
	srv := watchServer(t, f)
	if resp, _ := openWatch(t, srv, "/api/v1/watch", readOnlyToken); resp.status != http.StatusServiceUnavailable {
		t.Errorf("unsynced: status %d", resp.status)
	}
	f.seed()
	for token, want := range map[string]int{"": 401, "not-a-real-token-at-all": 401, readOnlyToken: 200, adminToken: 200} {
		resp, _ := openWatch(t, srv, "/api/v1/watch", token)
		if resp.status != want {
			t.Errorf("token %q: status %d, want %d", token, resp.status, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+readOnlyToken)
	req.Header.Set("Accept", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotAcceptable {
		t.Errorf("Accept: application/json: status %d", resp.StatusCode)
	}
}

// Past --rest-max-watchers a watch gets 429 with the JSON error body; a
// closed stream frees its slot.
func TestWatchCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixtureWith(t, func(o *rest.Options) { o.MaxWatchers = 2; o.Registry = reg })
	f.seed()
	srv := watchServer(t, f)
	var cancels []context.CancelFunc
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/watch", nil)
		req.Header.Set("Authorization", "Bearer "+readOnlyToken)
		resp, err := srv.Client().Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("watch within the cap: %v %v", resp, err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		readSSE(resp.Body)
	}
	resp, _ := openWatch(t, srv, "/api/v1/watch", adminToken)
	if resp.status != http.StatusTooManyRequests {
		t.Fatalf("past the cap: status %d", resp.status)
	}
	var e rest.ErrorBody
	if json.Unmarshal(resp.body, &e) != nil || e.Code != "resource_exhausted" || e.Details["maxWatchers"] != float64(2) {
		t.Fatalf("past the cap: body %s", resp.body)
	}
	cancels[0]()
	// The handler notices the client left and frees the slot.
	deadline := time.Now().Add(10 * time.Second)
	for metricstest.Value(t, reg, "nodesmith_gateway_rest_watchers", nil) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's slot was not freed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, _ := openWatch(t, srv, "/api/v1/watch", adminToken); resp.status != http.StatusOK {
		t.Fatalf("after a stream closed: status %d", resp.status)
	}
	cancels[1]()
}

// pipeWriter is a ResponseWriter whose writes block until the test reads
// them: a client that stops reading.
type pipeWriter struct {
	header http.Header
	w      *io.PipeWriter
}

func (p *pipeWriter) Header() http.Header         { return p.header }
func (p *pipeWriter) WriteHeader(int)             {}
func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeWriter) Flush()                      {}

// A client that falls more than the buffer behind does not hold up the
// read model: it gets a fresh snapshot (after at most the one event that
// was being written) instead of the changes it missed.
func TestWatchSlowSubscriberGetsSnapshot(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixtureWith(t, func(o *rest.Options) { o.WatchBuffer = 2; o.Registry = reg })
	f.seed()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+readOnlyToken)
	served := make(chan struct{})
	go func() {
		defer close(served)
		f.h.ServeHTTP(&pipeWriter{header: http.Header{}, w: pw}, req)
	}()
	t.Cleanup(func() {
		cancel()
		_ = pr.Close()
		<-served
	})
	s := readSSE(pr)
	if ev := s.next(t); ev.event != rest.EventSnapshot {
		t.Fatalf("first event %q", ev.event)
	}

	// The test takes no events now: once readSSE's buffer (1024 events)
	// is full the pipe blocks, and the stream's writes with it. Scale
	// many more times than that.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			f.putGroup("web", int32(i+1))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the read model blocked on a slow watch stream")
	}
	// The stream converges on the last target; with at most 1024 events
	// buffered by the reader it cannot have carried every change, so it
	// resynced at least once on the way.
	groups, snapshots := 0, 0
	for target := int32(0); target != 2000; {
		switch ev := s.next(t); ev.event {
		case rest.EventSnapshot:
			snapshots++
			target = decode[rest.WatchSnapshot](t, ev.data).Groups[0].TargetSize
		case rest.EventGroup:
			groups++
			target = decode[rest.Group](t, ev.data).TargetSize
		default:
			t.Fatalf("unexpected %+v", ev)
		}
	}
	if snapshots < 1 || groups >= 2000 {
		t.Errorf("%d group events and %d snapshots for 2000 changes: the stream was not resynced", groups, snapshots)
	}
	if n := metricstest.Value(t, reg, "nodesmith_gateway_rest_watch_resyncs_total", nil); n != float64(snapshots) {
		t.Errorf("resyncs counted = %v, snapshots seen %d", n, snapshots)
	}
	f.putGroup("web", 3)
	if ev := s.next(t); ev.event != rest.EventGroup || decode[rest.Group](t, ev.data).TargetSize != 3 {
		t.Fatalf("event after the resync = %+v", ev)
	}
}

// The server's ReadTimeout and WriteTimeout (meant for ordinary requests)
// do not cut a stream, over HTTP/1.1 and HTTP/2, behind otelhttp as the
// gateway serves it: it outlives them by far and still delivers.
func TestWatchOutlivesServerTimeouts(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, func(o *rest.Options) { o.WatchKeepalive = 50 * time.Millisecond })
			f.seed()
			srv := httptest.NewUnstartedServer(otelhttp.NewHandler(f.h, "rest"))
			// Long enough for a TLS handshake on a loaded machine.
			const timeout = time.Second
			srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
			if h2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			resp, s := openWatch(t, srv, "/api/v1/watch", readOnlyToken)
			if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; resp.proto != want {
				t.Fatalf("served over %s, want %s", resp.proto, want)
			}
			s.next(t)
			// Keepalives keep coming for three times the timeouts.
			start := time.Now()
			for n := 0; time.Since(start) < 3*timeout; {
				select {
				case ev := <-s.events:
					if ev.comment != "keepalive" {
						t.Fatalf("unexpected %+v", ev)
					}
					n++
				case err := <-s.done:
					t.Fatalf("stream cut after %d keepalives: %v", n, err)
				case <-time.After(10 * time.Second):
					t.Fatal("no keepalive")
				}
			}
			f.putGroup("web", 9)
			if ev := s.next(t); ev.event != rest.EventGroup {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}

// A graceful shutdown ends open streams with a bye event, so it does not
// wait for their clients.
func TestWatchShutdownSaysBye(t *testing.T) {
	shutdown := make(chan struct{})
	f := newFixtureWith(t, func(o *rest.Options) { o.Shutdown = shutdown })
	f.seed()
	srv := httptest.NewUnstartedServer(f.h)
	srv.Config.RegisterOnShutdown(func() { close(shutdown) })
	srv.Start()
	t.Cleanup(srv.Close)
	_, s := openWatch(t, srv, "/api/v1/watch", readOnlyToken)
	s.next(t)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Config.Shutdown(ctx) }()
	ev := s.next(t)
	if ev.event != rest.EventBye || ev.data != "{}" {
		t.Fatalf("last event %+v, want bye {}", ev)
	}
	select {
	case err := <-s.done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("stream ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after bye")
	}
	if err := <-stopped; err != nil {
		t.Errorf("Shutdown: %v (the stream held it up)", err)
	}
}

// A token removed from its file ends the streams it opened (checked at
// each keepalive); other tokens' streams go on.
func TestWatchEndsWhenTokenRevoked(t *testing.T) {
	const kept = "kept-reader-token-0123456789"
	file := filepath.Join(t.TempDir(), "readonly-tokens")
	if err := os.WriteFile(file, []byte(readOnlyToken+"\n"+kept+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rm := app.NewReadModel()
	svc := app.NewService(rm, &natsreq.Fake{}, app.Config{OpTimeout: 2 * time.Second, GPULabel: "gpu"}, nil)
	auth, err := rest.NewAuthenticator(rest.TokenConfig{ReadOnlyTokenFile: file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rm: rm, h: rest.NewHandler(svc, auth, rest.Options{WatchKeepalive: 20 * time.Millisecond})}
	f.seed()
	srv := watchServer(t, f)
	_, revoked := openWatch(t, srv, "/api/v1/watch", readOnlyToken)
	_, other := openWatch(t, srv, "/api/v1/watch", kept)
	revoked.next(t)
	other.next(t)

	if err := os.WriteFile(file, []byte(kept+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-revoked.done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("revoked stream ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked token's stream is still open")
	}
	f.putGroup("web", 4)
	if ev := other.next(t); ev.event != rest.EventGroup {
		t.Fatalf("the other stream: %+v", ev)
	}
}
