package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var (
	_ ports.Notifier   = (*Notifier)(nil)
	_ ports.StatusSink = (*StatusSink)(nil)
)

// Notifier records notices.
type Notifier struct {
	mu      sync.Mutex
	notices []ports.Notice
}

// Notify implements ports.Notifier.
func (n *Notifier) Notify(x ports.Notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notices = append(n.notices, x)
}

// Notices returns the recorded notices, optionally only those with reason.
func (n *Notifier) Notices(reason string) []ports.Notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []ports.Notice
	for _, x := range n.notices {
		if reason == "" || x.Reason == reason {
			out = append(out, x)
		}
	}
	return out
}

// StatusSink records written summaries; Err, when set, fails the writes.
type StatusSink struct {
	mu     sync.Mutex
	writes []ports.Status
	err    error
}

// WriteStatus implements ports.StatusSink.
func (s *StatusSink) WriteStatus(_ context.Context, st ports.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.writes = append(s.writes, st)
	return nil
}

// SetErr makes the next writes fail with err (nil: succeed).
func (s *StatusSink) SetErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Writes returns the summaries written so far.
func (s *StatusSink) Writes() []ports.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}
