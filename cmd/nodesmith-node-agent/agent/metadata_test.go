package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
)

func TestParseTerminationTime(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		in   string
		want time.Time // zero: invalid
	}{
		{"2020-08-17T08:05:49Z", utc("2020-08-17T08:05:49Z")},
		{"2020-08-17T08:05:49Z\n", utc("2020-08-17T08:05:49Z")},
		{"  2020-08-17T16:05:49+08:00  ", utc("2020-08-17T08:05:49Z")},
		{"2020-08-17T08:05:49.5Z", utc("2020-08-17T08:05:49.5Z")},
		// Tencent's documented form: no zone, the OS time in UTC+8.
		{"2018-08-18 12:05:33", utc("2018-08-18T04:05:33Z")},
		{"", time.Time{}},
		{"2020-08-17T08:05:49", time.Time{}}, // no zone: which one?
		{"2020-08-17", time.Time{}},
		{"1597651549", time.Time{}},
		{"<html>error</html>", time.Time{}},
		{"2020-13-17T08:05:49Z", time.Time{}},
		{"2020-08-17T08:05:49Z trailing", time.Time{}},
	} {
		got, err := agent.ParseTerminationTime(tc.in)
		if tc.want.IsZero() {
			if !errors.Is(err, agent.ErrInvalidAnswer) {
				t.Errorf("%q: want ErrInvalidAnswer, got %v, %v", tc.in, got, err)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("%q: got %v, %v; want %v (UTC)", tc.in, got, err, tc.want)
		}
	}
}

func TestMetadataPoll(t *testing.T) {
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		notice  bool
		invalid bool
	}{
		{"404 is no notice", answer(http.StatusNotFound, "not found"), false, false},
		{"a time is a notice", answer(http.StatusOK, "2030-01-02T03:04:05Z"), true, false},
		{"5xx is invalid", answer(http.StatusInternalServerError, "2030-01-02T03:04:05Z"), false, true},
		{"garbage is invalid", answer(http.StatusOK, "soon"), false, true},
		{"a long body is invalid", answer(http.StatusOK, strings.Repeat("2", 4096)), false, true},
		{"a redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			md := agent.NewMetadata(srv.URL, time.Second)
			defer md.Close()
			n, err := md.Poll(t.Context())
			switch {
			case tc.invalid && !errors.Is(err, agent.ErrInvalidAnswer):
				t.Fatalf("want ErrInvalidAnswer, got %v, %v", n, err)
			case !tc.invalid && err != nil:
				t.Fatal(err)
			case tc.notice != (n != nil):
				t.Fatalf("notice = %v, want one: %v", n, tc.notice)
			}
		})
	}

	t.Run("a hung service times out, not invalid", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		md := agent.NewMetadata(srv.URL, 50*time.Millisecond)
		defer md.Close()
		n, err := md.Poll(context.Background())
		if err == nil || errors.Is(err, agent.ErrInvalidAnswer) || n != nil {
			t.Fatalf("want a transport error, got %v, %v", n, err)
		}
	})
}

func TestConfig(t *testing.T) {
	ok := agent.DefaultConfig()
	ok.NodeName = "n1"
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	url, src, _ := ok.Source()
	if src != "tencent" || !strings.Contains(url, "metadata.tencentyun.com") {
		t.Errorf("default source %s %s", src, url)
	}
	ali := ok
	ali.Provider = "Alibaba"
	if url, src, err := ali.Source(); err != nil || src != "alibaba" || !strings.Contains(url, "100.100.100.200") {
		t.Errorf("alibaba: %s %s %v", src, url, err)
	}
	custom := ok
	custom.Provider = "nonsense" // ignored with a URL
	custom.MetadataURL = "http://127.0.0.1:9/vm/ins-1/termination-time"
	if url, src, err := custom.Source(); err != nil || src != "url" || url != custom.MetadataURL {
		t.Errorf("url: %s %s %v", src, url, err)
	}
	for flag, mutate := range map[string]func(*agent.Config){
		"--provider":        func(c *agent.Config) { c.Provider = "aws" },
		"--metadata-url":    func(c *agent.Config) { c.MetadataURL = "metadata/termination-time" },
		"--node-name":       func(c *agent.Config) { c.NodeName = " " },
		"--interval":        func(c *agent.Config) { c.Interval = 0 },
		"--request-timeout": func(c *agent.Config) { c.RequestTimeout = -time.Second },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: want an error naming it, got %v", flag, err)
		}
	}
}
