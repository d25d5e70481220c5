package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/testcerts"
	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

// The watch stream as the gateway serves it (REST over TLS with HTTP/2,
// fed by the KV watch of a real JetStream): a snapshot, then a scale's new
// target and the new instances' counts as group events; at shutdown a bye
// event ends the stream.
func TestWatchServed(t *testing.T) {
	dir := t.TempDir()
	ca, _, files := serverCert(t, dir, "rest-ca", "api-gateway-rest")
	gw := startGateway(t, func(c *service.Config) {
		c.RESTInsecure = false
		c.RESTCertFile, c.RESTKeyFile = files.Cert, files.Key
	})
	tr := &http.Transport{TLSClientConfig: testcerts.ClientConfig(ca, nil, "localhost"), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+gw.addrs.REST+"/api/v1/watch?group=web", nil)
	req.Header.Set("Authorization", "Bearer "+readOnlyToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("watch: %d over %s", resp.StatusCode, resp.Proto)
	}
	type event struct{ name, data string }
	events := make(chan event, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev event
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "" && ev.name != "":
				events <- ev
				ev = event{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	next := func() event {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("no event")
		}
		return event{}
	}
	type group struct {
		ID         string         `json:"id"`
		TargetSize int32          `json:"targetSize"`
		Instances  map[string]int `json:"instances"`
	}
	ev := next()
	var snap struct{ Groups []group }
	if ev.name != "snapshot" || json.Unmarshal([]byte(ev.data), &snap) != nil || len(snap.Groups) != 1 || snap.Groups[0].TargetSize != 3 {
		t.Fatalf("first event %+v", ev)
	}

	scale, _ := http.NewRequest(http.MethodPost, "https://"+gw.addrs.REST+"/api/v1/nodegroups/web/scale", strings.NewReader(`{"targetSize":5}`))
	scale.Header.Set("Authorization", "Bearer "+adminToken)
	sresp, err := client.Do(scale)
	if err != nil || sresp.StatusCode != http.StatusOK {
		t.Fatalf("scale: %v %v", sresp, err)
	}
	_ = sresp.Body.Close()
	// The groups and instances buckets are watched separately, so the
	// new target and the new instances' counts may come in either order.
	for target, pending := int32(3), 0; target != 5 || pending != 2; {
		ev := next()
		var g group
		if ev.name != "group" || json.Unmarshal([]byte(ev.data), &g) != nil || g.ID != "web" {
			t.Fatalf("event %+v", ev)
		}
		target, pending = g.TargetSize, g.Instances["PENDING"]
	}

	gw.stop()
	if ev := next(); ev.name != "bye" || ev.data != "{}" {
		t.Fatalf("at shutdown: %+v, want bye", ev)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Error("an event after bye")
		}
	case <-ctx.Done():
		t.Fatal("the stream stayed open after bye")
	}
}
