package cvmemu

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIPAllocator(t *testing.T) {
	p, err := newIPAllocator("127.77.0.253")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		ip, err := p.alloc()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip)
	}
	want := []string{"127.77.0.253", "127.77.0.254", "127.77.1.1", "127.77.1.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("allocated %v, want %v (skipping .255 and .0)", got, want)
	}
	p.free("127.77.0.254")
	// Sequential, not immediately reusing the freed address.
	if ip, _ := p.alloc(); ip != "127.77.1.3" {
		t.Errorf("next = %s", ip)
	}

	// Exhaustion wraps around to freed addresses and then reports an error.
	small, _ := newIPAllocator("127.255.255.252")
	a, _ := small.alloc() // .252
	b, _ := small.alloc() // .253
	c, _ := small.alloc() // .254
	if _, err := small.alloc(); err == nil {
		t.Fatalf("expected exhaustion after %s %s %s", a, b, c)
	}
	small.free(b)
	if ip, err := small.alloc(); err != nil || ip != b {
		t.Fatalf("after free got %s %v, want %s", ip, err, b)
	}

	if _, err := New(Config{Credentials: map[string]string{"a": "b"}, MaxClockSkew: time.Minute,
		MaxInstanceCount: 1, MaxClientTokens: 1, IPBase: "10.0.0.1"}); err == nil {
		t.Error("IPBase outside 127.0.0.0/8 must be rejected")
	}
}

func TestExpandNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		want  string
	}{
		{"", 2, "[未命名 未命名]"},
		{"node", 1, "[node]"},
		{"node-", 3, "[node-1 node-2 node-3]"},
		{"np-{R:3}-x{R:10}", 2, "[np-3-x10 np-4-x11]"},
	} {
		if got := fmt.Sprint(expandNames(tc.name, tc.count)); got != tc.want {
			t.Errorf("expandNames(%q, %d) = %s, want %s", tc.name, tc.count, got, tc.want)
		}
	}
}

func TestInstanceShape(t *testing.T) {
	for typ, want := range map[string][2]int64{
		"S5.SMALL2":     {1, 2},
		"S5.MEDIUM4":    {2, 4},
		"SA2.LARGE8":    {4, 8},
		"S5.2XLARGE16":  {8, 16},
		"GN7.8XLARGE64": {32, 64},
		"weird":         {0, 0},
	} {
		cpu, mem := InstanceShape(typ)
		if cpu != want[0] || mem != want[1] {
			t.Errorf("%s: %d/%d, want %v", typ, cpu, mem, want)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(2, t0)
	if got := allowed(b, t0, 3); got != 2 {
		t.Fatalf("%d of 3 allowed at once, want the burst of 2", got)
	}
	if b.allow(t0.Add(400 * time.Millisecond)) {
		t.Fatal("0.8 tokens must not allow a request")
	}
	if !b.allow(t0.Add(500 * time.Millisecond)) {
		t.Fatal("one token refilled after 500ms at 2/s")
	}
	if got := allowed(b, t0.Add(10*time.Second), 3); got != 2 {
		t.Fatalf("%d allowed after a long pause, want the burst of 2", got)
	}
}

// allowed makes n requests at the same instant and counts the allowed ones.
func allowed(b *tokenBucket, at time.Time, n int) int {
	ok := 0
	for range n {
		if b.allow(at) {
			ok++
		}
	}
	return ok
}

func TestRateWindow(t *testing.T) {
	var w rateWindow
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		w.observe(t0.Add(time.Duration(i) * 100 * time.Millisecond)) // 5 within 0.4s
	}
	if n := w.observe(t0.Add(1450 * time.Millisecond)); n != 1 {
		t.Errorf("window count after a gap = %d, want 1 (old entries expire)", n)
	}
	if w.peak != 5 {
		t.Errorf("peak = %d, want 5", w.peak)
	}
	if len(w.times) != 1 {
		t.Errorf("window keeps %d timestamps, want 1", len(w.times))
	}
}

func TestHandlerWithHTTPTestAndConcurrentTokenRetries(t *testing.T) {
	e, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ts := httptest.NewServer(e)
	defer ts.Close()
	c, err := NewClient(strings.TrimPrefix(ts.URL, "http://"), testSecretID, testKey, testRegion)
	if err != nil {
		t.Fatal(err)
	}

	// Many concurrent retries of one logical request: one creation only.
	const workers = 16
	results := make([][]string, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			ids, err := runInstances(c, runOpts{count: 5, token: "burst"})
			if err != nil {
				t.Error(err)
			}
			results[i] = ids
		})
	}
	wg.Wait()
	for i := range results {
		if !slices.Equal(results[i], results[0]) {
			t.Fatalf("worker %d got %v, worker 0 got %v", i, results[i], results[0])
		}
	}
	st := e.Stats()
	if st.VMsCreated != 5 || st.ClientTokenCreations["acct1/burst"] != 1 || st.ClientTokenReplays["acct1/burst"] != workers-1 {
		t.Errorf("created %d, token stats %v %v", st.VMsCreated, st.ClientTokenCreations, st.ClientTokenReplays)
	}
	if st.VMsCreatedWithoutToken != 0 {
		t.Errorf("VMsCreatedWithoutToken = %d", st.VMsCreatedWithoutToken)
	}
	if vms := e.ListVMs(); len(vms) != 5 || vms[0].ClientToken != "burst" || vms[0].Account != "acct1" {
		t.Errorf("ListVMs = %+v", vms)
	}
}

func TestClientTokenMemoryIsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.MaxClientTokens = 2
	s := startServer(t, cfg)
	c := sdkClient(t, s, testSecretID, testKey)
	first, err := runInstances(c, runOpts{token: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"t2", "t3"} {
		if _, err := runInstances(c, runOpts{token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	// t1 was forgotten: reusing it creates again, and Stats flags it.
	again, err := runInstances(c, runOpts{token: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(first, again) {
		t.Fatal("forgotten token must not replay")
	}
	st := s.Stats()
	if len(st.ClientTokenCreations) != 2 || st.VMsCreated != 4 {
		t.Errorf("stats %+v", st)
	}
	if st.TokensCreatedTwice != 1 || st.ClientTokenCreations["acct1/t1"] != 2 {
		t.Errorf("token reuse not flagged: twice %d, creations %v", st.TokensCreatedTwice, st.ClientTokenCreations)
	}
}
