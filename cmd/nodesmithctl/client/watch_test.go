package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

func collect(t *testing.T, stream string) ([]Event, error) {
	t.Helper()
	var evs []Event
	err := readEvents(strings.NewReader(stream), func(e Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// The parser follows the SSE rules the gateway uses: comments, ids,
// multi-line data, CRLF, events without data are not dispatched.
func TestReadEvents(t *testing.T) {
	stream := ": keepalive\n" +
		"id: 1\nevent: snapshot\ndata: {\"groups\":[]}\n\n" +
		"id: 2\r\nevent: transition\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" +
		"event: nodata\n\n" +
		"data:{\"plain\":true}\n\n" +
		"id: 4\nevent: bye\ndata: {}\n\n" +
		"event: after-bye\ndata: {}\n\n"
	evs, err := collect(t, stream)
	if !errors.Is(err, ErrStreamEnded) {
		t.Fatalf("err %v, want ErrStreamEnded", err)
	}
	want := []Event{
		{ID: "1", Type: "snapshot", Data: []byte(`{"groups":[]}`)},
		{ID: "2", Type: "transition", Data: []byte("{\"a\":\n1}")},
		{ID: "2", Type: "message", Data: []byte(`{"plain":true}`)},
		{ID: "4", Type: "bye", Data: []byte(`{}`)},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i := range want {
		if evs[i].ID != want[i].ID || evs[i].Type != want[i].Type || string(evs[i].Data) != string(want[i].Data) {
			t.Errorf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
	// A stream cut in the middle of an event: that event is not dispatched.
	evs, err = collect(t, "event: group\ndata: {\"id\":\"web\"}\n")
	if len(evs) != 0 || err == nil {
		t.Fatalf("truncated stream: %v %v", evs, err)
	}
}

// Watch asks for an event stream with the token, ends on the callback's
// ErrStopWatch with nil, and refuses answers that are not event streams.
func TestWatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("group") == "old" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
			return
		}
		if r.Header.Get("Accept") != "text/event-stream" || r.Header.Get("Authorization") != "Bearer t" || r.URL.Query().Get("group") != "web" {
			t.Errorf("request %v %s", r.Header, r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: snapshot\ndata: {\"groups\":[{\"id\":\"web\"}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL, Token: "t"})
	var got []string
	err := c.Watch(context.Background(), "web", func(e Event) error {
		got = append(got, e.Type)
		return ErrStopWatch
	})
	if err != nil || len(got) != 1 || got[0] != restapi.EventSnapshot {
		t.Fatalf("Watch = %v, events %v", err, got)
	}
	// A JSON answer (a gateway without the endpoint behind a catch-all).
	err = c.Watch(context.Background(), "old", func(Event) error { return nil })
	if !errors.Is(err, ErrNotEventStream) {
		t.Fatalf("JSON answer: %v, want ErrNotEventStream", err)
	}
}

// A stream that goes silent (no event, no keepalive) ends with
// ErrStreamIdle; one that keeps talking does not.
func TestWatchIdleTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("event: snapshot\ndata: {\"groups\":[]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then silence
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL, Token: "t"})
	c.WatchIdleTimeout = 200 * time.Millisecond
	events := 0
	err := c.Watch(context.Background(), "", func(Event) error { events++; return nil })
	if !errors.Is(err, ErrStreamIdle) || events != 1 {
		t.Fatalf("silent stream: %v after %d events, want ErrStreamIdle after 1", err, events)
	}
}
