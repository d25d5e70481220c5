package domain

import (
	"bytes"
	"strings"
	"sync"
	"unicode/utf8"
)

// OutputTailSize is how much of a run's combined output a result carries:
// enough for the error at the end of a failed kubeadm join, small enough for
// a NATS message.
const OutputTailSize = 64 << 10

// Tail keeps the last n bytes written to it (a ring buffer), so a script
// that prints gigabytes costs n bytes of memory. It is safe for concurrent
// use: stdout and stderr are written from different goroutines.
type Tail struct {
	mu    sync.Mutex
	buf   []byte
	next  int // where the next byte goes
	full  bool
	total int64
}

// NewTail returns a Tail keeping the last n bytes (n > 0).
func NewTail(n int) *Tail { return &Tail{buf: make([]byte, max(n, 1))} }

// Write appends p, forgetting the oldest bytes beyond the capacity. It never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += int64(n)
	size := len(t.buf)
	if n >= size {
		copy(t.buf, p[n-size:])
		t.next, t.full = 0, true
		return n, nil
	}
	c := copy(t.buf[t.next:], p)
	copy(t.buf, p[c:]) // wrap around, if anything is left
	if t.next+n >= size {
		t.full = true
	}
	t.next = (t.next + n) % size
	return n, nil
}

// Bytes returns a copy of the kept bytes, oldest first.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]byte(nil), t.buf[:t.next]...)
	}
	out := make([]byte, 0, len(t.buf))
	out = append(out, t.buf[t.next:]...)
	return append(out, t.buf[:t.next]...)
}

// Total is the number of bytes ever written.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// String returns the kept bytes as valid UTF-8 of at most the capacity:
// protobuf strings must be UTF-8, and the ring may have cut a character in
// half. Invalid sequences become U+FFFD.
func (t *Tail) String() string {
	return ValidUTF8Tail(t.Bytes(), len(t.buf))
}

// ValidUTF8Tail returns the end of b as valid UTF-8 no longer than limit bytes.
func ValidUTF8Tail(b []byte, limit int) string {
	// Drop continuation bytes of a character cut at the start.
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	s := string(b)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	// Replacement characters can make binary output longer than it was.
	for len(s) > limit {
		s = s[len(s)-limit:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return s
}

// LineWriter splits a byte stream into lines and hands each complete line
// to Emit, without its line ending. A line longer than Max bytes is cut:
// Emit gets the first Max bytes and how many bytes were dropped, so one
// runaway line cannot exhaust memory or flood a log record. It is not safe
// for concurrent use; give every stream its own.
type LineWriter struct {
	Max  int
	Emit func(line string, dropped int)

	buf     []byte
	dropped int
}

// Write consumes p; it never fails.
func (l *LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			break
		}
		l.add(p[:i])
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

// Flush emits a final line that had no newline.
func (l *LineWriter) Flush() {
	if len(l.buf) > 0 || l.dropped > 0 {
		l.emit()
	}
}

func (l *LineWriter) add(p []byte) {
	room := max(l.Max, 1) - len(l.buf)
	if room >= len(p) {
		l.buf = append(l.buf, p...)
		return
	}
	if room > 0 {
		l.buf = append(l.buf, p[:room]...)
		p = p[room:]
	}
	l.dropped += len(p)
}

func (l *LineWriter) emit() {
	line := strings.TrimSuffix(string(l.buf), "\r")
	if !utf8.ValidString(line) {
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	if l.Emit != nil {
		l.Emit(line, l.dropped)
	}
	l.buf, l.dropped = l.buf[:0], 0
}
