package domain

import "time"

// AppliedRequest is the durable record of an operation applied to a group:
// it is written in the same compare-and-set as the group change the
// operation made, so whichever process leads later recognises a repeat of
// the request and does not apply it again.
type AppliedRequest struct {
	// ID is the request id the caller sends on every attempt.
	ID string
	// Fingerprint identifies the operation and its arguments.
	Fingerprint string
	// At is when the operation was applied; the record expires a window
	// after.
	At time.Time
	// Release are the instances the operation releases after its group
	// write; those still live when it is found again are released then.
	Release []string
	// Force: the release skips the before_delete hook (an operator's
	// force-delete), also when it is finished later.
	Force bool
}

// Expired reports whether the record is outside the window at now.
func (r AppliedRequest) Expired(now time.Time, window time.Duration) bool {
	return now.Sub(r.At) >= window
}

// FindApplied returns the unexpired record of request id in rs.
func FindApplied(rs []AppliedRequest, id string, now time.Time, window time.Duration) (AppliedRequest, bool) {
	for _, r := range rs {
		if r.ID == id && !r.Expired(now, window) {
			return r, true
		}
	}
	return AppliedRequest{}, false
}

// WithApplied returns rs with r recorded (replacing an earlier record of
// the same id), expired records dropped, and at most limit records, the
// oldest dropped first. rs is not modified.
func WithApplied(rs []AppliedRequest, r AppliedRequest, now time.Time, window time.Duration, limit int) []AppliedRequest {
	out := make([]AppliedRequest, 0, min(len(rs)+1, max(limit, 1)))
	for _, x := range rs {
		if x.ID != r.ID && !x.Expired(now, window) {
			out = append(out, x)
		}
	}
	out = append(out, r)
	if drop := len(out) - max(limit, 1); drop > 0 {
		out = out[drop:]
	}
	return out
}
