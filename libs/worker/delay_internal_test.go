package worker

import (
	"math"
	"testing"
	"time"
)

func TestNakDelayDoublesPerDeliveryUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		delivered uint64
		maxDelay  time.Duration
		want      time.Duration
	}{
		{0, time.Minute, time.Second},
		{1, time.Minute, time.Second},
		{2, time.Minute, 2 * time.Second},
		{4, time.Minute, 8 * time.Second},
		{7, time.Minute, time.Minute},
		{math.MaxUint64, time.Minute, time.Minute},
		{1, 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		if got := nakDelay(tc.delivered, tc.maxDelay); got != tc.want {
			t.Errorf("nakDelay(%d, %s) = %s, want %s", tc.delivered, tc.maxDelay, got, tc.want)
		}
	}
}

func TestPullBackoffIsJitteredAndCapped(t *testing.T) {
	for failures, base := range map[int]time.Duration{1: 100 * time.Millisecond, 3: 400 * time.Millisecond, 7: 5 * time.Second, 1000: 5 * time.Second} {
		for range 20 {
			if d := pullBackoff(failures); d < base/2 || d > base {
				t.Fatalf("pullBackoff(%d) = %s, want within [%s, %s]", failures, d, base/2, base)
			}
		}
	}
}
