// Package intern keeps the strings of records held in memory by the
// thousand compact: String shares one copy of a value that repeats across
// records (a group name, a history reason, a zone, an instance type), Pack
// puts a record's own strings into one allocation.
//
// Lifecycle's cache and the gateway's read model hold every instance
// record (issue 20: 100,000 of them); protobuf decoding gives each string
// field its own allocation, rounded up to a size class.
package intern

import (
	"strings"
	"time"
	"unique"
)

// String returns the canonical copy of s: every caller passing an equal
// string gets the same backing bytes, kept only while some value refers
// to them (package unique). Use it for values shared by many records; a
// value unique to one record only costs a map entry here.
func String(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// Pack copies the strings ps point to into one allocation and points each
// at its copy; a string equal to an earlier one of the same call shares
// its copy (a node name equal to the instance id). Empty strings are left
// alone. Use it for the strings one record owns, all replaced together
// when the record is: a copy kept alive by one field keeps the others.
func Pack(ps ...*string) {
	// Where each string goes in the block: [from, from+len); -1: empty.
	var buf [16]int
	from := buf[:0]
	if len(ps) > len(buf) {
		from = make([]int, 0, len(ps))
	}
	n := 0
	for i, p := range ps {
		at := -1
		if s := *p; s != "" {
			for j := range i {
				if from[j] >= 0 && *ps[j] == s {
					at = from[j]
					break
				}
			}
			if at < 0 {
				at = n
				n += len(s)
			}
		}
		from = append(from, at)
	}
	if n == 0 {
		return
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range ps {
		if from[i] == b.Len() && *p != "" {
			b.WriteString(*p)
		}
	}
	all := b.String()
	for i, p := range ps {
		if from[i] >= 0 {
			*p = all[from[i] : from[i]+len(*p)]
		}
	}
}

// Time is a point in time held in 8 bytes (Unix nanoseconds; 0 is the
// zero time) where a time.Time takes 24: for the times of every entry of
// every record (a five-step history costs 80 bytes less per instance).
type Time int64

// TimeOf returns t compacted; the zero time stays zero.
func TimeOf(t time.Time) Time {
	if t.IsZero() {
		return 0
	}
	return Time(t.UnixNano())
}

// Time returns the point in time, in UTC (the zero time for 0).
func (t Time) Time() time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}
