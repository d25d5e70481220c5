package cvmemu

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/nodesmith/nodesmith/tools/simvm"
)

// account holds everything scoped to one account.
type account struct {
	vms map[string]*vm
	// tokens remembers RunInstances ClientTokens; tokenOrder is FIFO for
	// eviction once Config.MaxClientTokens is reached.
	tokens     map[string]*tokenRecord
	tokenOrder []string
}

type tokenRecord struct {
	ids       []string
	creations int // how often this token created VMs (more than 1 is a bug)
	replays   int // how often a retry was answered from the record
}

// outcome is the fate of a launch, decided when it is requested.
type outcome int

const (
	outcomeBoot outcome = iota
	outcomeFail
	outcomeHang
)

type tag struct{ Key, Value string }

type vm struct {
	id, account, region, zone      string
	instanceType, imageID, name    string
	chargeType, uuid, clientToken  string
	tags                           []tag
	state                          string
	ip                             string
	created                        time.Time
	seq                            uint64
	outcome                        outcome
	latestOp, latestOpState        string
	latestOpRequestID, latestOpErr string

	// gen invalidates scheduled timers: a timer only acts if the VM's
	// generation is still the one it was scheduled with.
	gen   uint64
	timer *time.Timer

	guest                *simvm.VM
	nodeName, providerID string // as reported by the guest's kubeadm join
}

func (e *Emulator) accountLocked(name string) *account {
	a := e.accounts[name]
	if a == nil {
		a = &account{vms: map[string]*vm{}, tokens: map[string]*tokenRecord{}}
		e.accounts[name] = a
	}
	return a
}

// scheduleLocked runs fn (with e.mu held) after d, unless the VM changes
// generation or the emulator closes first.
func (e *Emulator) scheduleLocked(v *vm, d time.Duration, fn func(*vm)) {
	e.cancelTimerLocked(v)
	gen := v.gen
	e.wg.Add(1)
	v.timer = time.AfterFunc(d, func() {
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

// decideOutcomeLocked applies the launch policy to a new VM.
func (e *Emulator) decideOutcomeLocked(zone, instanceType string) outcome {
	p := e.launch
	switch {
	case slices.Contains(p.FailZones, zone) || slices.Contains(p.FailInstanceTypes, instanceType):
		return outcomeFail
	case p.NeverBoot || slices.Contains(p.HangZones, zone) || slices.Contains(p.HangInstanceTypes, instanceType):
		return outcomeHang
	case p.FailureRate > 0 && e.rng.Float64() < p.FailureRate:
		return outcomeFail
	case p.HangRate > 0 && e.rng.Float64() < p.HangRate:
		return outcomeHang
	}
	return outcomeBoot
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
	}
	ip, err := e.ips.alloc()
	if err != nil {
		e.launchFailedLocked(v, err.Error())
		return
	}
	v.ip = ip
	if e.ssh == nil {
		e.runningLocked(v)
		return
	}
	// Starting the SSH server binds a socket and writes the sandbox: do it
	// without holding the lock, then re-check the VM's state.
	gen := v.gen
	spec := simvm.VMSpec{
		ID:       v.id,
		IP:       ip,
		Hostname: v.id,
		Env:      e.cfg.GuestEnv(e.infoLocked(v)),
		OnJoin:   e.onJoin,
		OnReset:  e.onReset,
	}
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
			e.closeGuestAsyncLocked(guest) // terminated while booting
		case !current:
		case errors.Is(err, syscall.EADDRINUSE) && attempt < maxAttempts:
			next, aerr := e.ips.alloc()
			if aerr != nil {
				e.launchFailedLocked(v, aerr.Error())
				break
			}
			e.log.Debug("guest address busy, trying next", "vm", v.id, "busy", v.ip, "next", next)
			v.ip = next
			spec.IP = next
			spec.Env = e.cfg.GuestEnv(e.infoLocked(v))
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

func (e *Emulator) runningLocked(v *vm) {
	v.state = StateRunning
	v.latestOpState = "SUCCESS"
	e.log.Info("VM running", "vm", v.id, "ip", v.ip, "zone", v.zone)
}

func (e *Emulator) launchFailedLocked(v *vm, why string) {
	v.state = StateLaunchFailed
	v.latestOpState = "FAILED"
	v.latestOpErr = why
	e.counters.launchFailed++
	e.log.Info("VM launch failed", "vm", v.id, "reason", why)
}

// terminateLocked starts terminating a VM: its guest stops at once, its node
// goes NotReady, and it vanishes after the terminate delay.
func (e *Emulator) terminateLocked(v *vm, reqID string) {
	e.cancelTimerLocked(v)
	v.state = StateTerminating
	v.latestOp, v.latestOpState, v.latestOpRequestID, v.latestOpErr = ActionTerminateInstances, "OPERATING", reqID, ""
	e.counters.terminated++
	if v.guest != nil {
		e.closeGuestAsyncLocked(v.guest)
		v.guest = nil
	}
	if e.cluster != nil && v.nodeName != "" {
		node, provider := v.nodeName, v.providerID
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.cluster.MarkNotReadyIfProvider(node, provider)
		}()
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
	e.log.Debug("VM removed", "vm", v.id)
}

func (e *Emulator) closeGuestAsyncLocked(g *simvm.VM) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := g.Close(); err != nil {
			e.log.Warn("closing VM guest", "vm", g.ID(), "err", err)
		}
	}()
}

// onJoin is the simvm callback for a kubeadm join on a VM.
func (e *Emulator) onJoin(vmID, nodeName, providerID string) {
	e.mu.Lock()
	v := e.findLocked(vmID)
	if v != nil {
		v.nodeName, v.providerID = nodeName, providerID
	}
	e.mu.Unlock()
	if e.cluster == nil {
		return
	}
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
