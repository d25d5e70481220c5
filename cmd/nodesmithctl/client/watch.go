package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// The watch stream: GET /api/v1/watch[?group=G] as server-sent events,
// named restapi.Event*, with JSON data (restapi.WatchSnapshot, Group,
// TransitionEntry, WatchDeletedGroup; {} for bye).

// Event is one server-sent event.
type Event struct {
	ID   string
	Type string
	Data json.RawMessage
}

// ErrStreamEnded is returned by Watch when the server ended the stream
// (its bye event, or the connection closed).
var ErrStreamEnded = errors.New("the server ended the watch stream")

// DefaultWatchIdleTimeout is how long a watch stream may stay silent
// (three of the server's 15 s keepalives) before Watch gives up on it.
const DefaultWatchIdleTimeout = 45 * time.Second

// ErrStreamIdle is returned by Watch when the stream stayed silent for
// the idle timeout.
var ErrStreamIdle = errors.New("the watch stream went silent")

// idleReader pushes the idle timer back whenever data arrives.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

// ErrNotEventStream is returned by Watch when the server answered with
// something else than an event stream.
var ErrNotEventStream = errors.New("not an event stream")

// ErrStopWatch, returned by a Watch callback, ends Watch with a nil error.
var ErrStopWatch = errors.New("stop watching")

// maxEventBytes bounds one event (a snapshot of many groups).
const maxEventBytes = 16 << 20

// Watch streams the gateway's events (of one group when group is set) to
// fn until ctx ends (ctx's error), fn returns an error (that error, or nil
// for ErrStopWatch), or the server ends the stream (ErrStreamEnded after
// fn saw a bye event).
func (c *Client) Watch(ctx context.Context, group string, fn func(Event) error) error {
	path := "/watch"
	if group != "" {
		path += "?group=" + url.QueryEscape(group)
	}
	// The server writes at least a keepalive every 15 s: a stream silent
	// for WatchIdleTimeout is dead (a lost peer, a cut network) and ends.
	streamCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := c.WatchIdleTimeout
	if idle <= 0 {
		idle = DefaultWatchIdleTimeout
	}
	timer := time.AfterFunc(idle, func() { cancel(fmt.Errorf("%w: nothing received for %s", ErrStreamIdle, idle)) })
	defer timer.Stop()
	req, err := c.newRequest(streamCtx, request{method: http.MethodGet, path: path, header: map[string]string{"Accept": "text/event-stream"}})
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return apiError(resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("GET %s: the server answered %q: %w (is the gateway older than the watch endpoint?)", req.URL.Path, ct, ErrNotEventStream)
	}
	err = readEvents(idleReader{r: resp.Body, timer: timer, d: idle}, fn)
	switch {
	case errors.Is(err, ErrStopWatch):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case context.Cause(streamCtx) != nil && !errors.Is(context.Cause(streamCtx), context.Canceled):
		return context.Cause(streamCtx)
	}
	return err
}

// readEvents parses server-sent events from r
// (https://html.spec.whatwg.org/multipage/server-sent-events.html).
func readEvents(r io.Reader, fn func(Event) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var ev Event
	var data strings.Builder
	hasData := false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return ErrStreamEnded
			}
			return fmt.Errorf("reading the watch stream: %w", err)
		}
		if line == "" { // dispatch
			if hasData {
				if ev.Type == "" {
					ev.Type = "message"
				}
				ev.Data = json.RawMessage(data.String())
				if err := fn(ev); err != nil {
					return err
				}
				if ev.Type == restapi.EventBye {
					return ErrStreamEnded
				}
			}
			ev, hasData = Event{ID: ev.ID}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // comment (keepalive)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Type = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > maxEventBytes {
				return fmt.Errorf("watch stream: an event exceeds %d bytes", maxEventBytes)
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				ev.ID = value
			}
		}
	}
}

// readLine reads one line ending in \n or \r\n (a lone \r, which the
// gateway never sends, is not a line end here), at most maxEventBytes long.
func readLine(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if sb.Len() > 0 && errors.Is(err, io.EOF) {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		sb.Write(chunk)
		if sb.Len() > maxEventBytes {
			return "", fmt.Errorf("a line exceeds %d bytes", maxEventBytes)
		}
		if !isPrefix {
			return sb.String(), nil
		}
	}
}
