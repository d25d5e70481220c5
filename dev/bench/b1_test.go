package main

import (
	"slices"
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
