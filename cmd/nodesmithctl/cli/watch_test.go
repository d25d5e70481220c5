package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

type sse struct {
	w  http.ResponseWriter
	id int
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w}
}

func (s *sse) send(event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	s.id++
	fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", s.id, event, b)
	s.w.(http.Flusher).Flush()
}

func (s *sse) comment(c string) {
	fmt.Fprintf(s.w, ": %s\n", c)
	s.w.(http.Flusher).Flush()
}

func group(id string, target int32, counts map[string]int) restapi.Group {
	return restapi.Group{ID: id, MinSize: 0, MaxSize: 10, TargetSize: target, Instances: counts}
}

func transition(inst, from, to, reason string) restapi.TransitionEntry {
	return restapi.TransitionEntry{Instance: inst, Group: "web", Transition: restapi.Transition{From: from, To: to, Reason: reason, At: "2026-01-01T00:00:00Z"}}
}

// watch --until-stable prints a progress line per group change and each
// transition, and exits 0 once the group has its target Running and
// nothing in flight; other groups' events are not shown with --group.
func TestWatchUntilStable(t *testing.T) {
	f := newFakeGateway(t)
	var gotGroup atomic.Value
	f.watch = func(w http.ResponseWriter, r *http.Request) {
		gotGroup.Store(r.URL.Query().Get("group"))
		if r.Header.Get("Accept") != "text/event-stream" {
			http.Error(w, "want an event stream", http.StatusNotAcceptable)
			return
		}
		s := newSSE(w)
		s.send("snapshot", map[string]any{"groups": []restapi.Group{
			group("web", 3, map[string]int{"RUNNING": 1, "PENDING": 2}),
			group("other", 1, map[string]int{"PENDING": 1}),
		}})
		s.comment("keepalive")
		s.send("transition", transition("web-2", "PENDING", "CREATING", "dispatched in batch b1"))
		s.send("group", group("web", 3, map[string]int{"RUNNING": 1, "PENDING": 1, "CREATING": 1}))
		s.send("group", group("web", 3, map[string]int{"RUNNING": 1, "PENDING": 1, "CREATING": 1})) // unchanged: not printed again
		s.send("transition", restapi.TransitionEntry{Instance: "other-1", Group: "other", Transition: restapi.Transition{From: "PENDING", To: "CREATING"}})
		s.send("transition", transition("web-2", "JOINED", "RUNNING", "after_created hook succeeded"))
		s.send("group", group("web", 3, map[string]int{"RUNNING": 2, "CREATING": 1}))
		s.send("transition", transition("web-3", "JOINED", "RUNNING", "after_created hook succeeded"))
		s.send("group", group("web", 3, map[string]int{"RUNNING": 3}))
		<-r.Context().Done() // the client leaves once stable
	}
	code, out, errOut := f.ctl(t, readerToken, "", "watch", "--group", "web", "--until-stable", "--timeout", "1m")
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s%s", code, out, errOut)
	}
	if g, _ := gotGroup.Load().(string); g != "web" {
		t.Errorf("watch asked for group %q, want web", g)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"group/web [######++++++++++++++] 1/3 running, 2 provisioning | pending 2 creating 0 created 0 joined 0 | deleting 0",
		"instance/web-2 (web): PENDING -> CREATING: dispatched in batch b1",
		"group/web [######++++++++++++++] 1/3 running, 2 provisioning | pending 1 creating 1 created 0 joined 0 | deleting 0",
		"instance/web-2 (web): JOINED -> RUNNING: after_created hook succeeded",
		"group/web [#############+++++++] 2/3 running, 1 provisioning | pending 0 creating 1 created 0 joined 0 | deleting 0",
		"instance/web-3 (web): JOINED -> RUNNING: after_created hook succeeded",
		"group/web [####################] 3/3 running | pending 0 creating 0 created 0 joined 0 | deleting 0",
		"stable: web 3/3 running",
	}
	if len(lines) != len(want) {
		t.Fatalf("watch output has %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, l := range lines {
		// Transition lines start with the local time of the transition.
		if !strings.HasSuffix(l, want[i]) {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, l, want[i])
		}
	}
	if strings.Contains(out, "other") {
		t.Errorf("--group web shows another group:\n%s", out)
	}
}

// Without reaching stability, --timeout exits 6 naming what is pending.
func TestWatchTimeout(t *testing.T) {
	f := newFakeGateway(t)
	f.watch = func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w)
		s.send("snapshot", map[string]any{"groups": []restapi.Group{group("web", 3, map[string]int{"RUNNING": 1, "CREATING": 2})}})
		<-r.Context().Done()
	}
	code, out, errOut := f.ctl(t, readerToken, "", "watch", "--until-stable", "--timeout", "1500ms")
	if code != cli.ExitTimeout || !strings.Contains(errOut, "web (1/3 running, 2 provisioning, 0 deleting)") {
		t.Fatalf("watch timeout: exit %d\n%s%s", code, out, errOut)
	}
	// Without --until-stable the timeout just ends the watch.
	if code, _, errOut := f.ctl(t, readerToken, "", "watch", "--timeout", "300ms"); code != 0 {
		t.Fatalf("plain watch with --timeout: exit %d %s", code, errOut)
	}
}

// A dropped stream is resumed: the new connection's snapshot replaces the
// state. An unknown group and a gateway without the endpoint are errors.
func TestWatchResumesAndErrors(t *testing.T) {
	f := newFakeGateway(t)
	var conns atomic.Int32
	f.watch = func(w http.ResponseWriter, r *http.Request) {
		s := newSSE(w)
		if conns.Add(1) == 1 {
			s.send("snapshot", map[string]any{"groups": []restapi.Group{group("web", 2, map[string]int{"RUNNING": 1, "CREATING": 1})}})
			return // dropped without bye
		}
		s.send("snapshot", map[string]any{"groups": []restapi.Group{group("web", 2, map[string]int{"RUNNING": 2})}})
		<-r.Context().Done()
	}
	code, out, errOut := f.ctl(t, readerToken, "", "watch", "--until-stable", "--timeout", "1m")
	if code != 0 || conns.Load() != 2 || !strings.Contains(out, "stream interrupted") || !strings.Contains(out, "stable: web 2/2 running") {
		t.Fatalf("resumed watch: exit %d after %d connections\n%s%s", code, conns.Load(), out, errOut)
	}
	if code, _, errOut := f.ctl(t, readerToken, "", "watch", "--group", "nope", "--until-stable"); code != cli.ExitNotFound || !strings.Contains(errOut, "nope") {
		t.Fatalf("unknown group: exit %d %s", code, errOut)
	}
	f.watch = nil
	if code, _, errOut := f.ctl(t, readerToken, "", "watch"); code != cli.ExitNotFound {
		t.Fatalf("no watch endpoint: exit %d %s", code, errOut)
	}
}
