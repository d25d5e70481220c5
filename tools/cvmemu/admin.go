package cvmemu

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nodesmith/nodesmith/tools/simvm"
)

// invalidAction is the counter key for requests naming no known action.
const invalidAction = "(invalid)"

type counters struct {
	created, terminated, launchFailed int
	reclaimed                         int // spot VMs the cloud reclaimed
	createdECS                        int // of created
	createdWithoutToken, tokensReused int
	requests, errors, throttled       map[string]int
	errorCodes                        map[string]int
}

func newCounters() counters {
	return counters{
		requests:   map[string]int{},
		errors:     map[string]int{},
		throttled:  map[string]int{},
		errorCodes: map[string]int{},
	}
}

func (e *Emulator) countRequest(action string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counters.requests[action]++
}

func (e *Emulator) countError(action, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counters.errors[action]++
	if len(e.counters.errorCodes) < 1000 || e.counters.errorCodes[code] > 0 { // injected codes are caller-chosen
		e.counters.errorCodes[code]++
	}
}

// Stats is a snapshot of the emulator's counters, for duplicate/orphan and
// client-behaviour checks in tests.
type Stats struct {
	// VMsCreated counts every VM ever created, by either API;
	// VMsCreatedECS those the ECS API created.
	VMsCreated, VMsCreatedECS int
	// VMsLive counts VMs still listed (any state, TERMINATING included).
	VMsLive int
	// VMsTerminated counts VMs whose termination was accepted.
	VMsTerminated int
	// VMsLaunchFailed counts VMs that ended LAUNCH_FAILED.
	VMsLaunchFailed int
	// VMsReclaimed counts spot VMs terminated by a scheduled reclaim.
	VMsReclaimed int
	// VMsCreatedWithoutToken counts VMs created by RunInstances calls
	// without a ClientToken (such calls cannot be retried safely).
	VMsCreatedWithoutToken int
	// RunInstancesCalls counts RunInstances requests (any outcome).
	RunInstancesCalls int
	// ClientTokenCreations maps "account/token" (CVM) or
	// "account/ecs:token" (ECS: each API has its own tokens) to how often
	// the token created VMs; ClientTokenReplays to how often a retry was answered
	// from the record. Only remembered tokens (Config.MaxClientTokens) are
	// listed.
	ClientTokenCreations map[string]int
	ClientTokenReplays   map[string]int
	// TokensCreatedTwice counts creations by a token that had created VMs
	// before (only possible after it was forgotten): a client bug.
	TokensCreatedTwice int
	// Requests, Errors and Throttled are per action. Errors include every
	// error answered (auth failures, throttling, injected faults).
	Requests, Errors, Throttled map[string]int
	// ErrorCodes counts answered errors by code.
	ErrorCodes map[string]int
	// PeakRequestsPerSecond is, per action, the largest number of requests
	// one account made within any one-second sliding window.
	PeakRequestsPerSecond map[string]int
}

// Stats returns a snapshot of the counters.
func (e *Emulator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{
		VMsCreated:             e.counters.created,
		VMsCreatedECS:          e.counters.createdECS,
		VMsTerminated:          e.counters.terminated,
		VMsLaunchFailed:        e.counters.launchFailed,
		VMsReclaimed:           e.counters.reclaimed,
		VMsCreatedWithoutToken: e.counters.createdWithoutToken,
		RunInstancesCalls:      e.counters.requests[ActionRunInstances],
		ClientTokenCreations:   map[string]int{},
		ClientTokenReplays:     map[string]int{},
		TokensCreatedTwice:     e.counters.tokensReused,
		Requests:               maps.Clone(e.counters.requests),
		Errors:                 maps.Clone(e.counters.errors),
		Throttled:              maps.Clone(e.counters.throttled),
		ErrorCodes:             maps.Clone(e.counters.errorCodes),
		PeakRequestsPerSecond:  map[string]int{},
	}
	for name, a := range e.accounts {
		s.VMsLive += len(a.vms)
		for tok, rec := range a.tokens {
			s.ClientTokenCreations[tok.statsKey(name)] = rec.creations
			if rec.replays > 0 {
				s.ClientTokenReplays[tok.statsKey(name)] = rec.replays
			}
		}
	}
	for k, w := range e.windows {
		s.PeakRequestsPerSecond[k.action] = max(s.PeakRequestsPerSecond[k.action], w.peak)
	}
	return s
}

// VMInfo describes a VM for tests and launchers.
type VMInfo struct {
	// API is the front end that created the VM: "cvm" or "ecs".
	API                       string
	ID, Account, Region, Zone string
	InstanceType, ImageID     string
	Name                      string
	// State is the core's state, the same for both APIs (StateRunning,
	// ...); APIStatus is how the VM's own API reports it (CVM RUNNING,
	// ECS Running, Stopping, ...).
	State, APIStatus string
	PrivateIP        string // empty until RUNNING
	SSHAddr          string // host:port of the VM's SSH server, if any
	Sandbox          string // the VM's sandbox directory, if it has a guest
	Tags             map[string]string
	ClientToken      string
	CreatedAt        time.Time
	// NodeName and ProviderID are what the VM reported joining as.
	NodeName, ProviderID string
	// Spot is set for spot VMs; TerminationTime once a reclaim is
	// scheduled (the time the metadata endpoint announces).
	Spot            bool
	TerminationTime time.Time
	// LatestOperationErrorMsg is why a launch failed.
	LatestOperationErrorMsg string
	// CPU and MemoryMiB are the VM's shape, as its DescribeInstances
	// reports it (vmShapeLocked).
	CPU, MemoryMiB int64
}

func (e *Emulator) infoLocked(v *vm) VMInfo {
	info := VMInfo{
		API: "cvm", ID: v.id, Account: v.account, Region: v.region, Zone: v.zone,
		InstanceType: v.instanceType, ImageID: v.imageID, Name: v.name, State: v.state,
		PrivateIP: v.ip, Tags: map[string]string{}, ClientToken: v.clientToken, CreatedAt: v.created,
		NodeName: v.nodeName, ProviderID: v.providerID, LatestOperationErrorMsg: v.latestOpErr,
	}
	info.CPU, info.MemoryMiB = e.vmShapeLocked(v)
	if v.spot != nil {
		info.Spot, info.TerminationTime = true, v.spot.reclaimAt
	}
	info.APIStatus = v.state
	if v.api == apiECS {
		info.API = "ecs"
		info.APIStatus = ecsStatusOf(v)
	}
	if v.guest != nil {
		info.SSHAddr = v.guest.Addr()
		info.Sandbox = v.guest.Sandbox()
	}
	for _, t := range v.tags {
		info.Tags[t.Key] = t.Value
	}
	return info
}

// ListVMs returns every listed VM of every account, oldest first.
func (e *Emulator) ListVMs() []VMInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var vms []*vm
	for _, a := range e.accounts {
		for _, v := range a.vms {
			vms = append(vms, v)
		}
	}
	slices.SortFunc(vms, func(a, b *vm) int { return cmpSeq(a.seq, b.seq) })
	out := make([]VMInfo, 0, len(vms))
	for _, v := range vms {
		out = append(out, e.infoLocked(v))
	}
	return out
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// VM returns one VM by ID.
func (e *Emulator) VM(id string) (VMInfo, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(id)
	if v == nil {
		return VMInfo{}, false
	}
	return e.infoLocked(v), true
}

// Guest returns the simulated machine behind a RUNNING VM, if it has one.
func (e *Emulator) Guest(id string) (*simvm.VM, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(id)
	if v == nil || v.guest == nil {
		return nil, false
	}
	return v.guest, true
}

// ForceTerminate terminates a VM outside the API, as when the cloud reclaims
// a spot instance or a host dies.
func (e *Emulator) ForceTerminate(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(id)
	if v == nil {
		return fmt.Errorf("cvmemu: VM %s not found", id)
	}
	if v.state == StateTerminating {
		return nil
	}
	e.terminateLocked(v, ActionTerminateInstances, "")
	return nil
}

// SetLaunchPolicy changes the fate of VMs launched from now on.
func (e *Emulator) SetLaunchPolicy(p LaunchPolicy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.launch = p
}

// SetQuota changes the instance quotas.
func (e *Emulator) SetQuota(q Quota) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.quota = q
}

// SetStockOuts replaces the stock-out rules (nil: everything in stock).
func (e *Emulator) SetStockOuts(s []StockOut) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stockOuts = slices.Clone(s)
}

// StockOuts returns the stock-out rules in force.
func (e *Emulator) StockOuts() []StockOut {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.stockOuts)
}

// SetSoldOut marks a zone and instance type sold out ("" for either
// matches all), replacing any rule for exactly that zone and type:
// so.Code, so.ChargeType and so.AtLaunch say how (see StockOut).
func (e *Emulator) SetSoldOut(so StockOut) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stockOuts = slices.DeleteFunc(e.stockOuts, func(x StockOut) bool {
		return x.Zone == so.Zone && x.InstanceType == so.InstanceType
	})
	e.stockOuts = append(e.stockOuts, so)
}

// ClearSoldOut removes the rules for exactly zone and instanceType, and
// reports whether there was one.
func (e *Emulator) ClearSoldOut(zone, instanceType string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.stockOuts)
	e.stockOuts = slices.DeleteFunc(e.stockOuts, func(x StockOut) bool {
		return x.Zone == zone && x.InstanceType == instanceType
	})
	return len(e.stockOuts) != n
}

// API names a front end of the emulator, to scope rate limits and faults
// to one cloud's API: its actions share names with the other's
// (RunInstances, DescribeInstances), but a client of one cloud only knows
// that cloud's error codes.
type API string

const (
	// APIAny scopes a setting to every front end: what the methods
	// without an API argument do.
	APIAny API = ""
	// APICVM is the Tencent Cloud CVM API (the Emulator's ServeHTTP).
	APICVM API = "cvm"
	// APIECS is the Alibaba Cloud ECS API (Emulator.ECS).
	APIECS API = "ecs"
)

func (a API) valid() bool { return a == APIAny || a == APICVM || a == APIECS }

// apiOf is the scope of a call's front end.
func apiOf(c *call) API {
	if c.api == apiECS {
		return APIECS
	}
	return APICVM
}

// scopeKey is an action of one front end (or of every one: APIAny).
type scopeKey struct {
	api    API
	action string
}

// SetRateLimit sets the requests/second limit of an action on every front
// end (SetRateLimitFor with APIAny); 0 removes it.
func (e *Emulator) SetRateLimit(action string, perSecond float64) {
	e.SetRateLimitFor(APIAny, action, perSecond)
}

// SetRateLimitFor sets the requests/second limit of an action of one front
// end (per account, as all rate limits); 0 removes it. Actions are named
// as on the wire. A limit set for the call's API wins over one set for
// APIAny; a throttled call gets its API's code (RequestLimitExceeded,
// Throttling.User). It panics on an unknown API (a programming error).
func (e *Emulator) SetRateLimitFor(api API, action string, perSecond float64) {
	mustAPI(api)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := scopeKey{api, action}
	if perSecond <= 0 {
		delete(e.rateLimits, k)
		return
	}
	e.rateLimits[k] = perSecond
}

// rateLimitLocked is the limit that applies to a call, 0 for none.
func (e *Emulator) rateLimitLocked(c *call) float64 {
	if r, ok := e.rateLimits[scopeKey{apiOf(c), c.action}]; ok {
		return r
	}
	return e.rateLimits[scopeKey{APIAny, c.action}]
}

func mustAPI(api API) {
	if !api.valid() {
		panic(fmt.Sprintf("cvmemu: unknown API %q (want %q, %q or %q)", api, APIAny, APICVM, APIECS))
	}
}

// SetBootDelay changes the boot delay for VMs launched from now on.
func (e *Emulator) SetBootDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bootDelay = max(d, 0)
}

// SetTerminateDelay changes how long VMs terminated from now on stay listed.
func (e *Emulator) SetTerminateDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.terminateDelay = max(d, 0)
}

// SetFaults sets the standing faults of an action on every front end
// (SetFaultsFor with APIAny; zero value: none).
func (e *Emulator) SetFaults(action string, f ActionFaults) {
	e.SetFaultsFor(APIAny, action, f)
}

// SetFaultsFor sets the standing faults of an action of one front end
// (zero value: none). Faults set for the call's API win over those set for
// APIAny. ErrorCode is answered as given: give each API its own cloud's
// codes.
func (e *Emulator) SetFaultsFor(api API, action string, f ActionFaults) {
	mustAPI(api)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := scopeKey{api, action}
	if f == (ActionFaults{}) {
		delete(e.faults, k)
		return
	}
	e.faults[k] = f
}

// InjectFaults queues one-shot faults for the next requests of the action
// on any front end (InjectFaultsFor with APIAny).
func (e *Emulator) InjectFaults(action string, faults ...Fault) {
	e.InjectFaultsFor(APIAny, action, faults...)
}

// InjectFaultsFor queues one-shot faults: the next len(faults) requests of
// the action on that front end (that pass authentication and rate
// limiting) get them in order. A call takes from its API's queue first,
// then from APIAny's.
func (e *Emulator) InjectFaultsFor(api API, action string, faults ...Fault) {
	mustAPI(api)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := scopeKey{api, action}
	e.injected[k] = append(e.injected[k], faults...)
}

// ClearFaults removes all standing and queued faults of every front end.
func (e *Emulator) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.faults)
	clear(e.injected)
}
