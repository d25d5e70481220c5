package domain

import (
	"math"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// PriceHours is the billed duration between start and end in hours. Both
// must be set and end must not precede start.
func PriceHours(start, end time.Time) (float64, error) {
	if start.IsZero() || end.IsZero() {
		return 0, Errorf(contract.CodeInvalidArgument, "start and end times are required")
	}
	if end.Before(start) {
		return 0, Errorf(contract.CodeInvalidArgument, "end time %s is before start time %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	return end.Sub(start).Hours(), nil
}

// NodePrice is the price of running one VM of a template with hourlyPrice
// for the period. A zero price means "not configured": Unimplemented, which
// CA's pricing expander understands.
func NodePrice(hourlyPrice float64, start, end time.Time) (float64, error) {
	if !(hourlyPrice > 0) || math.IsInf(hourlyPrice, 0) {
		return 0, Errorf(contract.CodeUnimplemented, "no hourly price configured")
	}
	h, err := PriceHours(start, end)
	if err != nil {
		return 0, err
	}
	return hourlyPrice * h, nil
}

// CPUOffer is one group's price per CPU: what a pod would cost per CPU-hour
// on a perfectly packed node of that group.
type CPUOffer struct {
	HourlyPrice float64
	// MilliCPU is the node's CPU capacity in millicores.
	MilliCPU int64
}

// PodPrice prices a pod by its CPU requests at the cheapest CPU-hour any
// priced group offers ("a perfectly matching machine"). It is
// Unimplemented when no group has both a price and a CPU capacity.
func PodPrice(offers []CPUOffer, podMilliCPU int64, start, end time.Time) (float64, error) {
	best := math.Inf(1)
	for _, o := range offers {
		if o.HourlyPrice > 0 && !math.IsInf(o.HourlyPrice, 0) && o.MilliCPU > 0 {
			best = math.Min(best, o.HourlyPrice/float64(o.MilliCPU))
		}
	}
	if math.IsInf(best, 1) {
		return 0, Errorf(contract.CodeUnimplemented, "no node group has both an hourly price and a CPU capacity")
	}
	if podMilliCPU < 0 {
		return 0, Errorf(contract.CodeInvalidArgument, "negative CPU request")
	}
	h, err := PriceHours(start, end)
	if err != nil {
		return 0, err
	}
	return best * float64(podMilliCPU) * h, nil
}
