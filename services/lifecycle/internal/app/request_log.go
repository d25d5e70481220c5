package app

import (
	"container/list"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// requestLog is a bounded map of request id -> outcome with a time to live.
// An operation still running is in the log too, so a concurrent repeat waits
// for its outcome rather than running alongside it.
type requestLog struct {
	ttl time.Duration
	max int

	mu      sync.Mutex
	entries map[string]*list.Element // of *requestEntry
	order   *list.List               // oldest first
}

type requestEntry struct {
	id          string
	fingerprint string
	at          time.Time
	// done is closed when the outcome is known; revs and err are set
	// before.
	done chan struct{}
	revs Revisions
	err  error
	// kept: the outcome is final and answers repeats; otherwise the entry
	// was dropped (the operation may be tried again).
	kept bool
}

func newRequestLog(ttl time.Duration, max int) *requestLog {
	return &requestLog{ttl: ttl, max: max, entries: map[string]*list.Element{}, order: list.New()}
}

// begin returns the entry of id: an existing live one (owner false), or a
// new one the caller now owns and must finish.
func (l *requestLog) begin(id, fingerprint string, now time.Time) (e *requestEntry, owner bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(now)
	if el, ok := l.entries[id]; ok {
		return el.Value.(*requestEntry), false
	}
	// Make room: drop the oldest finished outcomes. Running operations are
	// never evicted (there are at most a few: one per concurrent request).
	for el := l.order.Front(); el != nil && l.order.Len() >= l.max; {
		next := el.Next()
		if re := el.Value.(*requestEntry); re.kept {
			l.order.Remove(el)
			delete(l.entries, re.id)
		}
		el = next
	}
	e = &requestEntry{id: id, fingerprint: fingerprint, at: now, done: make(chan struct{})}
	l.entries[id] = l.order.PushBack(e)
	return e, true
}

// finish records the outcome of an owned entry: kept when final, dropped
// when the operation may be tried again.
func (l *requestLog) finish(e *requestEntry, revs Revisions, err error, keep bool, now time.Time) {
	l.mu.Lock()
	e.revs, e.err, e.kept = revs, err, keep
	// The window starts when the outcome is known: a slow operation's
	// retries keep being answered for the full window after it.
	e.at = now
	if el, ok := l.entries[e.id]; ok && el.Value.(*requestEntry) == e {
		if keep {
			l.order.MoveToBack(el)
		} else {
			l.order.Remove(el)
			delete(l.entries, e.id)
		}
	}
	l.mu.Unlock()
	close(e.done)
}

// expireLocked drops outcomes older than the window. Finished entries are
// in the order of their outcome's time (finish moves them to the back), so
// it stops at the first one still in the window; running ones are skipped.
func (l *requestLog) expireLocked(now time.Time) {
	for el := l.order.Front(); el != nil; {
		next := el.Next()
		re := el.Value.(*requestEntry)
		if re.kept {
			if now.Sub(re.at) < l.ttl {
				return
			}
			l.order.Remove(el)
			delete(l.entries, re.id)
		}
		el = next
	}
}

// final reports whether an outcome answers every repeat of the request.
// Success and refusals (invalid, not found, out of range, failed
// precondition, already exists) are final. Unavailable and Aborted are not:
// nothing was applied (an operation that failed midway restored the target
// before answering), and the caller's retry must be able to succeed.
func final(err error) bool {
	if err == nil {
		return true
	}
	switch domain.CodeOf(err) {
	case contract.CodeUnavailable, contract.CodeAborted, contract.CodeUnknown:
		return false
	}
	return true
}
