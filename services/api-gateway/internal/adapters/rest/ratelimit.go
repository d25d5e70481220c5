package rest

import (
	"crypto/sha256"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"golang.org/x/time/rate"
)

// tokenLimiter is a token bucket per authenticated bearer token, keyed by
// the token's SHA-256 digest (the token itself is never kept). Buckets
// live in this process: with N gateway replicas behind a Service a token
// may make up to N times the rate in total.
type tokenLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[[sha256.Size]byte]*rate.Limiter
	swept   time.Time
}

// sweepEvery is how often buckets that have refilled completely are
// dropped (a full bucket is the same as a new one), so tokens that were
// rotated away do not keep theirs forever.
const sweepEvery = time.Minute

func newTokenLimiter(perSecond float64, burst int) *tokenLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &tokenLimiter{limit: rate.Limit(perSecond), burst: max(burst, 1), buckets: map[[sha256.Size]byte]*rate.Limiter{}, swept: time.Now()}
}

// allow takes one request from the token's bucket. When the bucket is
// empty it returns false and how long until a request would be allowed.
func (l *tokenLimiter) allow(token string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	key := sha256.Sum256([]byte(token))
	l.mu.Lock()
	if now.Sub(l.swept) >= sweepEvery {
		l.swept = now
		for k, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.buckets, k)
			}
		}
	}
	b := l.buckets[key]
	if b == nil {
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// rateLimited answers 429 with Retry-After (whole seconds, rounded up)
// and the API's error body.
func (h *handler) rateLimited(w http.ResponseWriter, r *http.Request, role Role, wait time.Duration) {
	secs := int64(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	h.metrics.rateLimited.WithLabelValues(role.String()).Inc()
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	h.writeError(w, r, newError(http.StatusTooManyRequests, contract.CodeResourceExhausted,
		"rate limit exceeded for this token; retry after "+strconv.FormatInt(secs, 10)+"s").
		with("retryAfterSeconds", secs).
		with("limitPerSecond", float64(h.limiter.limit)).
		with("burst", h.limiter.burst))
}
