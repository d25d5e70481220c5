package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/logging"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// At-most-once operations. The gateway sends the same request id on every
// attempt of one operation: an attempt whose reply was lost (a timeout, a
// leader that answered and died) is retried, and must not scale up twice.
//
// Two records answer a repeat, neither applying it again:
//
//   - The group record (domain.NodeGroup.Applied, state.v1.AppliedRequest)
//     is the source of truth. An operation's group write carries its
//     request id in the same compare-and-set as the change, so the change
//     and the record of it are committed together: a repeat that reaches
//     another leader, or this one after a restart, finds the id there and
//     is answered as applied, with the current revisions (at least those
//     the first attempt wrote, so the caller's read-your-writes holds).
//     Refusals write nothing and are re-evaluated by a repeat, which is
//     fine: nothing was applied. An operation whose group write names
//     instances to release (DeleteNodes, a decrease, an instance action)
//     counts as applied from that write: should the instance writes fail or
//     not follow (the leader died), the next pass or a repeat releases those
//     still live, so a crash between the writes converges, and a retry
//     after a partial failure neither lowers the target again nor restores
//     it. (Without a request id, a partial release restores the target
//     instead, so that a retry lowers it only once.)
//     Records are bounded per group: they expire after the request window
//     and only the newest Options.RequestsPerGroup are kept.
//   - The in-memory log below remembers every outcome (refusals too) at
//     the leader: a fast path for repeats, and the place a concurrent
//     repeat waits for the first attempt rather than running alongside it.
//
// An operation that writes no group (an absolute target already reached,
// nodes already being deleted, a catalog entry no group uses, DeleteGroup)
// is idempotent by itself or answered by the in-memory log within a
// leader's term.

// requests is the requests component: the outcomes of operations by
// request id (in memory, and recorded on the groups they changed, so a
// repeat is answered after a restart), and the releases of instances an
// applied request still owes.
type requests struct {
	*cache
	// cat is the catalog's cache: a repeat reports its revision.
	cat *catalogState
	// recent remembers operation outcomes by request id (nil: disabled).
	recent *requestLog
	// releasesDue: an applied request may have instances left to release.
	releasesDue bool
}

func newRequests(c *cache) *requests {
	r := &requests{cache: c}
	if c.opts.RequestTTL > 0 {
		r.recent = newRequestLog(c.opts.RequestTTL, max(c.opts.RequestLogSize, 1))
	}
	return r
}

// Once runs the operation f at most once per requestID and answers a repeat
// of the id with the first final outcome (see final), within the request
// window (Options.RequestTTL). fingerprint identifies the operation and its
// arguments: an id reused for a different operation is refused with
// InvalidArgument. A repeat that arrives while the first is still running
// waits for it. An empty requestID disables the check.
//
// f's context carries the request: the operation's group write records it
// in the group (see above), so a repeat that reaches another leader, or
// this one after a restart, is answered as applied too.
func (rq *requests) Once(ctx context.Context, requestID, fingerprint string, f func(ctx context.Context) (Revisions, error)) (Revisions, error) {
	if requestID == "" || rq.recent == nil {
		return f(ctx)
	}
	for {
		e, owner := rq.recent.begin(requestID, fingerprint, rq.clock.Now())
		if owner {
			revs, err := f(withRequest(ctx, &opRequest{id: requestID, fingerprint: fingerprint}))
			rq.recent.finish(e, revs, err, final(err), rq.clock.Now())
			return revs, err
		}
		if e.fingerprint != fingerprint {
			return Revisions{}, reusedID(requestID)
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return Revisions{}, &domain.Error{Code: contract.CodeUnavailable,
				Msg: "waiting for the first attempt of request " + requestID, Err: ctx.Err()}
		}
		if e.kept {
			rq.obs.Replayed()
			rq.log.Info("repeated request answered with its first outcome", "request_id", requestID,
				"code", domain.CodeOf(e.err).String())
			return e.revs, e.err
		}
		// The first attempt was not final (nothing applied): try again.
	}
}

// opRequest is the request an operation runs for (in its context), so that
// its group write records it.
type opRequest struct {
	id          string
	fingerprint string
	// release are the instances the operation releases after its group
	// write (noteRelease), force whether that skips their before_delete
	// hook; recorded is set once a group write recorded the request. All
	// are reset before every compare-and-set attempt.
	release  []string
	force    bool
	recorded bool
}

type requestKey struct{}

func withRequest(ctx context.Context, r *opRequest) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

func requestOf(ctx context.Context) *opRequest {
	r, _ := ctx.Value(requestKey{}).(*opRequest)
	return r
}

// noteRelease names the instances the operation releases after its next
// group write, and whether it force-deletes them (no before_delete hook);
// the write records both with the request.
func noteRelease(ctx context.Context, ins []domain.Instance, force bool) {
	r := requestOf(ctx)
	if r == nil {
		return
	}
	r.force = force
	r.release = make([]string, len(ins))
	for i, in := range ins {
		r.release[i] = in.ID
	}
}

// defaultRequestsPerGroup bounds a group's applied requests unless
// Options say otherwise: about 7 KiB in the group record, and more than
// the operations Cluster Autoscaler sends a group within a request window.
const defaultRequestsPerGroup = 100

// requestRecorded reports whether a group write of the operation recorded
// its request: its release then counts as applied, and instance writes that
// failed are finished by the next pass or the repeat instead of being
// undone.
func requestRecorded(ctx context.Context) bool {
	r := requestOf(ctx)
	return r != nil && r.recorded
}

// repeatLocked answers an operation whose request a group already records
// (done true): a repeat with the same fingerprint is answered as applied,
// after releasing the instances the first attempt named and did not
// release; another fingerprint is refused. It runs before every
// compare-and-set attempt, so a record another leader wrote in the
// meantime (the conflict refreshed the cache) is found too.
func (rq *requests) repeatLocked(ctx context.Context) (revs Revisions, done bool, err error) {
	r := requestOf(ctx)
	if r == nil || rq.recent == nil {
		return Revisions{}, false, nil
	}
	r.release, r.force, r.recorded = nil, false, false
	g, rec, ok := rq.findAppliedLocked(r.id)
	if !ok {
		return Revisions{}, false, nil
	}
	if rec.Fingerprint != storedFingerprint(r.fingerprint) {
		return Revisions{}, true, reusedID(r.id)
	}
	if err := rq.finishReleaseLocked(ctx, g, rec); err != nil {
		return Revisions{}, true, &domain.Error{Code: contract.CodeUnavailable,
			Msg: "releasing the instances of request " + r.id, Err: opaque(err)}
	}
	revs.group(g.rev)
	for _, in := range rq.insts {
		revs.inst(in.Revision)
	}
	for _, e := range rq.cat.entries {
		revs.Catalog = max(revs.Catalog, e.rev)
	}
	rq.obs.Replayed()
	logging.WithTrace(ctx, rq.log).Info("repeated request found applied in its group record: not applied again",
		"request_id", r.id, "group", g.g.ID, "applied_at", rec.At)
	return revs, true, nil
}

// finishReleaseLocked releases the instances rec names that are still live
// (their writes did not follow the group write): a Pending one is
// cancelled, any other deleted.
func (rq *requests) finishReleaseLocked(ctx context.Context, g *groupRec, rec domain.AppliedRequest) error {
	var errs []error
	for _, id := range rec.Release {
		r, ok := rq.insts[id]
		if !ok || r.Instance.Group != g.g.ID || !r.Instance.Live() {
			continue
		}
		reason := "request " + rec.ID
		var ev domain.Event = domain.DeleteRequested{Reason: reason, Force: rec.Force}
		if r.Instance.State == domain.StatePending {
			ev = domain.Cancel{Reason: reason}
		}
		if _, _, err := rq.applyLocked(ctx, id, ev); err != nil {
			if errors.Is(err, domain.ErrInvalidTransition) {
				// Not releasable by this event: retrying cannot help.
				rq.log.Warn("an instance an applied request names cannot be released", "instance", id, "request_id", rec.ID, "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("releasing %s: %w", id, err))
			continue
		}
		rq.log.Info("released an instance an applied request named", "instance", id, "group", g.g.ID, "request_id", rec.ID)
	}
	return errors.Join(errs...)
}

// finishReleasesLocked finishes the releases of every group's applied
// requests, when one may be unfinished: after a load (the last leader may
// have died between the writes) and after an operation failed.
func (rq *requests) finishReleasesLocked(ctx context.Context) {
	if !rq.releasesDue {
		return
	}
	rq.releasesDue = false
	now := rq.clock.Now()
	for _, id := range rq.sortedGroupIDsLocked() {
		g := rq.groups[id]
		for _, rec := range g.g.Applied {
			if len(rec.Release) == 0 || rec.Expired(now, rq.opts.RequestTTL) {
				continue
			}
			if err := rq.finishReleaseLocked(ctx, g, rec); err != nil {
				rq.log.Warn("releasing the instances of an applied request; retrying next pass", "group", id, "request_id", rec.ID, "err", err)
				rq.releasesDue = true
			}
		}
	}
}

// storedFingerprint is the short form of a fingerprint kept in the group
// record: 64 bits of its SHA-256 tell a reused id from a repeat, and a
// group's records stay small (every write of the group carries them).
func storedFingerprint(fp string) string {
	sum := sha256.Sum256([]byte(fp))
	return hex.EncodeToString(sum[:8])
}

func reusedID(id string) error {
	return domain.Errorf(contract.CodeInvalidArgument, "request id %q was already used for a different operation", id)
}

// op runs f under the lock with compare-and-set retries: a conflict means
// another writer won (the cache was refreshed), so f is recomputed. It
// reports the outcome to the observer and wakes the dispatcher.
func (rq *requests) op(ctx context.Context, name string, f func() (Revisions, error)) (Revisions, error) {
	rq.mu.Lock()
	revs, err := func() (Revisions, error) {
		if !rq.loaded {
			return Revisions{}, ErrNotLeader
		}
		var err error
		for range rq.opts.CASRetries {
			if revs, done, err := rq.repeatLocked(ctx); done {
				return revs, err
			}
			var revs Revisions
			revs, err = f()
			if !errors.Is(err, ports.ErrConflict) {
				return revs, err
			}
			if ctx.Err() != nil {
				break
			}
		}
		return Revisions{}, &domain.Error{Code: contract.CodeAborted, Msg: name + ": concurrent writes kept conflicting", Err: err}
	}()
	if err != nil {
		// A failure may have come between a group write and the instance
		// writes that complete it.
		rq.releasesDue = true
	}
	rq.mu.Unlock()
	code := domain.CodeOf(err)
	if err != nil && code == contract.CodeUnknown {
		// Anything not classified is the store or the network.
		err = &domain.Error{Code: contract.CodeUnavailable, Msg: name, Err: err}
		code = contract.CodeUnavailable
	}
	rq.obs.Op(name, code)
	if err != nil {
		rq.log.Info("operation refused", "op", name, "code", code.String(), "err", err)
	}
	rq.Wake()
	return revs, err
}

// opaque keeps err's message but drops its chain: a partly applied
// operation must not look like a plain conflict to op's retry loop (which
// would run it again), nor report an inner error's code as its own.
func opaque(err error) error { return errors.New(err.Error()) }
