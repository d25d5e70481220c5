// Package bulkload keeps a service's memory near its live data while it
// loads a large state at start (issue 20).
package bulkload

import "runtime/debug"

// loadGCPercent is the collector's growth target (GOGC) during a bulk
// load: the heap may grow 25% over what is live before a collection,
// instead of the default 100%.
const loadGCPercent = 25

// Begin lowers the collector's growth target for a bulk load and returns
// the function that restores the previous one (an operator's GOGC
// included). A load of N records otherwise peaks at about twice its live
// heap: the collector sets each next goal from a heap that keeps growing
// with the records, and resident memory follows the peak. The cost is a
// few more collections during the load.
func Begin() (end func()) {
	old := debug.SetGCPercent(loadGCPercent)
	if old >= 0 && old < loadGCPercent {
		// Already tighter (GOGC set lower): keep it.
		debug.SetGCPercent(old)
	}
	return func() { debug.SetGCPercent(old) }
}
