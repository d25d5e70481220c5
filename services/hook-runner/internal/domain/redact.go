package domain

import (
	"bytes"
	"io"
	"slices"
	"strings"
)

// Redacted replaces a secret in a hook's output.
const Redacted = "[redacted]"

// MinRedactedLen is the length below which a value is not redacted. A
// secret is long (a kubeadm token is 23 characters, a password should be
// more than a few); a short configuration value ("1", "true", "eu", a
// port) is not secret, and redacting it would wreck the output ("1" is in
// every number and timestamp) while hiding nothing. Six characters keep
// every plausible secret out of the output and leave short values alone.
const MinRedactedLen = 6

// Secrets returns the strings to redact for values: each value, or each
// line of a multi-line value (a PEM key is printed line by line), without
// surrounding white space, that is at least MinRedactedLen bytes long;
// longest first, so that a secret containing another is replaced whole.
func Secrets(values []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range values {
		for line := range strings.SplitSeq(v, "\n") {
			line = strings.TrimSpace(line)
			if len(line) < MinRedactedLen || seen[line] {
				continue
			}
			seen[line] = true
			out = append(out, line)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// Redactor is a Writer that replaces every occurrence of its secrets by
// Redacted before passing the stream on to W. A stream arrives in chunks
// that may cut a secret anywhere, so the Redactor holds back the end of
// what it was given while it could be the start of a secret (at most the
// longest secret's length less one byte) until the next Write shows
// whether it is, or Flush says the stream ended. It is not safe for
// concurrent use; give every stream its own.
type Redactor struct {
	w       io.Writer
	secrets [][]byte
	pending []byte
}

// NewRedactor returns a Redactor writing to w. secrets come from Secrets
// (longest first); with none it passes everything through at once.
func NewRedactor(w io.Writer, secrets []string) *Redactor {
	r := &Redactor{w: w}
	for _, s := range secrets {
		if s != "" {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	return r
}

// Write redacts p and passes on what cannot be the start of a secret. It
// reports p as written in full unless W fails.
func (r *Redactor) Write(p []byte) (int, error) {
	if len(r.secrets) == 0 {
		return r.w.Write(p)
	}
	r.pending = append(r.pending, p...)
	if err := r.drain(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush passes on what is held back: the stream has ended, so an
// unfinished prefix of a secret is not a secret.
func (r *Redactor) Flush() error {
	if len(r.pending) == 0 {
		return nil
	}
	return r.drain(true)
}

func (r *Redactor) drain(final bool) error {
	buf := r.pending
	var out []byte
	i := 0
	for {
		j, n := r.firstMatch(buf[i:])
		k := -1
		if !final {
			k = r.partialAt(buf[i:])
		}
		if j >= 0 && (k < 0 || j < k) {
			out = append(out, buf[i:i+j]...)
			out = append(out, Redacted...)
			i += j + n
			continue
		}
		end := len(buf)
		if k >= 0 {
			end = i + k
		}
		out = append(out, buf[i:end]...)
		i = end
		break
	}
	r.pending = r.pending[:copy(r.pending, buf[i:])]
	if len(out) == 0 {
		return nil
	}
	_, err := r.w.Write(out)
	return err
}

// firstMatch returns where the earliest secret in b starts and its
// length (the longest of those starting there), or -1.
func (r *Redactor) firstMatch(b []byte) (at, n int) {
	at = -1
	for _, s := range r.secrets {
		if j := bytes.Index(b, s); j >= 0 && (at < 0 || j < at) {
			at, n = j, len(s)
		}
	}
	return at, n
}

// partialAt returns where the earliest end of b that is the unfinished
// start of a secret begins, or -1.
func (r *Redactor) partialAt(b []byte) int {
	best := -1
	for _, s := range r.secrets {
		from := max(0, len(b)-len(s)+1)
		if best >= 0 && from >= best {
			continue
		}
		for k := from; k < len(b); k++ {
			j := bytes.IndexByte(b[k:], s[0])
			if j < 0 {
				break
			}
			k += j
			if best >= 0 && k >= best {
				break
			}
			if bytes.HasPrefix(s, b[k:]) {
				best = k
				break
			}
		}
	}
	return best
}
