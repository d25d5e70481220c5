package main

import (
	"container/heap"
	"slices"
	"time"
)

// boundParams are what limits a scale-up when nothing else does.
type boundParams struct {
	// Instances to create, all requested at time 0.
	Instances int
	// CreateSlots is the parallelism of creation (lifecycle's group and
	// account create parallelism, the smaller): an instance holds a slot
	// from its create call until its VM runs.
	CreateSlots int
	// Batch is the most instances one RunInstances call creates.
	Batch int
	// Rate and Burst pace RunInstances calls (the tighter of the client's
	// and the cloud's limits).
	Rate  float64
	Burst int
	// Latency of RunInstances, Boot of a VM, Hook of the after_created
	// hook, Ready of a joined node.
	Latency, Boot, Hook, Ready time.Duration
	// HookSlots is how many hooks run at once (hook-runner concurrency x
	// replicas).
	HookSlots int
}

// lowerBound is when the last instance could be Running if every service
// took no time at all: a discrete-event run of the create slots, the
// rate-limited batched create calls, the boot, and the hook slots. Cloud
// answers are assumed seen the instant they happen (no polling).
func lowerBound(p boundParams) time.Duration {
	if p.Instances == 0 {
		return 0
	}
	// Create stage: when does each batch's VMs run?
	type arrival struct {
		at time.Duration
		n  int
	}
	var arrivals []arrival
	tokens, last := float64(p.Burst), time.Duration(0)
	takeToken := func(at time.Duration) time.Duration {
		tokens = min(float64(p.Burst), tokens+p.Rate*(at-last).Seconds())
		last = at
		if tokens >= 1 {
			tokens--
			return at
		}
		wait := time.Duration((1 - tokens) / p.Rate * float64(time.Second))
		last = at + wait
		tokens = 0
		return at + wait
	}
	releases := &durHeap{}
	pending, free, now := p.Instances, p.CreateSlots, time.Duration(0)
	for pending > 0 {
		n := min(free, pending)
		for n > 0 {
			b := min(n, p.Batch)
			issued := takeToken(now)
			running := issued + p.Latency + p.Boot
			arrivals = append(arrivals, arrival{running, b})
			heap.Push(releases, slot{running, b})
			n -= b
			pending -= b
			free -= b
		}
		if pending == 0 {
			break
		}
		r := heap.Pop(releases).(slot)
		now, free = r.at, free+r.n
	}
	// Hook stage: FIFO over HookSlots.
	slices.SortFunc(arrivals, func(a, b arrival) int { return int(a.at - b.at) })
	hooks := make(durs, p.HookSlots)
	heap.Init(&hooks)
	var end time.Duration
	for _, a := range arrivals {
		for range a.n {
			start := max(a.at, hooks[0])
			hooks[0] = start + p.Hook
			heap.Fix(&hooks, 0)
			end = max(end, start+p.Hook+p.Ready)
		}
	}
	return end
}

type slot struct {
	at time.Duration
	n  int
}

type durHeap []slot

func (h durHeap) Len() int           { return len(h) }
func (h durHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h durHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durHeap) Push(x any)        { *h = append(*h, x.(slot)) }
func (h *durHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type durs []time.Duration

func (h durs) Len() int           { return len(h) }
func (h durs) Less(i, j int) bool { return h[i] < h[j] }
func (h durs) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durs) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durs) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
