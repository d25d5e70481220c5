package domain

import "time"

// Options are the per-group autoscaling options CA asks for with
// NodeGroupGetOptions. CA replaces its own defaults with the answer as a
// whole, so every field must carry a usable value.
type Options struct {
	ScaleDownUtilizationThreshold    float64
	ScaleDownGPUUtilizationThreshold float64
	ZeroOrMaxNodeScaling             bool
	IgnoreDaemonSetsUtilization      bool
	ScaleDownUnneeded                time.Duration
	ScaleDownUnready                 time.Duration
	MaxNodeProvision                 time.Duration
}

// CADefaults are Cluster Autoscaler's own flag defaults
// (--scale-down-utilization-threshold and friends). They fill fields that
// neither the group nor CA's request provide.
var CADefaults = Options{
	ScaleDownUtilizationThreshold:    0.5,
	ScaleDownGPUUtilizationThreshold: 0.5,
	ScaleDownUnneeded:                10 * time.Minute,
	ScaleDownUnready:                 20 * time.Minute,
	MaxNodeProvision:                 15 * time.Minute,
}

// PartialOptions is a set of options where nil means "not given": CA's
// defaults as decoded from a request, or a group's overrides.
type PartialOptions struct {
	ScaleDownUtilizationThreshold    *float64
	ScaleDownGPUUtilizationThreshold *float64
	ZeroOrMaxNodeScaling             *bool
	IgnoreDaemonSetsUtilization      *bool
	ScaleDownUnneeded                *time.Duration
	ScaleDownUnready                 *time.Duration
	MaxNodeProvision                 *time.Duration
}

// IsEmpty reports whether no field is given.
func (p PartialOptions) IsEmpty() bool {
	return p.ScaleDownUtilizationThreshold == nil && p.ScaleDownGPUUtilizationThreshold == nil &&
		p.ZeroOrMaxNodeScaling == nil && p.IgnoreDaemonSetsUtilization == nil &&
		p.ScaleDownUnneeded == nil && p.ScaleDownUnready == nil && p.MaxNodeProvision == nil
}

// PickDuration chooses between the two wire generations of one duration
// field: the current google.protobuf.Duration and the legacy nanosecond
// value. The current one wins when it is positive; a positive legacy value
// wins over a zero current one (CA 1.34.2-1.34.5 send both, and a zero next
// to a real value is a conversion gap, not a choice); otherwise whichever
// was present. nil means neither was sent.
func PickDuration(current, legacy *time.Duration) *time.Duration {
	switch {
	case current != nil && *current > 0:
		return current
	case legacy != nil && *legacy > 0:
		return legacy
	case current != nil:
		return current
	}
	return legacy
}

// ResolveOptions merges a group's overrides onto CA's defaults, field by
// field: override, else default, else CADefaults. Negative durations count
// as absent. MaxNodeProvision is never zero: CA deletes every node that is
// not Ready within it, so a zero would delete each new node at the next
// loop; the first positive value wins, CADefaults last.
//
// ok is false when neither side gives anything: the caller answers
// Unimplemented and CA keeps its own defaults.
func ResolveOptions(defaults, overrides PartialOptions) (opts Options, ok bool) {
	if defaults.IsEmpty() && overrides.IsEmpty() {
		return Options{}, false
	}
	opts = CADefaults
	pickF := func(dst *float64, vals ...*float64) {
		for _, v := range vals {
			if v != nil {
				*dst = *v
				return
			}
		}
	}
	pickB := func(dst *bool, vals ...*bool) {
		for _, v := range vals {
			if v != nil {
				*dst = *v
				return
			}
		}
	}
	pickD := func(dst *time.Duration, positive bool, vals ...*time.Duration) {
		for _, v := range vals {
			if v == nil || *v < 0 || (positive && *v == 0) {
				continue
			}
			*dst = *v
			return
		}
	}
	pickF(&opts.ScaleDownUtilizationThreshold, overrides.ScaleDownUtilizationThreshold, defaults.ScaleDownUtilizationThreshold)
	pickF(&opts.ScaleDownGPUUtilizationThreshold, overrides.ScaleDownGPUUtilizationThreshold, defaults.ScaleDownGPUUtilizationThreshold)
	pickB(&opts.ZeroOrMaxNodeScaling, overrides.ZeroOrMaxNodeScaling, defaults.ZeroOrMaxNodeScaling)
	pickB(&opts.IgnoreDaemonSetsUtilization, overrides.IgnoreDaemonSetsUtilization, defaults.IgnoreDaemonSetsUtilization)
	pickD(&opts.ScaleDownUnneeded, false, overrides.ScaleDownUnneeded, defaults.ScaleDownUnneeded)
	pickD(&opts.ScaleDownUnready, false, overrides.ScaleDownUnready, defaults.ScaleDownUnready)
	pickD(&opts.MaxNodeProvision, true, overrides.MaxNodeProvision, defaults.MaxNodeProvision)
	return opts, true
}
