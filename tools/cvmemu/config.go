package cvmemu

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"
)

// API identity the emulator serves.
const (
	Service    = "cvm"
	APIVersion = "2017-03-12"
)

// Actions the emulator implements.
const (
	ActionRunInstances            = "RunInstances"
	ActionDescribeInstances       = "DescribeInstances"
	ActionDescribeInstancesStatus = "DescribeInstancesStatus"
	ActionTerminateInstances      = "TerminateInstances"
)

// Actions lists every implemented action.
var Actions = []string{ActionRunInstances, ActionDescribeInstances, ActionDescribeInstancesStatus, ActionTerminateInstances, ActionAttachResourcesTag, ActionDescribeZoneInstanceConfigInfos}

// Instance states, as in the real API's InstanceState field.
const (
	StatePending      = "PENDING"
	StateLaunchFailed = "LAUNCH_FAILED"
	StateRunning      = "RUNNING"
	StateTerminating  = "TERMINATING"
)

// Config configures an Emulator. Start from DefaultConfig and add
// Credentials; zero values of the other fields are meaningful (0 delays mean
// "immediately", 0 limits mean "unlimited").
type Config struct {
	// Credentials maps SecretId to SecretKey. Requests signed with any
	// other SecretId answer AuthFailure.SecretIdNotFound.
	Credentials map[string]string
	// Accounts maps SecretId to an account name. Everything that is per
	// account (VMs, ClientTokens, quotas, rate limits) is keyed by it, so
	// several keys can share an account. Default: each SecretId is its
	// own account.
	Accounts map[string]string
	// Regions lists accepted X-TC-Region values; empty accepts any.
	Regions []string
	// Zones lists accepted Placement.Zone (CVM) and ZoneId (ECS) values;
	// empty accepts any zone named "<region>-<suffix>" for the request's
	// region.
	Zones []string
	// VSwitchZones maps ECS VSwitchIds to their zones, for RunInstances
	// calls that give a VSwitchId without a ZoneId (as the real API
	// allows). Calls with a ZoneId need no entry.
	VSwitchZones map[string]string

	// BootDelay is how long new VMs stay PENDING before RUNNING.
	BootDelay time.Duration
	// TerminateDelay is how long terminated VMs stay listed as TERMINATING
	// before they vanish from DescribeInstances.
	TerminateDelay time.Duration
	// Launch decides which launches fail or never finish.
	Launch LaunchPolicy
	// Quota bounds live instances per account.
	Quota Quota
	// StockOuts make RunInstances answer "sold out" for matching requests.
	StockOuts []StockOut
	// InstanceTypes is the instance type table (shapes, spot support);
	// empty means DefaultInstanceTypes. Launches of other types still
	// work; DescribeZoneInstanceConfigInfos lists the table's CVM rows,
	// DescribeInstanceTypes and DescribeAvailableResource its "ecs.*"
	// rows.
	InstanceTypes []InstanceType
	// RateLimits is requests/second per account and action (token bucket
	// with a burst of one second's worth), on every API (each API's calls
	// have their own bucket; SetRateLimitFor scopes a limit to one API);
	// absent or 0 means unlimited.
	RateLimits map[string]float64
	// MaxClockSkew is how far X-TC-Timestamp may be from the server clock.
	MaxClockSkew time.Duration
	// MaxInstanceCount bounds RunInstances.InstanceCount.
	MaxInstanceCount int
	// MaxClientTokens bounds remembered ClientTokens per account; the
	// oldest are forgotten first.
	MaxClientTokens int

	// IPBase is the first private IP handed out. Addresses are allocated
	// upward from it, skipping .0 and .255, and must stay inside
	// 127.0.0.0/8 so an SSH server can bind them on the local machine.
	IPBase string
	// GuestEnv returns extra environment for commands run on a VM (see
	// simvm.VMSpec.Env). Default: DefaultGuestEnv.
	GuestEnv func(VMInfo) map[string]string

	// StateFile, if set, makes the VMs survive a restart of the process.
	// New loads the file: a missing file means "start empty", an
	// unreadable or corrupt one (or one of another format version) is an
	// error, never silently ignored. Changes are saved atomically at most
	// every 200ms, and on Close. Restored VMs carry on: PENDING ones boot
	// when their boot delay ends (counted from their launch), TERMINATING
	// ones vanish on schedule, RUNNING ones keep their private IP and get
	// their SSH server back; ClientToken retries and Stats' VM counters
	// continue. For the VMs' sandboxes and host keys to survive as well,
	// give WithSSH a simvm.Factory with Config.Persistent, the same Root
	// and a fixed Port. Runtime settings (Set* methods, faults) and request
	// counters are not saved.
	StateFile string

	// Seed makes random decisions (failure rates) reproducible; 0 seeds
	// from the clock.
	Seed uint64
	// Now is the server clock, used to check request timestamps and stamp
	// CreatedTime. Default time.Now. Tests skew it to provoke
	// AuthFailure.SignatureExpire.
	Now func() time.Time
	// Logger receives request and lifecycle logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the documented defaults: 2s boot, 500ms terminate,
// rate limits RunInstances 10/s, TerminateInstances 10/s, DescribeInstances
// 20/s (DescribeInstancesStatus shares the 20/s default; for ECS
// DeleteInstances and TagResources 10/s, DescribeInstanceStatus 20/s), 5
// minute clock skew, at most 100 instances per RunInstances call.
func DefaultConfig() Config {
	return Config{
		BootDelay:      2 * time.Second,
		TerminateDelay: 500 * time.Millisecond,
		RateLimits: map[string]float64{
			ActionRunInstances:            10,
			ActionTerminateInstances:      10,
			ActionDescribeInstances:       20,
			ActionDescribeInstancesStatus: 20,
			ActionDeleteInstances:         10,
			ActionDescribeInstanceStatus:  20,
			ActionTagResources:            10,
		},
		MaxClockSkew:     5 * time.Minute,
		MaxInstanceCount: 100,
		MaxClientTokens:  100_000,
		IPBase:           "127.77.0.1",
	}
}

// DefaultGuestEnv is the environment given to VM commands by default:
// INSTANCE_ID, REGION, ZONE, PRIVATE_IP, NODE_NAME (the instance ID) and
// PROVIDER_ID (ProviderID of the VM), the variables a join hook uses, for
// commands run without a hook runner to set them. The kubeadm shim reads
// neither, like the real kubeadm: without --node-name the node is named
// after the hostname (the instance ID), and the kubelet gets a providerID
// only from KUBELET_EXTRA_ARGS in /etc/default/kubelet or a
// JoinConfiguration (see simvm.KubeletDefaultsFile); without one its Node
// has none.
func DefaultGuestEnv(vm VMInfo) map[string]string {
	provider := ProviderID(vm.Zone, vm.ID)
	if vm.API == "ecs" {
		provider = ECSProviderID(vm.Region, vm.ID)
	}
	return map[string]string{
		"INSTANCE_ID": vm.ID,
		"REGION":      vm.Region,
		"ZONE":        vm.Zone,
		"PRIVATE_IP":  vm.PrivateIP,
		"NODE_NAME":   vm.ID,
		"PROVIDER_ID": provider,
	}
}

// ECSProviderID renders the Kubernetes provider ID of an ECS VM the way
// the cluster autoscaler's alicloud provider writes it:
// "<region>.<instance-id>".
func ECSProviderID(region, instanceID string) string {
	return region + "." + instanceID
}

// ProviderID renders the Kubernetes provider ID used by default for a VM,
// in the Tencent Cloud style "qcloud:///<zone>/<instance-id>".
func ProviderID(zone, instanceID string) string {
	return fmt.Sprintf("qcloud:///%s/%s", zone, instanceID)
}

// LaunchPolicy decides the fate of each launched VM. Matching rules are
// checked before the random rates. The decision is taken at RunInstances
// time and applied when the boot delay ends.
type LaunchPolicy struct {
	// FailureRate is the fraction (0..1) of launches ending LAUNCH_FAILED.
	FailureRate float64
	// HangRate is the fraction (0..1) of launches that never boot: the VM
	// stays PENDING until terminated.
	HangRate float64
	// FailZones and FailInstanceTypes always end LAUNCH_FAILED.
	FailZones, FailInstanceTypes []string
	// HangZones and HangInstanceTypes never boot.
	HangZones, HangInstanceTypes []string
	// NeverBoot makes every launch hang.
	NeverBoot bool
}

// Quota bounds live instances (every listed VM, whatever its state, counts,
// as it does in the real service until it is gone). 0 means unlimited.
type Quota struct {
	MaxInstances        int // per account
	MaxInstancesPerZone int // per account and zone
}

// StockOut makes RunInstances fail for matching requests, as when a zone has
// no capacity left for an instance type.
type StockOut struct {
	Zone         string `json:"zone,omitempty"`         // "" matches every zone
	InstanceType string `json:"instanceType,omitempty"` // "" matches every instance type
	// ChargeType limits the rule to one charge type (CVM's SPOTPAID or
	// POSTPAID_BY_HOUR, ECS's are matched as the core sees them); ""
	// matches every one.
	ChargeType string `json:"chargeType,omitempty"`
	// Code is the error answered; default
	// ResourceInsufficient.SpecifiedInstanceType for CVM (the real ones
	// for a zone/type stock-out: ResourceInsufficient.ZoneSoldOutForSpecifiedInstance,
	// ResourcesSoldOut.SpecifiedInstanceType,
	// ResourceInsufficient.AvailabilityZoneSoldOut, ResourcesSoldOut.AvailableZone,
	// and for spot InvalidParameterValue.InsufficientOffering),
	// OperationDenied.NoStock for ECS (InvalidResourceType.NotSupported is
	// another real one, for a type the zone does not offer at all).
	Code string `json:"code,omitempty"`
	// AtLaunch makes the stock-out strike after RunInstances accepted the
	// launch, as when the catalogue still showed stock: the VMs end
	// LAUNCH_FAILED with LatestOperationState FAILED and a
	// LatestOperationErrorMsg "<Code>: The specified instance type ... is
	// sold out in zone ...". DescribeZoneInstanceConfigInfos keeps
	// showing such a zone and type as SELL.
	AtLaunch bool `json:"atLaunch,omitempty"`
}

// ActionFaults are standing faults for one action.
type ActionFaults struct {
	// Latency is added before the request is handled.
	Latency time.Duration
	// ErrorRate is the fraction (0..1) of requests answered with ErrorCode.
	ErrorRate float64
	// ErrorCode defaults to InternalError.
	ErrorCode string
	// AfterCommit answers the error only after the action took effect:
	// the nastiest case for a client (it must retry idempotently).
	AfterCommit bool
}

// Fault is a one-shot fault for the next request of an action.
type Fault struct {
	// Code and Message are answered; Code defaults to InternalError.
	Code, Message string
	// AfterCommit answers the error after the action took effect.
	AfterCommit bool
	// DropConnection closes the connection without any answer (a network
	// failure from the client's point of view). It also honours AfterCommit.
	DropConnection bool
	// HTTPStatus is the HTTP status the ECS front end answers with; 0
	// derives it from Code as the real API does (InternalError 500,
	// ServiceUnavailable 503, Throttling* 400, ...). CVM answers 200.
	HTTPStatus int
}

func (c *Config) validate() error {
	if len(c.Credentials) == 0 {
		return fmt.Errorf("cvmemu: no Credentials configured")
	}
	for id, key := range c.Credentials {
		if id == "" || key == "" {
			return fmt.Errorf("cvmemu: empty SecretId or SecretKey in Credentials")
		}
	}
	if c.BootDelay < 0 || c.TerminateDelay < 0 {
		return fmt.Errorf("cvmemu: negative BootDelay or TerminateDelay")
	}
	if c.MaxClockSkew <= 0 {
		return fmt.Errorf("cvmemu: MaxClockSkew must be positive (DefaultConfig uses 5m)")
	}
	if c.MaxInstanceCount <= 0 {
		return fmt.Errorf("cvmemu: MaxInstanceCount must be positive (DefaultConfig uses 100)")
	}
	if c.MaxClientTokens <= 0 {
		return fmt.Errorf("cvmemu: MaxClientTokens must be positive")
	}
	ip, err := netip.ParseAddr(c.IPBase)
	if err != nil || !ip.Is4() || !netip.MustParsePrefix("127.0.0.0/8").Contains(ip) {
		return fmt.Errorf("cvmemu: IPBase %q must be an IPv4 address in 127.0.0.0/8", c.IPBase)
	}
	for action, r := range c.RateLimits {
		if r < 0 {
			return fmt.Errorf("cvmemu: negative rate limit for %s", action)
		}
	}
	return nil
}
