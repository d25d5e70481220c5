package cvmemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/nodesmith/nodesmith/tools/simvm"
)

// account holds everything scoped to one account.
type account struct {
	vms map[string]*vm
	// tokens remembers RunInstances ClientTokens per API (a token of one
	// cloud's API means nothing to the other's); tokenOrder is FIFO for
	// eviction once Config.MaxClientTokens is reached.
	tokens     map[tokenKey]*tokenRecord
	tokenOrder []tokenKey
	// evicted holds fingerprints of forgotten tokens, to detect reuse.
	evicted map[uint64]struct{}
}

// tokenKey is a ClientToken of one front end (apiCVM or apiECS).
type tokenKey struct{ api, token string }

// statsKey is the token's key in Stats: "account/token" for CVM,
// "account/ecs:token" for ECS.
func (k tokenKey) statsKey(account string) string {
	if k.api == apiCVM {
		return account + "/" + k.token
	}
	return account + "/" + k.api + ":" + k.token
}

type tokenRecord struct {
	ids         []string
	fingerprint string // of the parameters, for dialects that check them
	creations   int    // how often this token created VMs (more than 1 is a bug)
	replays     int    // how often a retry was answered from the record
}

// outcome is the fate of a launch, decided when it is requested.
type outcome int

const (
	outcomeBoot outcome = iota
	outcomeFail
	outcomeHang
	// outcomeFailCapacity ends LAUNCH_FAILED for want of stock (a
	// StockOut with AtLaunch): vm.failReason says so.
	outcomeFailCapacity
)

type tag struct{ Key, Value string }

type vm struct {
	id, api, account, region, zone string
	instanceType, imageID, name    string
	chargeType, uuid, clientToken  string
	tags                           []tag
	attrs                          map[string]string // front-end specific, e.g. ECS VSwitchId
	state                          string
	ip                             string
	created                        time.Time
	seq                            uint64
	outcome                        outcome
	latestOp, latestOpState        string
	latestOpRequestID, latestOpErr string
	// failReason is the LatestOperationErrorMsg of an outcomeFailCapacity
	// launch.
	failReason string
	// spot is set for spot VMs; a scheduled reclaim lives there.
	spot *spotSpec

	// gen invalidates scheduled timers: a timer only acts if the VM's
	// generation is still the one it was scheduled with.
	gen   uint64
	timer *time.Timer
	// due is when the scheduled timer fires (wall clock), saved so a
	// restarted emulator boots PENDING VMs and removes TERMINATING ones
	// on the original schedule.
	due time.Time

	guest                *simvm.VM
	nodeName, providerID string // as reported by the guest's kubeadm join
}

func (e *Emulator) accountLocked(name string) *account {
	a := e.accounts[name]
	if a == nil {
		a = &account{vms: map[string]*vm{}, tokens: map[tokenKey]*tokenRecord{}, evicted: map[uint64]struct{}{}}
		e.accounts[name] = a
	}
	return a
}

// scheduleLocked runs fn (with e.mu held) after d, unless the VM changes
// generation or the emulator closes first.
func (e *Emulator) scheduleLocked(v *vm, d time.Duration, fn func(*vm)) {
	e.scheduleAtLocked(v, time.Now().Add(d), fn)
}

// scheduleAtLocked is scheduleLocked with a deadline (wall clock), which may
// be in the past.
func (e *Emulator) scheduleAtLocked(v *vm, due time.Time, fn func(*vm)) {
	e.cancelTimerLocked(v)
	gen := v.gen
	v.due = due
	e.wg.Add(1)
	v.timer = time.AfterFunc(max(0, time.Until(due)), func() {
		defer e.wg.Done()
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed || v.gen != gen {
			return
		}
		v.timer = nil
		fn(v)
	})
}

func (e *Emulator) cancelTimerLocked(v *vm) {
	v.gen++
	if v.timer != nil && v.timer.Stop() {
		e.wg.Done() // the callback will never run
	}
	v.timer = nil
}

// decideOutcomeLocked applies the stock-outs that strike at launch and the
// launch policy to a new VM; for a capacity failure it also returns the
// LatestOperationErrorMsg the VM will show.
func (e *Emulator) decideOutcomeLocked(d dialect, zone, instanceType, chargeType string) (outcome, string) {
	if so, ok := e.stockOutLocked(zone, instanceType, chargeType, true); ok {
		return outcomeFailCapacity, so.code(d) + ": " + soldOutMessage(instanceType, zone)
	}
	p := e.launch
	switch {
	case slices.Contains(p.FailZones, zone) || slices.Contains(p.FailInstanceTypes, instanceType):
		return outcomeFail, ""
	case p.NeverBoot || slices.Contains(p.HangZones, zone) || slices.Contains(p.HangInstanceTypes, instanceType):
		return outcomeHang, ""
	case p.FailureRate > 0 && e.rng.Float64() < p.FailureRate:
		return outcomeFail, ""
	case p.HangRate > 0 && e.rng.Float64() < p.HangRate:
		return outcomeHang, ""
	}
	return outcomeBoot, ""
}

// bootLocked runs when a VM's boot delay ends.
func (e *Emulator) bootLocked(v *vm) {
	if v.state != StatePending {
		return
	}
	switch v.outcome {
	case outcomeHang:
		return // stays PENDING until terminated
	case outcomeFail:
		e.launchFailedLocked(v, "the simulated host failed to create the instance")
		return
	case outcomeFailCapacity:
		e.launchFailedLocked(v, v.failReason)
		return
	}
	// A VM restored from a state file saved while it was booting already
	// has its address.
	if v.ip == "" {
		ip, err := e.ips.alloc()
		if err != nil {
			e.launchFailedLocked(v, err.Error())
			return
		}
		v.ip = ip
		e.changedLocked()
	}
	if e.ssh == nil {
		e.runningLocked(v)
		return
	}
	// Starting the SSH server binds a socket and writes the sandbox: do it
	// without holding the lock, then re-check the VM's state.
	gen := v.gen
	spec := e.guestSpecLocked(v)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.startGuest(v, gen, spec)
	}()
}

// startGuest starts the VM's SSH server and moves the VM to RUNNING. If the
// address is already bound by something outside the emulator, the VM moves
// to the next free address (the busy one stays reserved so it is not handed
// out again).
func (e *Emulator) startGuest(v *vm, gen uint64, spec simvm.VMSpec) {
	const maxAttempts = 16
	for attempt := 1; ; attempt++ {
		guest, err := e.ssh.Start(spec)
		e.mu.Lock()
		current := !e.closed && v.gen == gen && v.state == StatePending
		switch {
		case err == nil && current:
			v.guest = guest
			e.runningLocked(v)
		case err == nil:
			e.stopGuestAsyncLocked(guest) // terminated while booting, or closing
		case !current:
			e.discardIfGoneLocked(v)
		case errors.Is(err, syscall.EADDRINUSE) && attempt < maxAttempts:
			next, aerr := e.ips.alloc()
			if aerr != nil {
				e.launchFailedLocked(v, aerr.Error())
				break
			}
			e.log.Debug("guest address busy, trying next", "vm", v.id, "busy", v.ip, "next", next)
			v.ip = next
			spec = e.guestSpecLocked(v)
			e.changedLocked()
			e.mu.Unlock()
			continue
		default:
			e.log.Warn("cannot start VM guest", "vm", v.id, "err", err)
			e.ips.free(v.ip)
			v.ip = ""
			e.launchFailedLocked(v, "guest start failed: "+err.Error())
		}
		e.mu.Unlock()
		return
	}
}

// guestSpecLocked describes the guest of a VM that has its address.
func (e *Emulator) guestSpecLocked(v *vm) simvm.VMSpec {
	return simvm.VMSpec{
		ID:       v.id,
		IP:       v.ip,
		Hostname: v.id,
		Env:      e.cfg.GuestEnv(e.infoLocked(v)),
		OnJoin:   e.onJoin,
		OnReset:  e.onReset,
		OnDrain:  e.drain,
	}
}

// restartGuest brings back the SSH server of a RUNNING VM restored from the
// state file. Unlike a booting VM, a running one keeps its address whatever
// happens (clients know it), so a busy address or any other failure is
// retried with backoff until it works, the VM is terminated or the emulator
// closes; meanwhile the VM is RUNNING but unreachable, as a real VM can be.
func (e *Emulator) restartGuest(v *vm, gen uint64, spec simvm.VMSpec, attempt int) {
	guest, err := e.ssh.Start(spec)
	e.mu.Lock()
	defer e.mu.Unlock()
	current := !e.closed && v.gen == gen && v.state == StateRunning && v.guest == nil
	switch {
	case err == nil && current:
		v.guest = guest
		e.log.Info("VM guest restarted", "vm", v.id, "addr", guest.Addr())
	case err == nil:
		e.stopGuestAsyncLocked(guest)
	case !current:
		e.discardIfGoneLocked(v)
	default:
		delay := min(maxGuestRetryDelay, minGuestRetryDelay<<min(attempt, 16))
		e.log.Warn("cannot restart VM guest, will retry", "vm", v.id, "ip", v.ip, "attempt", attempt+1, "retryIn", delay, "err", err)
		e.scheduleLocked(v, delay, func(v *vm) {
			gen, spec := v.gen, e.guestSpecLocked(v)
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				e.restartGuest(v, gen, spec, attempt+1)
			}()
		})
	}
}

// Backoff bounds for restarting a restored VM's guest.
const (
	minGuestRetryDelay = 250 * time.Millisecond
	maxGuestRetryDelay = 30 * time.Second
)

func (e *Emulator) runningLocked(v *vm) {
	v.state = StateRunning
	v.latestOpState = "SUCCESS"
	e.changedLocked()
	e.log.Info("VM running", "vm", v.id, "ip", v.ip, "zone", v.zone)
}

func (e *Emulator) launchFailedLocked(v *vm, why string) {
	v.state = StateLaunchFailed
	v.latestOpState = "FAILED"
	v.latestOpErr = why
	e.counters.launchFailed++
	e.changedLocked()
	e.log.Info("VM launch failed", "vm", v.id, "reason", why)
}

// terminateLocked starts terminating a VM: its guest stops at once, its node
// goes NotReady, and it vanishes after the terminate delay.
func (e *Emulator) terminateLocked(v *vm, op, reqID string) {
	e.cancelTimerLocked(v)
	e.cancelReclaimLocked(v)
	v.state = StateTerminating
	v.latestOp, v.latestOpState, v.latestOpRequestID, v.latestOpErr = op, "OPERATING", reqID, ""
	e.counters.terminated++
	e.changedLocked()
	if v.guest != nil {
		e.stopGuestAsyncLocked(v.guest)
		v.guest = nil
	} else {
		// Its sandbox may be left from before a restart (the guest was not
		// back yet) or from a boot in progress.
		e.discardSandboxAsyncLocked(v.id)
	}
	if e.cluster != nil && v.nodeName != "" {
		// Under e.mu (the cluster never calls back), so a join being
		// reported concurrently is either before this or refused.
		e.cluster.MarkNotReadyIfProvider(v.nodeName, v.providerID)
	}
	e.scheduleLocked(v, e.terminateDelay, e.removeLocked)
	e.log.Info("VM terminating", "vm", v.id)
}

func (e *Emulator) removeLocked(v *vm) {
	if a := e.accounts[v.account]; a != nil {
		delete(a.vms, v.id)
	}
	if v.ip != "" {
		e.ips.free(v.ip)
	}
	e.changedLocked()
	e.log.Debug("VM removed", "vm", v.id)
}

// stopGuestAsyncLocked stops a guest that is no longer wanted. While the
// emulator runs that means its VM is gone, so its sandbox goes too; while it
// closes, the VM lives on in the state file and keeps its sandbox (with a
// persistent simvm.Factory) for the next run.
func (e *Emulator) stopGuestAsyncLocked(g *simvm.VM) {
	stop, what := g.Destroy, "destroying"
	if e.closed {
		stop, what = g.Close, "closing"
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := stop(); err != nil {
			e.log.Warn(what+" VM guest", "vm", g.ID(), "err", err)
		}
	}()
}

// discardIfGoneLocked discards the sandbox of a VM whose failed guest start
// raced with its termination: terminateLocked's own discard found the start
// in flight, and a reused sandbox survives a failed start.
func (e *Emulator) discardIfGoneLocked(v *vm) {
	if !e.closed && v.state == StateTerminating {
		e.discardSandboxAsyncLocked(v.id)
	}
}

// discardSandboxAsyncLocked removes what a VM without a running guest may
// have left in the sandbox root.
func (e *Emulator) discardSandboxAsyncLocked(id string) {
	if e.ssh == nil {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.ssh.Discard(id); err != nil {
			// ErrRunning: a guest start is in flight; whoever finishes it
			// sees the VM gone and destroys the guest, sandbox included.
			lvl := slog.LevelWarn
			if errors.Is(err, simvm.ErrRunning) {
				lvl = slog.LevelDebug
			}
			e.log.Log(context.Background(), lvl, "discarding VM sandbox", "vm", id, "err", err)
		}
	}()
}

// onJoin is the simvm callback for a kubeadm join on a VM, including the
// join a restarted guest reports again.
func (e *Emulator) onJoin(vmID, nodeName, providerID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.findLocked(vmID)
	if v == nil || v.state == StateTerminating {
		// The guest is being torn down; its kubelet is not coming up.
		return
	}
	v.nodeName, v.providerID = nodeName, providerID
	e.changedLocked()
	if e.cluster == nil {
		return
	}
	// Under e.mu, ordered with terminateLocked's MarkNotReadyIfProvider.
	if err := e.cluster.Register(nodeName, providerID); err != nil {
		e.log.Warn("register node", "vm", vmID, "node", nodeName, "err", err)
	}
}

// onReset is the simvm callback for a kubeadm reset on a VM.
func (e *Emulator) onReset(vmID, nodeName string) {
	e.mu.Lock()
	var provider string
	if v := e.findLocked(vmID); v != nil {
		provider = v.providerID
		v.nodeName, v.providerID = "", ""
		e.changedLocked()
	}
	e.mu.Unlock()
	if e.cluster != nil {
		e.cluster.MarkNotReadyIfProvider(nodeName, provider)
	}
}

func (e *Emulator) findLocked(id string) *vm {
	for _, a := range e.accounts {
		if v, ok := a.vms[id]; ok {
			return v
		}
	}
	return nil
}

// ipAllocator hands out private IPs from 127.0.0.0/8 sequentially, wrapping
// around and skipping addresses in use and those ending in .0 or .255.
type ipAllocator struct {
	first, next, last uint32
	inUse             map[uint32]bool
}

func newIPAllocator(base string) (ipAllocator, error) {
	a, err := netip.ParseAddr(base)
	if err != nil || !a.Is4() {
		return ipAllocator{}, fmt.Errorf("cvmemu: invalid IPBase %q", base)
	}
	b := a.As4()
	first := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return ipAllocator{first: first, next: first, last: 127<<24 | 0xfffffe, inUse: map[uint32]bool{}}, nil
}

func (p *ipAllocator) alloc() (string, error) {
	for range p.last - p.first + 1 {
		c := p.next
		p.next++
		if p.next > p.last {
			p.next = p.first
		}
		if o := c & 0xff; o == 0 || o == 255 || p.inUse[c] {
			continue
		}
		p.inUse[c] = true
		return netip.AddrFrom4([4]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)}).String(), nil
	}
	return "", errors.New("no free private IP address left")
}

func (p *ipAllocator) free(ip string) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return
	}
	b := a.As4()
	delete(p.inUse, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
}
