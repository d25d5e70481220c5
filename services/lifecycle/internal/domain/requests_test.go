package domain_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func ids(rs []domain.AppliedRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestWithApplied(t *testing.T) {
	const window = 10 * time.Minute
	at := func(id string, d time.Duration) domain.AppliedRequest {
		return domain.AppliedRequest{ID: id, Fingerprint: "fp-" + id, At: t0.Add(d)}
	}
	now := t0.Add(window)
	tests := []struct {
		name  string
		cur   []domain.AppliedRequest
		limit int
		want  []string
	}{
		{"first record", nil, 3, []string{"new"}},
		{"appended, oldest first", []domain.AppliedRequest{at("a", time.Minute), at("b", 2*time.Minute)}, 3, []string{"a", "b", "new"}},
		{"expired records dropped", []domain.AppliedRequest{at("old", 0), at("b", time.Second)}, 3, []string{"b", "new"}},
		{"the oldest dropped beyond the limit", []domain.AppliedRequest{at("a", time.Minute), at("b", 2*time.Minute), at("c", 3*time.Minute)}, 2, []string{"c", "new"}},
		{"a repeat replaces its record", []domain.AppliedRequest{at("new", time.Minute), at("b", 2*time.Minute)}, 3, []string{"b", "new"}},
		{"a limit below one keeps the new record", []domain.AppliedRequest{at("a", time.Minute)}, 0, []string{"new"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.cur)
			got := domain.WithApplied(tc.cur, domain.AppliedRequest{ID: "new", At: now}, now, window, tc.limit)
			if !slices.Equal(ids(got), tc.want) {
				t.Errorf("records %v, want %v", ids(got), tc.want)
			}
			if !slices.EqualFunc(before, tc.cur, func(x, y domain.AppliedRequest) bool { return x.ID == y.ID && x.At.Equal(y.At) }) {
				t.Errorf("the input was modified: %v", ids(tc.cur))
			}
		})
	}
}

func TestFindApplied(t *testing.T) {
	const window = time.Minute
	rs := []domain.AppliedRequest{{ID: "a", At: t0}, {ID: "b", At: t0.Add(30 * time.Second)}}
	if _, ok := domain.FindApplied(rs, "a", t0.Add(59*time.Second), window); !ok {
		t.Error("a not found inside the window")
	}
	if _, ok := domain.FindApplied(rs, "a", t0.Add(window), window); ok {
		t.Error("a found after the window")
	}
	if _, ok := domain.FindApplied(rs, "c", t0, window); ok {
		t.Error("c found: never recorded")
	}
}
