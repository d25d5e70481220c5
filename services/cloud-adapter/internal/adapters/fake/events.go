package fake

import (
	"context"
	"slices"
	"sync"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var _ ports.Events = (*Events)(nil)

// Published is one event accepted by Events.
type Published struct {
	MsgID string
	Event domain.Event
}

// Events is an in-memory ports.Events. Like a JetStream stream with a
// duplicate window, it stores an event once per message id and silently
// accepts the copies, counting them in Duplicates.
type Events struct {
	mu         sync.Mutex
	events     []Published
	ids        map[string]bool
	next       []error
	duplicates int
}

// NewEvents returns an empty publisher.
func NewEvents() *Events { return &Events{ids: map[string]bool{}} }

// FailNext makes the next len(errs) publishes return errs (nil lets one through).
func (e *Events) FailNext(errs ...error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next = append(e.next, errs...)
}

// Publish implements ports.Events.
func (e *Events) Publish(ctx context.Context, msgID string, ev domain.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.next) > 0 {
		err := e.next[0]
		e.next = e.next[1:]
		if err != nil {
			return err
		}
	}
	if msgID != "" && e.ids[msgID] {
		e.duplicates++
		return nil
	}
	e.ids[msgID] = true
	e.events = append(e.events, Published{MsgID: msgID, Event: ev})
	return nil
}

// All returns the stored events in publish order.
func (e *Events) All() []Published {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// Duplicates counts publishes dropped as copies of a stored message id.
func (e *Events) Duplicates() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.duplicates
}

// Reset forgets everything.
func (e *Events) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events, e.ids, e.next, e.duplicates = nil, map[string]bool{}, nil, 0
}
