package simcluster

import (
	"context"
	"sync"
)

// watcher buffers events for one Watch call. The queue is unbounded so that a
// slow consumer never makes the cluster block or drop events; it only grows
// while the consumer lags.
type watcher struct {
	mu      sync.Mutex
	queue   []Event
	stopped bool
	// wake has capacity 1: a pending signal means "the queue changed".
	wake chan struct{}
}

func (w *watcher) push(ev Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns all queued events and whether the watcher was stopped.
func (w *watcher) take() ([]Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q, w.stopped
}

// Watch streams node events until ctx ends or the cluster is closed, then
// closes the returned channel. The stream starts with an Added event for
// every existing node (sorted by name), followed by every later change in
// order; no event is lost however slowly the channel is read.
func (c *Cluster) Watch(ctx context.Context) <-chan Event {
	out := make(chan Event)
	w := &watcher{wake: make(chan struct{}, 1)}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		close(out)
		return out
	}
	// Snapshot and registration happen under the same lock as every
	// mutation, so the initial list and the live events neither overlap
	// nor leave a gap.
	for _, n := range c.listLocked() {
		w.queue = append(w.queue, Event{Type: Added, Node: n})
	}
	c.watchers[w] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()

	go func() {
		defer c.wg.Done()
		defer close(out)
		defer func() {
			c.mu.Lock()
			delete(c.watchers, w)
			c.mu.Unlock()
		}()
		for {
			batch, stopped := w.take()
			if stopped {
				return
			}
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				case <-c.done:
					return
				}
			}
			if len(batch) > 0 {
				continue // more may have arrived while we were sending
			}
			select {
			case <-w.wake:
			case <-ctx.Done():
				return
			case <-c.done:
				return
			}
		}
	}()
	return out
}

func (c *Cluster) broadcastLocked(ev Event) {
	for w := range c.watchers {
		// Each watcher gets its own copy so consumers cannot race on maps.
		w.push(Event{Type: ev.Type, Node: ev.Node.clone()})
	}
}
