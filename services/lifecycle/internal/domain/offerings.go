package domain

import (
	"fmt"
	"iter"
	"sort"
	"strconv"
	"strings"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// Offerings (issue 16): a template may list ordered alternatives of where
// to create VMs. Lifecycle orders them for each create batch and sends
// them, resolved, in the create command; the cloud adapter tries them in
// that order, falling back on a stock-out.

// OfferingOrder is the order in which a new batch tries a template's
// offerings, as indices into offerings: as written for the priority
// strategy (and ""), and for the balanced strategy a stable sort by the
// number of the group's live instances in the offering's zone (liveByZone),
// fewest first, ties in written order. Nil without offerings.
func OfferingOrder(strategy string, offerings []cloudspec.Offering, liveByZone map[string]int) []int {
	if len(offerings) == 0 {
		return nil
	}
	order := make([]int, len(offerings))
	for i := range order {
		order[i] = i
	}
	if strategy == cloudspec.StrategyBalanced {
		sort.SliceStable(order, func(a, b int) bool {
			return liveByZone[offerings[order[a]].Zone] < liveByZone[offerings[order[b]].Zone]
		})
	}
	return order
}

// LiveByZone counts the instances that hold (or will hold) a VM of the
// group, per zone they landed in: neither released nor Deleted, with a
// zone recorded. It reads the records in place (a group's records are
// not copied for a count).
func LiveByZone(insts iter.Seq[*Instance]) map[string]int {
	out := map[string]int{}
	for in := range insts {
		if in.Released || in.State == StateDeleted || in.Zone == "" {
			continue
		}
		out[in.Zone]++
	}
	return out
}

// BatchOfferings is what a create command of the template carries: its
// offerings in order, each with its capacity type resolved
// (cloudspec.Offering.WithCapacity), so the cloud adapter names marks and
// metrics straight from the command. An order that is not a permutation
// of the template's offerings (the template changed since the batch was
// formed) is replaced by the written order.
func BatchOfferings(t InstanceTemplate, order []int) []cloudspec.Offering {
	if len(t.Offerings) == 0 {
		return nil
	}
	if !isPermutation(order, len(t.Offerings)) {
		order = OfferingOrder(cloudspec.StrategyPriority, t.Offerings, nil)
	}
	out := make([]cloudspec.Offering, len(order))
	for i, j := range order {
		out[i] = t.Offerings[j].WithCapacity(t.CapacityType)
	}
	return out
}

func isPermutation(order []int, n int) bool {
	if len(order) != n {
		return false
	}
	seen := make([]bool, n)
	for _, j := range order {
		if j < 0 || j >= n || seen[j] {
			return false
		}
		seen[j] = true
	}
	return true
}

// batchOrderSep separates a batch id from the offering order it carries
// (batch ids are "b-" and IDAlphabet characters: never "--").
const batchOrderSep = "--"

// WithOfferingOrder returns a batch id that carries the batch's offering
// order (one base-36 digit per offering; cloudspec.MaxOfferings is below
// 36), so every publication of the batch's create command, after a
// restart too, sends the offerings in the order the batch was formed with:
// the cloud adapter derives a ClientToken per offering, and another order
// could create the VMs of a lost result again on another offering. The
// written order needs no suffix.
func WithOfferingOrder(batchID string, order []int) string {
	if isPermutation(order, len(order)) {
		identity := true
		for i, j := range order {
			identity = identity && i == j
		}
		if identity {
			return batchID
		}
	}
	var b strings.Builder
	b.WriteString(batchID)
	b.WriteString(batchOrderSep)
	for _, j := range order {
		b.WriteString(strconv.FormatInt(int64(j), 36))
	}
	return b.String()
}

// OfferingOrderOf reads the offering order a batch id carries
// (WithOfferingOrder); nil when it carries none.
func OfferingOrderOf(batchID string) []int {
	k := strings.LastIndex(batchID, batchOrderSep)
	if k < 0 {
		return nil
	}
	digits := batchID[k+len(batchOrderSep):]
	if digits == "" {
		return nil
	}
	order := make([]int, 0, len(digits))
	for _, c := range digits {
		v, err := strconv.ParseInt(string(c), 36, 8)
		if err != nil {
			return nil
		}
		order = append(order, int(v))
	}
	return order
}

// RelaunchNote is the history reason of an instance whose VM failed to
// launch for want of capacity and was created again on another offering.
func RelaunchNote(o cloudspec.Offering, oldCloudID, newCloudID string) string {
	return fmt.Sprintf("relaunched in %s/%s: VM %s replaced by %s", o.Zone, o.InstanceType, oldCloudID, newCloudID)
}
