// Package logtest collects log output in tests.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for the concurrent writes of loggers (and
// of a child process's stdout and stderr) and for reads while they write.
// The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
