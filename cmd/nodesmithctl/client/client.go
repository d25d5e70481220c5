// Package client is a typed client of the nodesmith API gateway's REST API
// (/api/v1). Errors carry the REST error body's code, message and field;
// HTTP statuses map to sentinel errors (ErrNotFound, ErrConflict, ...)
// usable with errors.Is.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// Sentinel errors an *APIError matches with errors.Is, by HTTP status.
var (
	ErrBadRequest   = errors.New("bad request")         // 400, 413, 415, 422
	ErrUnauthorized = errors.New("unauthorized")        // 401
	ErrForbidden    = errors.New("forbidden")           // 403
	ErrNotFound     = errors.New("not found")           // 404
	ErrConflict     = errors.New("conflict")            // 409, 412
	ErrUnavailable  = errors.New("service unavailable") // 429, 502, 503, 504
)

// APIError is an error answer of the REST API.
type APIError struct {
	Status  int            // HTTP status
	Code    string         // machine-readable code, e.g. "not_found"
	Message string         // the server's message
	Field   string         // the offending field or parameter, when the server named one
	Details map[string]any // the body's details
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Field != "" && !strings.HasPrefix(msg, e.Field) {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// Is matches the sentinel error of e's status.
func (e *APIError) Is(target error) bool {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return target == ErrBadRequest
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return target == ErrConflict
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return target == ErrUnavailable
	}
	return false
}

// PreconditionFailed reports whether err is a 412: a conditional write
// whose If-Match no longer names the current revision.
func PreconditionFailed(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusPreconditionFailed
}

// Config says how to reach a gateway.
type Config struct {
	// Server is the REST API's base URL, e.g. https://gateway:8443.
	Server string
	// Token is the bearer token (read it from a file; never put it on a
	// command line).
	Token string
	// CAFile is a PEM bundle to verify the server with (system roots when
	// empty).
	CAFile string
	// HTTPClient replaces the client built from CAFile (tests).
	HTTPClient *http.Client
	// UserAgent is sent with every request.
	UserAgent string
}

// Client talks to one gateway. It is safe for concurrent use.
type Client struct {
	// WatchIdleTimeout ends a watch stream silent for that long
	// (DefaultWatchIdleTimeout when zero). Set it before use.
	WatchIdleTimeout time.Duration

	base      *url.URL
	http      *http.Client
	token     string
	userAgent string
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.Server == "" {
		return nil, errors.New("no server: set one in the context (nodesmithctl config set-context) or pass --server")
	}
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want an http or https URL such as https://gateway:8443", cfg.Server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, http: cfg.HTTPClient, token: cfg.Token, userAgent: cfg.UserAgent}
	if c.userAgent == "" {
		c.userAgent = "nodesmithctl"
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("CA bundle: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", cfg.CAFile)
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		// No overall timeout: watch streams last; requests take their
		// deadline from the context.
		c.http = &http.Client{Transport: tr}
	}
	return c, nil
}

// ReadTokenFile reads a bearer token from path (surrounding white space
// trimmed). The token itself never appears in an error.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	if strings.ContainsAny(tok, "\r\n\t ") {
		return "", fmt.Errorf("token file %s holds more than one word", path)
	}
	return tok, nil
}

// request is one call.
type request struct {
	method string
	path   string // under /api/v1, with its query
	body   any    // JSON-encoded when not nil; json.RawMessage is sent as is
	header map[string]string
}

// response is a successful answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// maxBody bounds answers read into memory.
const maxBody = 32 << 20

func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	var body io.Reader
	if r.body != nil {
		var b []byte
		switch v := r.body.(type) {
		case json.RawMessage:
			b = v
		default:
			var err error
			if b, err = json.Marshal(v); err != nil {
				return nil, err
			}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base.String()+"/api/v1"+r.path, body)
	if err != nil {
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	return req, nil
}

func (c *Client) do(ctx context.Context, r request) (response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return response{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", r.method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading the answer: %w", r.method, req.URL.Path, err)
	}
	if resp.StatusCode >= 400 {
		return response{}, apiError(resp.StatusCode, body)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// apiError decodes an error body {"code","message","details"}.
func apiError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var eb restapi.ErrorBody
	if json.Unmarshal(body, &eb) == nil {
		e.Code, e.Message, e.Details = eb.Code, eb.Message, eb.Details
		for _, k := range []string{"field", "parameter", "header"} {
			if s, ok := eb.Details[k].(string); ok && s != "" {
				e.Field = s
				break
			}
		}
	} else if s := strings.TrimSpace(string(body)); s != "" && len(s) < 200 {
		e.Message = s // not the API's JSON (a proxy in between)
	}
	return e
}

// getJSON GETs path into out and returns the ETag.
func (c *Client) getJSON(ctx context.Context, path string, out any) (string, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path})
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(resp.body, out); err != nil {
		return "", fmt.Errorf("GET %s: decoding the answer: %w", path, err)
	}
	return resp.header.Get("ETag"), nil
}

// ETag renders a resource version as an ETag ("<rev>").
func ETag(resourceVersion string) string {
	return `"` + strings.Trim(resourceVersion, `"`) + `"`
}

// ResourceVersion is the resource version an ETag names.
func ResourceVersion(etag string) string {
	return strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
}

// DefaultTimeout bounds a single request when the caller's context has no
// deadline.
const DefaultTimeout = 60 * time.Second
