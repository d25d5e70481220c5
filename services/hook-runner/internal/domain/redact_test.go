package domain

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

const token = "abcdef.0123456789abcdef"

func redactAll(t *testing.T, secrets []string, chunks ...string) string {
	t.Helper()
	var out bytes.Buffer
	r := NewRedactor(&out, Secrets(secrets))
	for _, c := range chunks {
		if n, err := r.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestSecretsSkipsShortValuesAndSplitsLines(t *testing.T) {
	got := Secrets([]string{"1", "true", "eu-1", "12345", token, "-----BEGIN KEY-----\r\nMIIEvQIBADANBg\n-----END KEY-----\n", token, "   "})
	want := []string{token, "-----BEGIN KEY-----", "-----END KEY-----", "MIIEvQIBADANBg"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Secrets = %q, want %q (longest first, short values and duplicates dropped)", got, want)
	}
	if MinRedactedLen != 6 {
		t.Errorf("MinRedactedLen = %d: update the README (hook-runner) with the new minimum", MinRedactedLen)
	}
}

func TestRedactorReplacesSecrets(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"no secrets", nil, "join " + token + "\n", "join " + token + "\n"},
		{"bash -x line", []string{token}, "+ kubeadm join 10.0.0.1:6443 --token " + token + "\n", "+ kubeadm join 10.0.0.1:6443 --token [redacted]\n"},
		{"twice on a line", []string{token}, token + token + " " + token, "[redacted][redacted] [redacted]"},
		{"short value left alone", []string{"eu", token}, "region eu, token " + token, "region eu, token [redacted]"},
		{"two secrets", []string{"hunter22", token}, "pw=hunter22 tok=" + token, "pw=[redacted] tok=[redacted]"},
		{"secret containing another", []string{"secret-1", "my-secret-12"}, "x my-secret-12 y secret-1", "x [redacted] y [redacted]"},
		{"multi-line secret", []string{"line-one-xx\nline-two-yy"}, "a\nline-one-xx\nline-two-yy\nb", "a\n[redacted]\n[redacted]\nb"},
		{"prefix only at the end", []string{token}, "partial abcdef.0123", "partial abcdef.0123"},
		{"empty", []string{token}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactAll(t, tc.secrets, tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Output is streamed in chunks of any size: a secret cut between chunks,
// at every possible point and in chunks down to one byte, is still
// replaced, and nothing else is changed or lost.
func TestRedactorCatchesASecretSplitAcrossChunks(t *testing.T) {
	in := "start\n+ kubeadm join --token " + token + " --discovery abcdef.01 x\nabcabcdef.0123456789abcdef\n" + token
	want := "start\n+ kubeadm join --token [redacted] --discovery abcdef.01 x\nabc[redacted]\n[redacted]"
	for cut := range len(in) + 1 {
		if got := redactAll(t, []string{token}, in[:cut], in[cut:]); got != want {
			t.Fatalf("cut at %d: got %q, want %q", cut, got, want)
		}
	}
	var bytewise []string
	for i := range len(in) {
		bytewise = append(bytewise, in[i:i+1])
	}
	if got := redactAll(t, []string{token}, bytewise...); got != want {
		t.Fatalf("byte by byte: got %q, want %q", got, want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var chunks []string
		rest := in
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(12))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		if got := redactAll(t, []string{token, "0123456789a", "kubeadm join"}, chunks...); strings.Contains(got, "0123456789a") || strings.Contains(got, "kubeadm join") {
			t.Fatalf("chunks %q: a secret got through: %q", chunks, got)
		}
	}
}

// The Redactor holds back only what could still become a secret, so a
// line is passed on (and logged) as soon as it is complete.
func TestRedactorPassesOnWhatCannotBeASecret(t *testing.T) {
	var out bytes.Buffer
	r := NewRedactor(&out, Secrets([]string{token}))
	_, _ = r.Write([]byte("hello world\nnext abc"))
	if got := out.String(); got != "hello world\nnext " {
		t.Errorf("passed on %q, want everything but the possible start of the token", got)
	}
	_, _ = r.Write([]byte("xyz\n"))
	if got := out.String(); got != "hello world\nnext abcxyz\n" {
		t.Errorf("passed on %q once the prefix turned out not to be the token", got)
	}
}

// Redacting before the Tail keeps a secret out of it even when the ring
// cuts the output in the middle of where the secret was.
func TestRedactedTailNeverHoldsPartOfASecret(t *testing.T) {
	tail := NewTail(32)
	r := NewRedactor(tail, Secrets([]string{token}))
	for range 100 {
		_, _ = r.Write([]byte("x " + token[:7]))
		_, _ = r.Write([]byte(token[7:] + "\n"))
	}
	_ = r.Flush()
	got := tail.String()
	for i := MinRedactedLen; i <= len(token); i++ {
		for j := 0; j+i <= len(token); j++ {
			if strings.Contains(got, token[j:j+i]) {
				t.Fatalf("tail %q holds %q of the token", got, token[j:j+i])
			}
		}
	}
}
