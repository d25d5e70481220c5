package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
)

// Over 2n rounds, every side runs first (right after the echo traffic)
// equally often, and every side runs right after every other equally
// often: no position or neighbour favours a side.
func TestB1OrderIsBalanced(t *testing.T) {
	for _, n := range []int{2, 3} {
		first := map[int]int{}
		after := map[[2]int]int{}
		for round := range 2 * n {
			order := b1Order(n, round)
			sorted := slices.Sorted(slices.Values(order))
			if !slices.Equal(sorted, []int{0, 1, 2}[:n]) {
				t.Fatalf("b1Order(%d, %d) = %v, not every side once", n, round, order)
			}
			first[order[0]]++
			for k := 1; k < n; k++ {
				after[[2]int{order[k-1], order[k]}]++
			}
		}
		for s := range n {
			if first[s] != 2 {
				t.Errorf("%d sides: side %d ran first in %d of %d rounds, want 2", n, s, first[s], 2*n)
			}
		}
		if len(after) != n*(n-1) {
			t.Errorf("%d sides: %d ordered neighbour pairs seen, want all %d: %v", n, len(after), n*(n-1), after)
		}
		want := after[[2]int{0, 1}]
		for pair, c := range after {
			if c != want {
				t.Errorf("%d sides: side %d ran right after side %d in %d rounds, side 1 after side 0 in %d", n, pair[1], pair[0], c, want)
			}
		}
	}
}

// The paired ratio compares each round's loops, so a load that doubles
// halfway through the run does not move it, while the ratio of the
// medians is thrown off.
func TestPairedRatioCancelsDrift(t *testing.T) {
	loops := func(ms ...int) []harness.LoopStat {
		out := make([]harness.LoopStat, len(ms))
		for i, m := range ms {
			out[i].InProvider = time.Duration(m) * time.Millisecond
		}
		return out
	}
	of := func(s harness.LoopStat) time.Duration { return s.InProvider }
	// The subject is 1.05x the floor in every round; the machine slows
	// down 2x after round 2.
	a := loops(105, 105, 210, 210, 210)
	b := loops(100, 100, 200, 200, 200)
	if r := pairedRatio(a, b, of); r < 1.049 || r > 1.051 {
		t.Errorf("paired ratio %.3f, want 1.05", r)
	}
	// Even rounds: the mean of the two middle ratios.
	if r := pairedRatio(loops(110, 100), loops(100, 100), of); r < 1.049 || r > 1.051 {
		t.Errorf("paired ratio of 1.10 and 1.00 is %.3f, want 1.05", r)
	}
	if r := pairedRatio(nil, nil, of); r != 0 {
		t.Errorf("no rounds: %v, want 0", r)
	}
}

// The fairness check prints the floors' paired ratio with its target,
// met only within 3% of 1.00x either way.
func TestB1AALoopsReportsTheFairnessRatio(t *testing.T) {
	side := func(ms ...int) *b1Side {
		s := &b1Side{loop: &harness.CALoop{}}
		for _, m := range ms {
			s.loop.Loops = append(s.loop.Loops, harness.LoopStat{InProvider: time.Duration(m) * time.Millisecond})
			s.cpu = append(s.cpu, time.Duration(m)*time.Millisecond)
		}
		return s
	}
	for _, c := range []struct {
		a    []int
		want float64
		met  bool
	}{
		{[]int{101, 202, 99}, 1.0, true},
		{[]int{110, 220, 110}, 1.10, false},
		{[]int{90, 180, 90}, 0.90, false},
	} {
		var got []Result
		b1AALoops(func(r Result) { got = append(got, r) }, "steady loop", side(c.a...), side(100, 200, 100), 0, 3)
		if len(got) != 1 {
			t.Fatalf("%d results, want 1", len(got))
		}
		r := got[0]
		if !strings.Contains(r.Metric, "A/A fairness check") || r.Met == nil || *r.Met != c.met || r.Value < c.want-0.011 || r.Value > c.want+0.011 {
			t.Errorf("floor A %v vs floor: %q = %.3f met %v, want %.2f met %v", c.a, r.Metric, r.Value, r.Met != nil && *r.Met, c.want, c.met)
		}
	}
}
