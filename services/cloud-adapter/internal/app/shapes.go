package app

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Instance shapes: what the gateway and lifecycle check a template's
// offerings against (one shape per template, every type offered in its
// zone). Answers are cached per (target, zone, type), offered or not, so
// a burst of template writes costs the cloud one catalogue call.

// Shape cache defaults.
const (
	DefaultShapeTTL        = 10 * time.Minute
	DefaultShapeCacheLimit = 20000
)

// ShapeOptions tune Shapes.
type ShapeOptions struct {
	// TTL is how long an answer is reused (DefaultShapeTTL when zero).
	TTL time.Duration
	// Limit bounds the cached (target, zone, type) entries
	// (DefaultShapeCacheLimit when zero).
	Limit int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Shapes answers instance-shape questions from the clouds that can tell
// (ports.InstanceShapes), through a bounded cache.
type Shapes struct {
	clouds map[string]ports.Cloud
	o      ShapeOptions

	mu    sync.Mutex
	cache map[shapeKey]shapeEntry
}

type shapeKey struct {
	target             domain.Target
	zone, instanceType string
}

type shapeEntry struct {
	shape   domain.InstanceShape
	offered bool
	expires time.Time
}

// NewShapes returns Shapes over clouds (by provider name).
func NewShapes(clouds map[string]ports.Cloud, o ShapeOptions) *Shapes {
	if o.TTL <= 0 {
		o.TTL = DefaultShapeTTL
	}
	if o.Limit <= 0 {
		o.Limit = DefaultShapeCacheLimit
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Shapes{clouds: clouds, o: o, cache: map[shapeKey]shapeEntry{}}
}

// Shapes returns the shape of each type of types in each zone of zones of
// t that the cloud offers (a pair it does not offer is missing), and
// whether the answer came from the cache. Errors:
// invalid parameters (ports.CheckShapeQuery), ports.ErrNotSupported
// (wrapped) for a provider without an adapter or whose adapter cannot
// tell, else the cloud's.
func (s *Shapes) Shapes(ctx context.Context, t domain.Target, zones, types []string) (shapes []domain.InstanceShape, cached bool, err error) {
	if err := ports.CheckShapeQuery(zones, types); err != nil {
		return nil, false, err
	}
	zones, types = distinct(zones), distinct(types)
	cloud, ok := s.clouds[t.Provider]
	if !ok {
		return nil, false, fmt.Errorf("no cloud adapter for provider %q: %w", t.Provider, ports.ErrNotSupported)
	}
	is, ok := cloud.(ports.InstanceShapes)
	if !ok {
		return nil, false, fmt.Errorf("provider %q: %w", t.Provider, ports.ErrNotSupported)
	}
	if out, ok := s.cached(t, zones, types); ok {
		return out, true, nil
	}
	shapes, err = is.InstanceShapes(ctx, ports.Target{Account: t.Account, Region: t.Region}, zones, types)
	if err != nil {
		return nil, false, err
	}
	return s.store(t, zones, types, shapes), false, nil
}

// cached answers from the cache when every pair is in it and fresh.
func (s *Shapes) cached(t domain.Target, zones, types []string) ([]domain.InstanceShape, bool) {
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []domain.InstanceShape
	for _, z := range zones {
		for _, ty := range types {
			e, ok := s.cache[shapeKey{t, z, ty}]
			if !ok || !now.Before(e.expires) {
				return nil, false
			}
			if e.offered {
				out = append(out, e.shape)
			}
		}
	}
	return out, true
}

// store caches the cloud's answer for every pair asked (the pairs missing
// from it as not offered) and returns the answer's asked pairs.
func (s *Shapes) store(t domain.Target, zones, types []string, shapes []domain.InstanceShape) []domain.InstanceShape {
	now := s.o.Now()
	expires := now.Add(s.o.TTL)
	asked := make(map[shapeKey]shapeEntry, len(zones)*len(types))
	for _, z := range zones {
		for _, ty := range types {
			asked[shapeKey{t, z, ty}] = shapeEntry{expires: expires}
		}
	}
	var out []domain.InstanceShape
	for _, sh := range shapes {
		k := shapeKey{t, sh.Zone, sh.InstanceType}
		if e, ok := asked[k]; ok && !e.offered {
			asked[k] = shapeEntry{shape: sh, offered: true, expires: expires}
			out = append(out, sh)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache)+len(asked) > s.o.Limit {
		for k, e := range s.cache {
			if !now.Before(e.expires) {
				delete(s.cache, k)
			}
		}
	}
	// Still full: drop arbitrary entries (they are only asked again).
	for k := range s.cache {
		if len(s.cache)+len(asked) <= s.o.Limit {
			break
		}
		delete(s.cache, k)
	}
	for k, e := range asked {
		if len(s.cache) >= s.o.Limit {
			break
		}
		s.cache[k] = e
	}
	return out
}

// Knows reports whether provider names a cloud of this adapter.
func (s *Shapes) Knows(provider string) bool {
	_, ok := s.clouds[provider]
	return ok
}

// CachedShapes is the number of cached (target, zone, type) entries.
func (s *Shapes) CachedShapes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cache)
}

func distinct(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, x := range ss {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
