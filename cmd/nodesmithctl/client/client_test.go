package client

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Error bodies become *APIError with the server's message and field, and
// match the sentinel of their status.
func TestAPIErrors(t *testing.T) {
	cases := []struct {
		status int
		body   string
		is     error
		msg    string
		field  string
	}{
		{400, `{"code":"invalid_argument","message":"minSize: must not be negative","details":{"field":"minSize"}}`, ErrBadRequest, "minSize: must not be negative", "minSize"},
		{400, `{"code":"invalid_argument","message":"unknown state \"X\"","details":{"parameter":"state"}}`, ErrBadRequest, `unknown state "X" (field state)`, "state"},
		{401, `{"code":"unauthenticated","message":"invalid bearer token","details":{}}`, ErrUnauthorized, "invalid bearer token", ""},
		{403, `{"code":"permission_denied","message":"this token is read-only","details":{"role":"read-only"}}`, ErrForbidden, "this token is read-only", ""},
		{404, `{"code":"not_found","message":"node group \"x\" not found","details":{}}`, ErrNotFound, `node group "x" not found`, ""},
		{409, `{"code":"already_exists","message":"exists","details":{}}`, ErrConflict, "exists", ""},
		{412, `{"code":"aborted","message":"at revision 3","details":{}}`, ErrConflict, "at revision 3", ""},
		{503, `{"code":"unavailable","message":"not synced","details":{}}`, ErrUnavailable, "not synced", ""},
		{502, `<html>bad gateway</html>`, ErrUnavailable, "<html>bad gateway</html>", ""},
		{500, ``, nil, "500 Internal Server Error", ""},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok" {
				t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
			}
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		c, err := New(Config{Server: srv.URL, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListGroups(context.Background())
		srv.Close()
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != tc.status {
			t.Errorf("%d: err %v, want an APIError", tc.status, err)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%d: %v does not match %v", tc.status, err, tc.is)
		}
		if err.Error() != tc.msg || ae.Field != tc.field {
			t.Errorf("%d: message %q field %q, want %q %q", tc.status, err.Error(), ae.Field, tc.msg, tc.field)
		}
		if tc.status == 412 && !PreconditionFailed(err) {
			t.Errorf("412 is not PreconditionFailed")
		}
	}
}

// Pages are followed until the server gives no continue token.
func TestListInstancesFollowsPages(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("group") != "web" || r.URL.Query().Get("state") != "PENDING,RUNNING" {
			t.Errorf("query %s", r.URL.RawQuery)
		}
		switch r.URL.Query().Get("continue") {
		case "":
			_, _ = w.Write([]byte(`{"items":[{"id":"a"},{"id":"b"}],"continue":"Yg"}`))
		case "Yg":
			_, _ = w.Write([]byte(`{"items":[{"id":"c"}]}`))
		default:
			t.Errorf("continue %q", r.URL.Query().Get("continue"))
		}
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL, Token: "t"})
	got, err := c.ListInstances(context.Background(), InstanceQuery{Group: "web", States: []string{"PENDING", "RUNNING"}})
	if err != nil || len(got) != 3 || got[2].ID != "c" {
		t.Fatalf("ListInstances = %v, %v", got, err)
	}
}

// The CA bundle verifies a TLS server; without it the server is not
// trusted.
func TestCABundle(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"items":[]}`))
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv.URL, Token: "t", CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListGroups(context.Background()); err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}
	c, _ = New(Config{Server: srv.URL, Token: "t"})
	if _, err := c.ListGroups(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA bundle: %v, want a certificate error", err)
	}
	if _, err := New(Config{Server: srv.URL, CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Fatal("a missing CA bundle was accepted")
	}
}

func TestNewAndTokenFile(t *testing.T) {
	for _, s := range []string{"", "gateway:8443", "ftp://x", "http://"} {
		if _, err := New(Config{Server: s}); err == nil {
			t.Errorf("server %q accepted", s)
		}
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"ok": " s3cret \n", "empty": "\n", "two": "a b\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if tok, err := ReadTokenFile(filepath.Join(dir, "ok")); err != nil || tok != "s3cret" {
		t.Errorf("ok: %q %v", tok, err)
	}
	for _, name := range []string{"empty", "two", "missing"} {
		_, err := ReadTokenFile(filepath.Join(dir, name))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "a b") {
			t.Errorf("%s: the error shows the file's content: %v", name, err)
		}
	}
}

// Put sends the preconditions and reports creation.
func TestPutPreconditions(t *testing.T) {
	var gotMatch, gotNone, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMatch, gotNone = r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
		b := make([]byte, 100)
		n, _ := r.Body.Read(b)
		gotBody = string(b[:n])
		if r.URL.Path != "/api/v1/templates/small" || r.Method != http.MethodPut || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		w.Header().Set("ETag", `"7"`)
		if gotMatch == "" {
			w.WriteHeader(http.StatusCreated)
		}
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL + "/", Token: "t"})
	res, err := c.Put(context.Background(), KindInstanceTemplate, "small", []byte(`{"account":"a"}`), Precondition{IfNoneMatch: true})
	if err != nil || !res.Created || res.ETag != `"7"` || gotNone != "*" || gotMatch != "" || gotBody != `{"account":"a"}` {
		t.Fatalf("create: %+v %v (If-Match %q If-None-Match %q body %q)", res, err, gotMatch, gotNone, gotBody)
	}
	res, err = c.Put(context.Background(), KindInstanceTemplate, "small", []byte(`{}`), Precondition{IfMatch: ETag("6")})
	if err != nil || res.Created || gotMatch != `"6"` || gotNone != "" {
		t.Fatalf("replace: %+v %v (If-Match %q)", res, err, gotMatch)
	}
}

// The gateway's deprecation warnings reach the caller of Put.
func TestPutReturnsWarnings(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Warning", `299 - "autoscalingOptions.scaleDownUnneeded: is deprecated: use scaleDownUnneededTime"`)
		w.Header().Add("Warning", `299 - "hooks: \"quoted\""`)
		w.Header().Set("ETag", `"3"`)
	}))
	defer srv.Close()
	c, _ := New(Config{Server: srv.URL + "/", Token: "t"})
	res, err := c.Put(context.Background(), KindNodeGroup, "web", []byte(`{}`), Precondition{IfMatch: ETag("2")})
	if err != nil || len(res.Warnings) != 2 || res.Warnings[0] != "autoscalingOptions.scaleDownUnneeded: is deprecated: use scaleDownUnneededTime" || res.Warnings[1] != `hooks: "quoted"` {
		t.Fatalf("%+v %v", res, err)
	}
}
