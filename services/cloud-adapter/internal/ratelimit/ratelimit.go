// Package ratelimit paces cloud API calls on the client side, one token
// bucket per (account, region, action), so the adapter stays below the
// cloud's published limits instead of discovering them through throttling
// errors. Clouds limit per account and region, and each API action has its
// own budget.
package ratelimit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limit is a sustained rate (calls per second) and a burst.
type Limit struct {
	Rate  float64
	Burst int
}

func (l Limit) String() string {
	return strconv.FormatFloat(l.Rate, 'f', -1, 64) + ":" + strconv.Itoa(l.Burst)
}

// Limits maps an action name to its limit. Actions without an entry are not
// paced.
type Limits map[string]Limit

// String renders the limits in the format Parse reads, sorted by action.
func (ls Limits) String() string {
	parts := make([]string, 0, len(ls))
	for _, a := range slices.Sorted(maps.Keys(ls)) {
		parts = append(parts, a+"="+ls[a].String())
	}
	return strings.Join(parts, ",")
}

// Parse reads "Action=rate[:burst],..." (burst defaults to 1).
func Parse(s string) (Limits, error) {
	ls := Limits{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		action, spec, ok := strings.Cut(part, "=")
		action = strings.TrimSpace(action)
		if !ok || action == "" {
			return nil, fmt.Errorf("rate limit %q: want Action=rate[:burst]", part)
		}
		rs, bs, hasBurst := strings.Cut(spec, ":")
		r, err := strconv.ParseFloat(strings.TrimSpace(rs), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("rate limit %q: rate must be a positive number", part)
		}
		burst := 1
		if hasBurst {
			if burst, err = strconv.Atoi(strings.TrimSpace(bs)); err != nil || burst < 1 {
				return nil, fmt.Errorf("rate limit %q: burst must be a positive integer", part)
			}
		}
		ls[action] = Limit{Rate: r, Burst: burst}
	}
	return ls, nil
}

type key struct{ account, region, action string }

// Limiters hands out one token bucket per (account, region, action).
type Limiters struct {
	limits Limits
	mu     sync.Mutex
	m      map[key]*rate.Limiter
}

// New returns Limiters applying limits.
func New(limits Limits) *Limiters {
	return &Limiters{limits: maps.Clone(limits), m: map[key]*rate.Limiter{}}
}

// Wait blocks until a call of action for account and region may proceed and
// returns how long it waited. It fails only when ctx ends first (or cannot
// last long enough for a token).
func (l *Limiters) Wait(ctx context.Context, account, region, action string) (time.Duration, error) {
	lim := l.limiter(key{account, region, action})
	if lim == nil {
		return 0, nil
	}
	start := time.Now()
	err := lim.Wait(ctx)
	return time.Since(start), err
}

func (l *Limiters) limiter(k key) *rate.Limiter {
	lim, ok := l.limits[k.action]
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rl := l.m[k]
	if rl == nil {
		rl = rate.NewLimiter(rate.Limit(lim.Rate), lim.Burst)
		l.m[k] = rl
	}
	return rl
}
