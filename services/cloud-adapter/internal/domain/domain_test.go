package domain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

func TestSplitBatch(t *testing.T) {
	for _, tc := range []struct {
		n, max int
		want   string
	}{
		{n: 0, max: 100, want: "[]"},
		{n: 1, max: 100, want: "[0:0-1:tok]"},
		{n: 100, max: 100, want: "[0:0-100:tok]"},
		{n: 101, max: 100, want: "[0:0-100:tok-0 1:100-101:tok-1]"},
		{n: 250, max: 100, want: "[0:0-100:tok-0 1:100-200:tok-1 2:200-250:tok-2]"},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			var got []string
			for _, c := range domain.SplitBatch("tok", tc.n, tc.max) {
				got = append(got, fmt.Sprintf("%d:%d-%d:%s", c.Index, c.Start, c.End, c.Token))
			}
			if s := "[" + strings.Join(got, " ") + "]"; s != tc.want {
				t.Fatalf("SplitBatch(%d, %d) = %s, want %s", tc.n, tc.max, s, tc.want)
			}
		})
	}
}

func TestChunkTokenIsDeterministicAndBounded(t *testing.T) {
	long := strings.Repeat("x", 64)
	a, b := domain.ChunkToken(long, 3, 5), domain.ChunkToken(long, 3, 5)
	if a != b {
		t.Fatalf("tokens differ between calls: %q %q", a, b)
	}
	if len(a) > domain.MaxClientTokenLen || !strings.HasSuffix(a, "-3") {
		t.Fatalf("token %q: want at most %d chars ending in -3", a, domain.MaxClientTokenLen)
	}
	if domain.ChunkToken(long, 2, 5) == a || domain.ChunkToken(long+"y", 3, 5) == a {
		t.Fatal("different chunks or batches share a token")
	}
	if got := domain.ChunkToken(long, 0, 1); got != long {
		t.Fatalf("single chunk token = %q, want the batch token unchanged", got)
	}
}

func TestCreationTags(t *testing.T) {
	got := fmt.Sprint(domain.CreationTags("c1", "g1", "b1", ""))
	if want := "[{nodesmith:cluster c1} {nodesmith:group g1} {nodesmith:batch b1}]"; got != want {
		t.Fatalf("tags = %s, want %s", got, want)
	}
	got = fmt.Sprint(domain.CreationTags("c1", "g1", "b1", "i1"))
	if !strings.HasSuffix(got, "{nodesmith:instance i1}]") {
		t.Fatalf("single-instance tags = %s, want the instance tag last", got)
	}
}

func TestWatch(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st := func(s domain.State, ip string) domain.Status {
		return domain.Status{State: s, PrivateIP: ip, Zone: "z1"}
	}
	type round struct {
		at    time.Duration
		found map[string]domain.Status
		want  string // reported changes, "id=STATE" joined by space
	}
	for _, tc := range []struct {
		name     string
		rounds   []round
		wantDone bool
	}{
		{
			name: "pending then running reports each state once",
			rounds: []round{
				{at: 0, found: map[string]domain.Status{"a": st(domain.StatePending, "")}, want: "a=PENDING"},
				{at: time.Second, found: map[string]domain.Status{"a": st(domain.StatePending, "")}, want: ""},
				{at: 2 * time.Second, found: map[string]domain.Status{"a": st(domain.StateRunning, "10.0.0.1")}, want: "a=RUNNING"},
			},
			wantDone: true,
		},
		{
			name: "running without an address is still pending",
			rounds: []round{
				{at: 0, found: map[string]domain.Status{"a": st(domain.StateRunning, "")}, want: "a=PENDING"},
				{at: time.Second, found: map[string]domain.Status{"a": st(domain.StateRunning, "10.0.0.1")}, want: "a=RUNNING"},
			},
			wantDone: true,
		},
		{
			name: "absent shorter than the grace period is not reported",
			rounds: []round{
				{at: 0, found: nil, want: ""},
				{at: 9 * time.Second, found: nil, want: ""},
				{at: 10 * time.Second, found: map[string]domain.Status{"a": st(domain.StatePending, "")}, want: "a=PENDING"},
				{at: 15 * time.Second, found: nil, want: ""},
				{at: 24 * time.Second, found: nil, want: ""},
			},
		},
		{
			name: "absent for the grace period is not found",
			rounds: []round{
				{at: 0, found: nil, want: ""},
				{at: 10 * time.Second, found: nil, want: "a=NOT_FOUND"},
			},
			wantDone: true,
		},
		{
			name: "launch failure settles",
			rounds: []round{
				{at: 0, found: map[string]domain.Status{"a": st(domain.StateLaunchFailed, "")}, want: "a=LAUNCH_FAILED"},
			},
			wantDone: true,
		},
		{
			name: "unknown states are neither reported nor settled",
			rounds: []round{
				{at: 0, found: map[string]domain.Status{"a": st(domain.StateUnknown, "")}, want: ""},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := domain.NewWatch([]string{"a", "a", ""}, 10*time.Second)
			for i, r := range tc.rounds {
				var got []string
				for _, c := range w.Observe(t0.Add(r.at), r.found) {
					got = append(got, c.CloudID+"="+c.Status.State.String())
					if c.Status.CloudID != c.CloudID {
						t.Fatalf("change status has cloud id %q, want %q", c.Status.CloudID, c.CloudID)
					}
				}
				if s := strings.Join(got, " "); s != r.want {
					t.Fatalf("round %d: changes %q, want %q", i, s, r.want)
				}
			}
			if w.Done() != tc.wantDone {
				t.Fatalf("Done = %v, want %v", w.Done(), tc.wantDone)
			}
		})
	}
}

func TestWatchOnlyRoundsPendingVMs(t *testing.T) {
	w := domain.NewWatch([]string{"a", "b"}, time.Minute)
	w.Observe(time.Now(), map[string]domain.Status{"a": {State: domain.StateRunning, PrivateIP: "10.0.0.1"}, "b": {State: domain.StatePending}})
	if got := fmt.Sprint(w.Pending()); got != "[b]" {
		t.Fatalf("Pending = %s, want [b]", got)
	}
}

func TestMayTerminate(t *testing.T) {
	ours := map[string]string{domain.TagCluster: "c1"}
	theirs := map[string]string{domain.TagCluster: "c2"}
	untagged := map[string]string{"team": "infra"}
	for _, tc := range []struct {
		name    string
		tags    map[string]string
		cluster string
		adopted bool
		want    bool
	}{
		{"ours", ours, "c1", false, true},
		{"ours, adopted", ours, "c1", true, true},
		{"another cluster's", theirs, "c1", false, false},
		{"another cluster's, adopted", theirs, "c1", true, false},
		{"untagged", untagged, "c1", false, false},
		{"untagged, adopted", untagged, "c1", true, true},
		{"no cluster id", ours, "", false, false},
		{"no cluster id, adopted", untagged, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := domain.MayTerminate(tc.tags, tc.cluster, tc.adopted)
			if got != tc.want || (got == (why != "")) {
				t.Errorf("MayTerminate = %v %q, want %v (and a reason exactly when refused)", got, why, tc.want)
			}
		})
	}
}
