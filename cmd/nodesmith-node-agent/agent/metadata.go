package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Notice is a scheduled spot reclaim.
type Notice struct {
	// TerminationTime is when the cloud reclaims the VM.
	TerminationTime time.Time
}

// ErrInvalidAnswer marks a metadata answer that is neither "no notice"
// nor a time the agent can trust (a 5xx, a redirect, a body that is not
// a time): it is logged and ignored, never acted on.
var ErrInvalidAnswer = errors.New("invalid metadata answer")

// maxBody bounds what the agent reads of an answer: a time is 20-30 bytes.
const maxBody = 512

// Metadata polls one termination-time URL of an instance metadata
// service.
type Metadata struct {
	url    string
	client *http.Client
}

// NewMetadata returns a poller of url whose requests each give up after
// timeout. It never uses an HTTP proxy (the metadata service is
// link-local to the VM) and never follows redirects.
func NewMetadata(url string, timeout time.Duration) *Metadata {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        1,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: timeout,
	}
	return &Metadata{url: url, client: &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// Close releases idle connections.
func (m *Metadata) Close() { m.client.CloseIdleConnections() }

// Poll asks once. It returns (nil, nil) when no reclaim is scheduled (404),
// the notice when the answer is a time, an error wrapping
// ErrInvalidAnswer for an answer that is neither, and any other error
// when the service could not be reached.
func (m *Metadata) Poll(ctx context.Context) (*Notice, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: HTTP %d", ErrInvalidAnswer, resp.StatusCode)
	case len(body) > maxBody:
		return nil, fmt.Errorf("%w: body over %d bytes", ErrInvalidAnswer, maxBody)
	}
	t, err := ParseTerminationTime(string(body))
	if err != nil {
		return nil, err
	}
	return &Notice{TerminationTime: t}, nil
}

// tencentZone is the offset of Tencent's zone-less answer: its
// documentation says the time is the instance's OS time in UTC+8.
var tencentZone = time.FixedZone("UTC+8", 8*60*60)

// ParseTerminationTime parses a termination-time answer strictly:
// RFC 3339 with a zone (Alibaba's documented form, "2015-01-05T18:02:00Z",
// which the emulator serves too) or Tencent's documented
// "2018-08-18 12:05:33" (no zone; UTC+8 per its documentation). Leading
// and trailing white space is ignored; anything else is ErrInvalidAnswer.
func ParseTerminationTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.ParseInLocation(time.DateTime, s, tencentZone); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%w: not a time: %q", ErrInvalidAnswer, printable(s))
}

// printable shortens s for a log line and keeps it one valid line.
func printable(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return s
}
