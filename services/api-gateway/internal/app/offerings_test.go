package app

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// testClock is a clock tests move by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func offeringsTemplate() *domain.InstanceTemplate {
	return &domain.InstanceTemplate{
		Name: "sp", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "gz-3", InstanceType: "S5.LARGE8",
		CapacityType: "spot",
		Offerings: []domain.Offering{
			{Zone: "gz-3", InstanceType: "S5.LARGE8"},
			{Zone: "gz-4", SubnetID: "subnet-4", InstanceType: "S5.LARGE8"},
			{Zone: "gz-6", InstanceType: "S5.LARGE8", CapacityType: "on-demand"},
		},
	}
}

func mark(account, zone, capacity string, until time.Time, code string) *domain.OfferingMark {
	return &domain.OfferingMark{
		Ref:   domain.OfferingRef{Provider: "tencentcloud", Account: account, Region: "ap-guangzhou", Zone: zone, InstanceType: "S5.LARGE8", CapacityType: capacity},
		At:    until.Add(-3 * time.Minute),
		Until: until, Code: code, Message: code + " message",
	}
}

// unavailable summarises GroupOfferings: per offering, its resolved
// capacity and the code of its mark ("" when available).
func unavailable(s *Service, t *domain.InstanceTemplate) []string {
	var out []string
	for _, o := range s.GroupOfferings(t) {
		code := ""
		if o.Unavailable != nil {
			code = o.Unavailable.Code
		}
		out = append(out, o.Offering.Zone+"/"+o.Offering.CapacityType+"="+code)
	}
	return out
}

// A mark makes the offering it names unavailable (capacity resolved as
// the adapter names it: the offering's, else the template's) until its
// until passes on the service's clock; it then stops showing, also in the
// list of live marks. A later put of the same key replaces it, a delete
// removes it.
func TestOfferingMarksAppearExpireAndGo(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)}
	m := syncedModel()
	s := NewService(m, nil, Config{Now: clock.Now}, nil)
	tpl := offeringsTemplate()

	if _, err := s.UnavailableOfferings(); domain.CodeOf(err) != contract.CodeUnavailable {
		t.Fatalf("before the offerings bucket is loaded: %v, want unavailable", err)
	}
	if got := unavailable(s, tpl); !slices.Equal(got, []string{"gz-3/spot=", "gz-4/spot=", "gz-6/on-demand="}) {
		t.Errorf("before any mark: %q", got)
	}
	m.MarkSynced(BucketOfferings, nil)

	until := clock.Now().Add(3 * time.Minute)
	m.PutOffering("k3", 1, mark("prod", "gz-3", "spot", until, "SOLD_OUT"))
	m.PutOffering("k6", 2, mark("prod", "gz-6", "spot", until, "NOT_MINE"))              // the template's capacity, not the offering's
	m.PutOffering("kx", 3, mark("other", "gz-4", "spot", until.Add(time.Hour), "OTHER")) // another account
	if got := unavailable(s, tpl); !slices.Equal(got, []string{"gz-3/spot=SOLD_OUT", "gz-4/spot=", "gz-6/on-demand="}) {
		t.Errorf("with marks: %q", got)
	}
	if o := s.GroupOfferings(tpl)[0]; o.Unavailable == nil || !o.Unavailable.Until.Equal(until) || o.Unavailable.Message != "SOLD_OUT message" {
		t.Errorf("offering 0 = %+v", o)
	}
	live, err := s.UnavailableOfferings()
	if err != nil {
		t.Fatal(err)
	}
	if keys := markKeys(live); !slices.Equal(keys, []string{"k3", "k6", "kx"}) {
		t.Errorf("live marks = %q, want soonest to end first (ties by key)", keys)
	}

	// One second before until it holds; at until it has passed.
	clock.Add(3*time.Minute - time.Second)
	if got := unavailable(s, tpl); got[0] != "gz-3/spot=SOLD_OUT" {
		t.Errorf("a second before until: %q", got)
	}
	clock.Add(time.Second)
	if got := unavailable(s, tpl); got[0] != "gz-3/spot=" {
		t.Errorf("at until: %q", got)
	}
	live, _ = s.UnavailableOfferings()
	if keys := markKeys(live); !slices.Equal(keys, []string{"kx"}) {
		t.Errorf("live marks after expiry = %q", keys)
	}

	// The adapter marks it again (same key, later revision); an older
	// revision replayed by a resync changes nothing.
	m.PutOffering("k3", 4, mark("prod", "gz-3", "spot", clock.Now().Add(time.Minute), "AGAIN"))
	m.PutOffering("k3", 1, mark("prod", "gz-3", "spot", clock.Now().Add(time.Hour), "STALE"))
	if got := unavailable(s, tpl); got[0] != "gz-3/spot=AGAIN" {
		t.Errorf("marked again: %q", got)
	}
	m.DeleteOffering("k3", 5)
	if got := unavailable(s, tpl); got[0] != "gz-3/spot=" {
		t.Errorf("after delete: %q", got)
	}

	// A template without offerings has none to show.
	if got := s.GroupOfferings(testGroup("web", 0, 1, 0).InstanceTemplate); got != nil {
		t.Errorf("no offerings: %+v", got)
	}
	if got := s.GroupOfferings(nil); got != nil {
		t.Errorf("no template: %+v", got)
	}
}

// An empty template capacity type means on-demand, as the adapter names
// marks.
func TestOfferingRefResolvesCapacity(t *testing.T) {
	tpl := offeringsTemplate()
	tpl.CapacityType = ""
	for i, want := range []string{"on-demand", "on-demand", "on-demand"} {
		if got := OfferingRef(tpl, tpl.Offerings[i]).CapacityType; got != want {
			t.Errorf("offering %d: %q, want %q", i, got, want)
		}
	}
	tpl.Offerings[1].CapacityType = "spot"
	if r := OfferingRef(tpl, tpl.Offerings[1]); r != (domain.OfferingRef{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "gz-4", InstanceType: "S5.LARGE8", CapacityType: "spot"}) {
		t.Errorf("ref = %+v", r)
	}
}

// A re-established watch prunes marks deleted while it was down; a reset
// bucket forgets them all.
func TestOfferingMarksResync(t *testing.T) {
	now := time.Now()
	m := syncedModel()
	m.PutOffering("a", 1, mark("prod", "gz-3", "spot", now.Add(time.Hour), "A"))
	m.PutOffering("b", 2, mark("prod", "gz-3", "spot", now.Add(2*time.Hour), "B"))
	m.MarkSynced(BucketOfferings, map[string]struct{}{"a": {}})
	if got, ok := m.OfferingMark(mark("prod", "gz-3", "spot", now, "").Ref, now); !ok || got.Code != "A" {
		t.Errorf("after the prune: %+v %v, want mark A", got, ok)
	}
	m.ResetBucket(BucketOfferings)
	if live := m.OfferingMarks(now); len(live) != 0 {
		t.Errorf("after a reset: %d marks", len(live))
	}
	if _, ok := m.OfferingMark(mark("prod", "gz-3", "spot", now, "").Ref, now); ok {
		t.Error("a reset bucket's mark still matches")
	}
}

func markKeys(vs []OfferingMarkView) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Key)
	}
	return out
}
