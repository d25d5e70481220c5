package main

import (
	"testing"
	"time"
)

func TestLowerBound(t *testing.T) {
	base := boundParams{CreateSlots: 100, Batch: 100, Rate: 8, Burst: 2, Latency: 300 * time.Millisecond, Boot: 20 * time.Second, Hook: 5 * time.Second, HookSlots: 50}
	tests := []struct {
		name string
		mod  func(*boundParams)
		want time.Duration
	}{
		{"nothing to do", func(p *boundParams) { p.Instances = 0 }, 0},
		{"one batch, hooks never queue", func(p *boundParams) { p.Instances = 50 }, 25300 * time.Millisecond},
		{"one batch, hooks in two rounds", func(p *boundParams) { p.Instances = 100 }, 30300 * time.Millisecond},
		// Ten waves of 20.3s; the last wave's 100 hooks take two rounds.
		{"slots bound", func(p *boundParams) { p.Instances = 1000 }, 10*20300*time.Millisecond + 10*time.Second},
		// 1000 slots: ten calls paced at 8/s after a burst of 2 (the
		// tenth leaves at 1s), then hooks bound: 1000 hooks / 50 slots x 5s.
		{"hooks bound", func(p *boundParams) { p.Instances, p.CreateSlots = 1000, 1000 }, 20300*time.Millisecond + 100*time.Second},
		{"rate bound", func(p *boundParams) {
			p.Instances, p.CreateSlots, p.Batch, p.Rate, p.Burst, p.HookSlots, p.Hook = 10, 10, 1, 1, 1, 100, 0
		}, 9*time.Second + 20300*time.Millisecond},
		{"ready delay adds", func(p *boundParams) { p.Instances, p.Ready = 50, time.Second }, 26300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			tt.mod(&p)
			if got := lowerBound(p); got != tt.want {
				t.Errorf("lowerBound = %s, want %s", got, tt.want)
			}
		})
	}
}
