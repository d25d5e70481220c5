package cvmemu

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// Spot VMs: RunInstances with InstanceChargeType SPOTPAID and
// InstanceMarketOptions, a reclaim the test schedules (ScheduleReclaim),
// announced by the VM's metadata endpoint (Metadata) before the VM is
// terminated.

// Charge types and market options of the CVM API.
const (
	ChargeTypeSpot     = "SPOTPAID"
	ChargeTypeOnDemand = "POSTPAID_BY_HOUR"
	marketTypeSpot     = "spot"
	spotOneTime        = "one-time"
)

// Spot error codes (tencentcloud/cvm/v20170312/errors.go).
const (
	CodeSpotInsufficientPrice    = "InvalidParameterValue.InsufficientPrice"
	CodeSpotInsufficientOffering = "InvalidParameterValue.InsufficientOffering"
	CodeSpotUnsupportedType      = "UnsupportedOperation.NoInstanceTypeSupportSpot"
)

// terminationTimeLayout is how Tencent's metadata service writes a spot
// VM's termination time ("2018-08-18 12:05:33"), in the VM's OS time,
// which Tencent documents as UTC+8.
const terminationTimeLayout = "2006-01-02 15:04:05"

var chinaTime = time.FixedZone("CST", 8*3600)

// spotSpec is what makes a VM a spot VM, and its scheduled reclaim.
type spotSpec struct {
	maxPrice string
	// reclaimAt is the announced termination time (server clock);
	// reclaimDue when the timer terminates the VM (wall clock). Zero
	// until a reclaim is scheduled.
	reclaimAt, reclaimDue time.Time
	timer                 *time.Timer
}

func (s *spotSpec) clone() *spotSpec {
	if s == nil {
		return nil
	}
	return &spotSpec{maxPrice: s.maxPrice}
}

// spotOptions validates the spot parameters of a CVM RunInstances request
// as the real API does: SPOTPAID needs InstanceMarketOptions with
// MarketType "spot" and SpotOptions.MaxPrice (a positive price);
// SpotInstanceType may only be "one-time". InstanceMarketOptions with
// another charge type is refused. It returns nil for an on-demand launch.
func (e *Emulator) spotOptions(chargeType, instanceType string, mo *cvm.InstanceMarketOptionsRequest) (*spotSpec, *apiError) {
	if chargeType != ChargeTypeSpot {
		if mo != nil {
			return nil, errf(CodeInvalidParameterValue,
				"InstanceMarketOptions is only valid with InstanceChargeType `%s`, got `%s`.", ChargeTypeSpot, chargeType)
		}
		return nil, nil
	}
	if mo == nil {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `InstanceMarketOptions` (InstanceChargeType is SPOTPAID).")
	}
	if mt := deref(mo.MarketType); mt != marketTypeSpot {
		if mt == "" {
			return nil, errf(CodeMissingParameter, "The request is missing the required parameter `InstanceMarketOptions.MarketType`.")
		}
		return nil, errf(CodeInvalidParameterValue, "InstanceMarketOptions.MarketType `%s` is invalid; the only value is `spot`.", mt)
	}
	so := mo.SpotOptions
	if so == nil {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `InstanceMarketOptions.SpotOptions`.")
	}
	if st := so.SpotInstanceType; st != nil && *st != spotOneTime {
		return nil, errf(CodeInvalidParameterValue, "InstanceMarketOptions.SpotOptions.SpotInstanceType `%s` is invalid; the only value is `one-time`.", *st)
	}
	price := deref(so.MaxPrice)
	if price == "" {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `InstanceMarketOptions.SpotOptions.MaxPrice`.")
	}
	p, err := strconv.ParseFloat(price, 64)
	if err != nil || p <= 0 || strings.ContainsAny(price, "eE+-") {
		return nil, errf(CodeInvalidParameterValue, "InstanceMarketOptions.SpotOptions.MaxPrice `%s` is not a positive price.", price)
	}
	if it, ok := e.instanceTypeInfo(instanceType); ok {
		if it.NoSpot {
			return nil, errf(CodeSpotUnsupportedType, "The instance type %s does not support spot instances.", instanceType)
		}
		if it.SpotPrice > 0 && p < it.SpotPrice {
			return nil, errf(CodeSpotInsufficientPrice, "The bid price %s is below the current spot price %g of %s.", price, it.SpotPrice, instanceType)
		}
	}
	return &spotSpec{maxPrice: price}, nil
}

// ScheduleReclaim makes the cloud reclaim spot VM id after in: its metadata
// endpoint announces the termination time at once, and the VM is
// terminated when it comes (as the real cloud does, about two minutes after
// the notice). Scheduling again moves the time. It fails for an unknown,
// terminating or non-spot VM.
func (e *Emulator) ScheduleReclaim(id string, in time.Duration) (time.Time, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(id)
	switch {
	case v == nil:
		return time.Time{}, fmt.Errorf("cvmemu: VM %s not found", id)
	case v.spot == nil:
		return time.Time{}, fmt.Errorf("cvmemu: VM %s is not a spot VM", id)
	case v.state == StateTerminating:
		return time.Time{}, fmt.Errorf("cvmemu: VM %s is terminating", id)
	}
	in = max(in, 0)
	v.spot.reclaimAt = e.now().Add(in).Truncate(time.Second)
	v.spot.reclaimDue = time.Now().Add(in)
	e.scheduleReclaimLocked(v)
	e.changedLocked()
	e.log.Info("spot reclaim scheduled", "vm", id, "at", v.spot.reclaimAt)
	return v.spot.reclaimAt, nil
}

// scheduleReclaimLocked arms the timer of v's scheduled reclaim.
func (e *Emulator) scheduleReclaimLocked(v *vm) {
	e.cancelReclaimLocked(v)
	sp := v.spot
	due := sp.reclaimDue
	e.wg.Add(1)
	sp.timer = time.AfterFunc(max(0, time.Until(due)), func() {
		defer e.wg.Done()
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed || v.spot != sp || !sp.reclaimDue.Equal(due) || v.state == StateTerminating {
			return
		}
		sp.timer = nil
		if e.findLocked(v.id) != v {
			return
		}
		e.counters.reclaimed++
		e.terminateLocked(v, "SpotReclaim", "")
		e.log.Info("spot VM reclaimed", "vm", v.id)
	})
}

func (e *Emulator) cancelReclaimLocked(v *vm) {
	if v.spot == nil || v.spot.timer == nil {
		return
	}
	if v.spot.timer.Stop() {
		e.wg.Done()
	}
	v.spot.timer = nil
}

// Metadata is the instance metadata service of every VM on one handler,
// addressed by a path prefix per VM: GET /<instance-id>/latest/meta-data/...
// answers as http://metadata.tencentyun.com/latest/meta-data/... does
// inside that VM (a node agent gets --metadata-url
// http://<addr>/<instance-id>). Served: instance-id, placement/zone,
// placement/region, instance/instance-type, and spot/termination-time (404
// until a reclaim is scheduled, then "2006-01-02 15:04:05" in UTC+8). For
// ECS VMs the Alibaba paths: instance-id, zone-id, region-id,
// instance/instance-type and instance/spot/termination-time (ISO 8601 UTC,
// "2006-01-02T15:04:05Z"). Unknown VMs and paths answer 404.
func (e *Emulator) Metadata() http.Handler {
	return http.HandlerFunc(e.serveMetadata)
}

func (e *Emulator) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	id, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	key, isMeta := strings.CutPrefix(rest, "latest/meta-data/")
	if !ok || !isMeta {
		http.NotFound(w, r)
		return
	}
	e.mu.Lock()
	v := e.findLocked(id)
	var val string
	found := false
	if v != nil {
		val, found = metadataValue(v, key)
	}
	e.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(val))
}

// metadataValue is the value of one metadata key of v.
func metadataValue(v *vm, key string) (string, bool) {
	reclaim := v.spot != nil && !v.spot.reclaimAt.IsZero()
	if v.api == apiECS {
		switch key {
		case "instance-id":
			return v.id, true
		case "zone-id":
			return v.zone, true
		case "region-id":
			return v.region, true
		case "instance/instance-type":
			return v.instanceType, true
		case "instance/spot/termination-time":
			if reclaim {
				return v.spot.reclaimAt.UTC().Format("2006-01-02T15:04:05Z"), true
			}
		}
		return "", false
	}
	switch key {
	case "instance-id":
		return v.id, true
	case "placement/zone":
		return v.zone, true
	case "placement/region":
		return v.region, true
	case "instance/instance-type":
		return v.instanceType, true
	case "spot/termination-time":
		if reclaim {
			return v.spot.reclaimAt.In(chinaTime).Format(terminationTimeLayout), true
		}
	}
	return "", false
}
