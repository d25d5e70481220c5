package cvmemu

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// Hold is an http.Handler in front of an Emulator that can hold a call's
// answer after the emulator handled it: the cloud did the work (a
// RunInstances created its VMs), the client still waits for the answer.
// Tests and fault harnesses kill the client at that moment, the worst one
// for a crash, and check that the work is neither lost nor done twice.
//
// Serve it on its own listener (e.g. httptest.NewServer(NewHold(srv)))
// and give only the client under test its address: every other client
// keeps using the emulator's own endpoint, unheld. The Emulator's
// signature checks do not depend on the address a request came through.
type Hold struct {
	next http.Handler

	mu    sync.Mutex
	armed []*HeldCall
	all   []*HeldCall
}

// NewHold returns a Hold serving next: an *Emulator (CVM), a *Server, or
// an Emulator's ECS handler.
func NewHold(next http.Handler) *Hold { return &Hold{next: next} }

// HeldCall is one call a Hold was asked to hold.
type HeldCall struct {
	action   string
	held     chan struct{}
	gone     chan struct{}
	released chan struct{}
	release  sync.Once

	// clientToken is set before held is closed.
	clientToken string
}

// Next arms the hold for the next call of action that comes through h
// (calls already held or armed are not affected).
func (h *Hold) Next(action string) *HeldCall {
	c := &HeldCall{action: action, held: make(chan struct{}), gone: make(chan struct{}), released: make(chan struct{})}
	h.mu.Lock()
	h.armed = append(h.armed, c)
	h.all = append(h.all, c)
	h.mu.Unlock()
	return c
}

// Held is closed once the call was handled by the emulator and its
// answer is being held.
func (c *HeldCall) Held() <-chan struct{} { return c.held }

// ClientGone is closed when the client went away (its connection closed)
// while the answer was held: the answer was never delivered.
func (c *HeldCall) ClientGone() <-chan struct{} { return c.gone }

// ClientToken is the call's ClientToken parameter (valid once Held).
func (c *HeldCall) ClientToken() string { return c.clientToken }

// Release lets the held answer go to the client (if it is still there).
// It may be called more than once; called before the call arrives, it
// lets the call pass unheld.
func (c *HeldCall) Release() { c.release.Do(func() { close(c.released) }) }

// ReleaseAll releases every call h was ever asked to hold, e.g. in a
// test's cleanup before its server closes.
func (h *Hold) ReleaseAll() {
	h.mu.Lock()
	all := append([]*HeldCall(nil), h.all...)
	h.mu.Unlock()
	for _, c := range all {
		c.Release()
	}
}

// ServeHTTP passes the request to the emulator; an armed call's answer is
// recorded, then written only once released.
func (h *Hold) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	action := r.Header.Get("X-TC-Action")
	if action == "" {
		action = ecsAction(r)
	}
	c := h.take(action)
	if c == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var params struct{ ClientToken string }
	_ = json.Unmarshal(body, &params) // the emulator answers a bad body itself
	c.clientToken = params.ClientToken
	if t := r.URL.Query().Get("ClientToken"); t != "" { // ECS
		c.clientToken = t
	}

	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	h.next.ServeHTTP(rec, r)
	close(c.held)
	select {
	case <-c.released:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	case <-r.Context().Done():
		// The server cancels a request's context when its connection
		// closes: the client died or gave up waiting.
		close(c.gone)
	}
}

// take returns the first call armed for action, disarming it.
func (h *Hold) take(action string) *HeldCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range h.armed {
		if c.action == action {
			h.armed = append(h.armed[:i:i], h.armed[i+1:]...)
			return c
		}
	}
	return nil
}

// recorder keeps a response for later.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(status int)      { r.status = status }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
