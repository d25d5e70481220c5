package domain

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestHookValidate(t *testing.T) {
	ok := Hook{InstanceID: "ins-1", Host: "10.0.0.1", Env: map[string]string{"NODE_NAME": "n1", "_x9": "a'b\n$(c)"}}
	tests := []struct {
		name    string
		mutate  func(*Hook)
		wantErr string
	}{
		{"valid", func(*Hook) {}, ""},
		{"empty host", func(h *Hook) { h.Host = "" }, "no host"},
		{"blank host", func(h *Hook) { h.Host = "  " }, "no host"},
		{"host with space", func(h *Hook) { h.Host = "a b" }, "invalid host"},
		{"host with user", func(h *Hook) { h.Host = "root@h" }, "invalid host"},
		{"port too big", func(h *Hook) { h.Port = 70000 }, "invalid port"},
		{"negative timeout", func(h *Hook) { h.Timeout = -1 }, "negative timeout"},
		{"env name with dash", func(h *Hook) { h.Env = map[string]string{"A-B": "x"} }, "invalid environment variable name"},
		{"env name with digit first", func(h *Hook) { h.Env = map[string]string{"1A": "x"} }, "invalid environment variable name"},
		{"env name injection", func(h *Hook) { h.Env = map[string]string{"A=1; rm -rf /; B": "x"} }, "invalid environment variable name"},
		{"empty env name", func(h *Hook) { h.Env = map[string]string{"": "x"} }, "invalid environment variable name"},
		{"env value NUL", func(h *Hook) { h.Env = map[string]string{"A": "x\x00y"} }, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ok
			tt.mutate(&h)
			err := h.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	if err := (Hook{}).Validate(); !errors.Is(err, ErrEmptyHost) {
		t.Fatalf("empty hook: %v, want ErrEmptyHost", err)
	}
}

func TestFailureRetryable(t *testing.T) {
	want := map[Failure]bool{
		FailureNone:       false,
		FailureInvalid:    false,
		FailureConnection: true,
		FailureAuth:       false,
		FailureHostKey:    false,
		FailureTimeout:    true,
		FailureExit:       true,
		FailureCanceled:   true,
	}
	for f, w := range want {
		if got := f.Retryable(); got != w {
			t.Errorf("%s.Retryable() = %v, want %v", f, got, w)
		}
	}
}

func TestNewResult(t *testing.T) {
	h := Hook{InstanceID: "ins-1", Attempt: 3, Kind: KindBeforeDelete}
	ok := NewResult(h, Execution{ExitCode: 0}, "out", "r1", testTime(1), testTime(2))
	if !ok.Succeeded || ok.Retryable || ok.Error != "" || ok.Runner != "r1" || ok.Attempt != 3 || ok.Kind != KindBeforeDelete {
		t.Fatalf("success result = %+v", ok)
	}
	bad := NewResult(h, Execution{ExitCode: 2, Failure: FailureExit, Err: errors.New("script exited with status 2")}, "", "r1", testTime(1), testTime(2))
	if bad.Succeeded || !bad.Retryable || bad.ExitCode != 2 || bad.Error != "script exited with status 2" {
		t.Fatalf("exit result = %+v", bad)
	}
	hk := NewResult(h, Execution{ExitCode: NoExitCode, Failure: FailureHostKey}, "", "r1", testTime(1), testTime(2))
	if hk.Succeeded || hk.Retryable || hk.Error == "" || hk.ExitCode != -1 {
		t.Fatalf("host key result = %+v", hk)
	}
	s := SkippedResult(h, "r1", testTime(1))
	if !s.Succeeded || !s.Skipped || s.ExitCode != NoExitCode {
		t.Fatalf("skipped result = %+v", s)
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []string
		want   string
	}{
		{"empty", 4, nil, ""},
		{"under capacity", 8, []string{"ab", "cd"}, "abcd"},
		{"exactly full", 4, []string{"ab", "cd"}, "abcd"},
		{"wraps", 4, []string{"abc", "def"}, "cdef"},
		{"one big write", 4, []string{"0123456789"}, "6789"},
		{"big write after small", 4, []string{"x", "0123456789"}, "6789"},
		{"many small", 3, []string{"a", "b", "c", "d", "e"}, "cde"},
		{"wrap exactly at end", 4, []string{"ab", "cd", "ef"}, "cdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tail := NewTail(tt.size)
			var total int
			for _, w := range tt.writes {
				n, err := tail.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
				total += len(w)
			}
			if got := string(tail.Bytes()); got != tt.want {
				t.Fatalf("Bytes() = %q, want %q", got, tt.want)
			}
			if tail.Total() != int64(total) {
				t.Fatalf("Total() = %d, want %d", tail.Total(), total)
			}
		})
	}
}

// TestTailMatchesSuffix writes a long stream in uneven chunks and checks the
// tail is exactly the stream's suffix.
func TestTailMatchesSuffix(t *testing.T) {
	var all bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	tail := NewTail(1000)
	data := all.Bytes()
	for i, step := 0, 1; i < len(data); step = step%997 + 13 {
		end := min(i+step, len(data))
		_, _ = tail.Write(data[i:end])
		i = end
	}
	if got, want := string(tail.Bytes()), string(data[len(data)-1000:]); got != want {
		t.Fatalf("tail differs from the stream's suffix:\n got %q\nwant %q", got[:50], want[:50])
	}
}

func TestTailStringIsValidUTF8(t *testing.T) {
	tail := NewTail(5)
	_, _ = tail.Write([]byte("aé€😀")) // cut lands inside the emoji or euro sign
	s := tail.String()
	if !utf8.ValidString(s) || len(s) > 5 {
		t.Fatalf("String() = %q (len %d), want valid UTF-8 of at most 5 bytes", s, len(s))
	}
	if !strings.HasSuffix(s, "😀") {
		t.Fatalf("String() = %q lost the last character", s)
	}
	bin := NewTail(8)
	_, _ = bin.Write([]byte{0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa, 0xf9, 0xf8})
	s = bin.String()
	if !utf8.ValidString(s) || len(s) > 8 {
		t.Fatalf("binary String() = %q (len %d)", s, len(s))
	}
}

func TestLineWriter(t *testing.T) {
	type line struct {
		text    string
		dropped int
	}
	tests := []struct {
		name   string
		max    int
		writes []string
		want   []line
	}{
		{"simple", 100, []string{"a\nb\n"}, []line{{"a", 0}, {"b", 0}}},
		{"split across writes", 100, []string{"he", "llo\nwor", "ld\n"}, []line{{"hello", 0}, {"world", 0}}},
		{"crlf", 100, []string{"dos\r\n"}, []line{{"dos", 0}}},
		{"no final newline", 100, []string{"a\npartial"}, []line{{"a", 0}, {"partial", 0}}},
		{"long line cut", 4, []string{"abcdefgh\nxy\n"}, []line{{"abcd", 4}, {"xy", 0}}},
		{"long line cut across writes", 4, []string{"abc", "defg", "h\n"}, []line{{"abcd", 4}}},
		{"empty lines", 10, []string{"\n\n"}, []line{{"", 0}, {"", 0}}},
		{"invalid utf8", 10, []string{"a\xffb\n"}, []line{{"a\uFFFDb", 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []line
			lw := &LineWriter{Max: tt.max, Emit: func(s string, d int) { got = append(got, line{s, d}) }}
			for _, w := range tt.writes {
				_, _ = lw.Write([]byte(w))
			}
			lw.Flush()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("lines = %v, want %v", got, tt.want)
			}
		})
	}
}
func testTime(sec int64) time.Time { return time.Unix(1700000000+sec, 0).UTC() }
