package app

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// At-most-once operations. The gateway sends the same request id on every
// attempt of one operation: an attempt whose reply was lost (a timeout, a
// leader that answered and died) is retried, and must not scale up twice.
// The App remembers the outcome of every operation by request id for a
// window and answers a repeat with it instead of applying it again.
//
// The log is in memory, at the leader. A repeat that reaches another
// process (a leader change or a restart within the window) is applied
// again: making that exact needs the outcome persisted with the same
// compare-and-set as the operation (a field of the group record), which the
// state schema does not have yet. The window covers what a gateway retries
// (seconds); a leader change between an answer and its retry is rare.

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
	case domain.CodeUnavailable, domain.CodeAborted, domain.CodeUnknown:
		return false
	}
	return true
}

// Once runs the operation f at most once per requestID and answers a repeat
// of the id with the first final outcome (see final), within the request
// window (Options.RequestTTL). fingerprint identifies the operation and its
// arguments: an id reused for a different operation is refused with
// InvalidArgument. A repeat that arrives while the first is still running
// waits for it. An empty requestID disables the check.
func (a *App) Once(ctx context.Context, requestID, fingerprint string, f func(ctx context.Context) (Revisions, error)) (Revisions, error) {
	if requestID == "" || a.requests == nil {
		return f(ctx)
	}
	for {
		e, owner := a.requests.begin(requestID, fingerprint, a.clock.Now())
		if owner {
			revs, err := f(ctx)
			a.requests.finish(e, revs, err, final(err), a.clock.Now())
			return revs, err
		}
		if e.fingerprint != fingerprint {
			return Revisions{}, domain.Errorf(domain.CodeInvalidArgument,
				"request id %q was already used for a different operation", requestID)
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return Revisions{}, &domain.Error{Code: domain.CodeUnavailable,
				Msg: "waiting for the first attempt of request " + requestID, Err: ctx.Err()}
		}
		if e.kept {
			a.obs.Replayed()
			a.log.Info("repeated request answered with its first outcome", "request_id", requestID,
				"code", domain.CodeOf(e.err).String())
			return e.revs, e.err
		}
		// The first attempt was not final (nothing applied): try again.
	}
}
