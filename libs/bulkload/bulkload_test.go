package bulkload

import (
	"runtime/debug"
	"testing"
)

func TestBeginLowersAndEndRestoresTheGrowthTarget(t *testing.T) {
	for _, before := range []int{100, 10, -1} {
		debug.SetGCPercent(before)
		end := Begin()
		during := debug.SetGCPercent(-2)
		debug.SetGCPercent(during)
		want := loadGCPercent
		if before >= 0 && before < loadGCPercent {
			want = before
		}
		if during != want {
			t.Errorf("GOGC %d: %d during the load, want %d", before, during, want)
		}
		end()
		if after := debug.SetGCPercent(100); after != before {
			t.Errorf("GOGC %d: %d after the load, want it restored", before, after)
		}
	}
}
