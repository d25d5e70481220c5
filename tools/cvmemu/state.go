package cvmemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Persistence (Config.StateFile). The file is one JSON document holding
// everything that decides how the emulator answers: every listed VM, the
// ClientToken records, the address allocator and the counters behind the
// duplicate/orphan checks of Stats. Runtime settings (the Set* methods,
// faults) are not saved: the Config is their source of truth. Request,
// error and rate counters are per process and start from zero.

// stateVersion is the state file format. Bump it on any incompatible change:
// New refuses files of other versions instead of guessing.
const stateVersion = 1

// stateSaveInterval is the least time between two saves: a burst of changes
// costs one write, and the last change is written at most this late (as
// long as saving works; after a failure the next attempt waits
// stateRetryInterval, so a full disk does not flood the log).
const (
	stateSaveInterval  = 200 * time.Millisecond
	stateRetryInterval = 5 * time.Second
)

type stateFile struct {
	Version  int                      `json:"version"`
	Seq      uint64                   `json:"seq"`
	IPNext   string                   `json:"ipNext,omitempty"`
	IPsInUse []string                 `json:"ipsInUse,omitempty"`
	Counters stateCounters            `json:"counters"`
	Accounts map[string]*stateAccount `json:"accounts"`
}

type stateCounters struct {
	Created             int `json:"created"`
	CreatedECS          int `json:"createdEcs,omitempty"` // of Created
	Terminated          int `json:"terminated"`
	LaunchFailed        int `json:"launchFailed"`
	CreatedWithoutToken int `json:"createdWithoutToken"`
	TokensReused        int `json:"tokensReused"`
}

type stateAccount struct {
	VMs []stateVM `json:"vms"`
	// Tokens are oldest first, the order in which they are forgotten.
	Tokens  []stateToken `json:"tokens"`
	Evicted []uint64     `json:"evicted,omitempty"`
}

type stateToken struct {
	// API is "" for CVM (state files from before ECS), "ecs" for ECS.
	API         string   `json:"api,omitempty"`
	Token       string   `json:"token"`
	Fingerprint string   `json:"fingerprint,omitempty"`
	IDs         []string `json:"ids"`
	Creations   int      `json:"creations"`
	Replays     int      `json:"replays,omitempty"`
}

type stateTag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type stateVM struct {
	ID           string            `json:"id"`
	API          string            `json:"api,omitempty"` // "" CVM, "ecs" ECS
	Region       string            `json:"region"`
	Zone         string            `json:"zone"`
	InstanceType string            `json:"instanceType"`
	ImageID      string            `json:"imageId"`
	Name         string            `json:"name"`
	ChargeType   string            `json:"chargeType"`
	UUID         string            `json:"uuid"`
	ClientToken  string            `json:"clientToken,omitempty"`
	Tags         []stateTag        `json:"tags,omitempty"`
	Attrs        map[string]string `json:"attrs,omitempty"`
	State        string            `json:"state"`
	PrivateIP    string            `json:"privateIp,omitempty"`
	CreatedAt    time.Time         `json:"createdAt"`
	Seq          uint64            `json:"seq"`
	Outcome      string            `json:"outcome"`
	// Due is when a PENDING VM boots or a TERMINATING one vanishes.
	Due               time.Time `json:"due,omitzero"`
	LatestOp          string    `json:"latestOperation,omitempty"`
	LatestOpState     string    `json:"latestOperationState,omitempty"`
	LatestOpRequestID string    `json:"latestOperationRequestId,omitempty"`
	LatestOpErr       string    `json:"latestOperationErrorMsg,omitempty"`
	NodeName          string    `json:"nodeName,omitempty"`
	ProviderID        string    `json:"providerId,omitempty"`
	// FailReason is the error message of a launch that fails for capacity.
	FailReason string `json:"failReason,omitempty"`
	// Spot is set for spot VMs.
	Spot *stateSpot `json:"spot,omitempty"`
}

type stateSpot struct {
	MaxPrice string `json:"maxPrice"`
	// ReclaimAt (server clock, announced) and ReclaimDue (wall clock, when
	// the VM is terminated) are set once a reclaim is scheduled.
	ReclaimAt  time.Time `json:"reclaimAt,omitzero"`
	ReclaimDue time.Time `json:"reclaimDue,omitzero"`
}

var outcomeNames = map[outcome]string{outcomeBoot: "boot", outcomeFail: "fail", outcomeHang: "hang", outcomeFailCapacity: "fail-capacity"}

// openState loads Config.StateFile, restores and resumes what it holds, and
// starts saving changes. Called by New before anyone else sees e.
func (e *Emulator) openState() error {
	path := e.cfg.StateFile
	st, err := readStateFile(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cvmemu: state file directory: %w", err)
	}
	var restart []*vm
	if st != nil {
		e.mu.Lock()
		restart, err = e.restoreLocked(st)
		e.mu.Unlock()
		if err != nil {
			return fmt.Errorf("cvmemu: state file %s: %w", path, err)
		}
	}
	// Save at once: an unwritable location fails New rather than every
	// later save, and the file is in the current format from now on.
	if err := e.saveState(); err != nil {
		_ = e.Close() // stops the timers restoreLocked started
		return err
	}
	// Under the lock: timers restoreLocked started (a PENDING VM booting)
	// read saveReq in changedLocked.
	e.mu.Lock()
	e.saveReq = make(chan struct{}, 1)
	e.saveStop = make(chan struct{})
	e.saveDone = make(chan struct{})
	e.mu.Unlock()
	go e.saveLoop()

	if st != nil {
		e.log.Info("emulator state restored", "path", path, "vms", len(e.ListVMs()))
	}
	if e.ssh != nil {
		for _, v := range restart {
			e.mu.Lock()
			gen, spec := v.gen, e.guestSpecLocked(v)
			e.mu.Unlock()
			e.restartGuest(v, gen, spec, 0)
		}
	}
	return nil
}

// changedLocked notes that the saved state is out of date. It never blocks:
// one pending request covers any number of changes.
func (e *Emulator) changedLocked() {
	if e.saveReq == nil {
		return
	}
	select {
	case e.saveReq <- struct{}{}:
	default:
	}
}

// saveLoop writes the state whenever it changed, at most once per
// stateSaveInterval. A change made during a write or during the pause after
// it leaves a request behind, so the last change is always written.
func (e *Emulator) saveLoop() {
	defer close(e.saveDone)
	for {
		select {
		case <-e.saveStop:
			return
		case <-e.saveReq:
		}
		pause := stateSaveInterval
		if err := e.saveState(); err != nil {
			e.log.Error("cannot save emulator state, will retry", "err", err, "retryIn", stateRetryInterval)
			pause = stateRetryInterval
			e.mu.Lock()
			e.changedLocked()
			e.mu.Unlock()
		}
		t := time.NewTimer(pause)
		select {
		case <-e.saveStop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// saveState writes a snapshot of the state. Callers serialise it: openState
// and Close run it when saveLoop is not running.
func (e *Emulator) saveState() error {
	e.mu.Lock()
	st := e.snapshotLocked()
	e.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("cvmemu: encode state: %w", err)
	}
	if err := writeFileDurably(e.cfg.StateFile, b, 0o600); err != nil {
		return fmt.Errorf("cvmemu: save state: %w", err)
	}
	return nil
}

func (e *Emulator) snapshotLocked() *stateFile {
	st := &stateFile{
		Version: stateVersion,
		Seq:     e.seq,
		IPNext:  uint32ToAddr(e.ips.next).String(),
		Counters: stateCounters{
			Created:             e.counters.created,
			CreatedECS:          e.counters.createdECS,
			Terminated:          e.counters.terminated,
			LaunchFailed:        e.counters.launchFailed,
			CreatedWithoutToken: e.counters.createdWithoutToken,
			TokensReused:        e.counters.tokensReused,
		},
		Accounts: map[string]*stateAccount{},
	}
	for n := range e.ips.inUse {
		st.IPsInUse = append(st.IPsInUse, uint32ToAddr(n).String())
	}
	slices.Sort(st.IPsInUse)
	for name, a := range e.accounts {
		if len(a.vms) == 0 && len(a.tokenOrder) == 0 && len(a.evicted) == 0 {
			continue
		}
		sa := &stateAccount{VMs: []stateVM{}, Tokens: []stateToken{}}
		for _, v := range a.vms {
			sa.VMs = append(sa.VMs, v.toState())
		}
		slices.SortFunc(sa.VMs, func(x, y stateVM) int { return cmpSeq(x.Seq, y.Seq) })
		for _, tok := range a.tokenOrder {
			rec := a.tokens[tok]
			sa.Tokens = append(sa.Tokens, stateToken{API: tok.api, Token: tok.token, Fingerprint: rec.fingerprint, IDs: slices.Clone(rec.ids), Creations: rec.creations, Replays: rec.replays})
		}
		for fp := range a.evicted {
			sa.Evicted = append(sa.Evicted, fp)
		}
		slices.Sort(sa.Evicted)
		st.Accounts[name] = sa
	}
	return st
}

// toState renders a VM for the state file.
func (v *vm) toState() stateVM {
	s := stateVM{
		ID: v.id, API: v.api, Attrs: maps.Clone(v.attrs), Region: v.region, Zone: v.zone, InstanceType: v.instanceType, ImageID: v.imageID,
		Name: v.name, ChargeType: v.chargeType, UUID: v.uuid, ClientToken: v.clientToken,
		State: v.state, PrivateIP: v.ip, CreatedAt: v.created, Seq: v.seq, Outcome: outcomeNames[v.outcome],
		LatestOp: v.latestOp, LatestOpState: v.latestOpState, LatestOpRequestID: v.latestOpRequestID, LatestOpErr: v.latestOpErr,
		NodeName: v.nodeName, ProviderID: v.providerID, FailReason: v.failReason,
	}
	if v.spot != nil {
		s.Spot = &stateSpot{MaxPrice: v.spot.maxPrice, ReclaimAt: v.spot.reclaimAt, ReclaimDue: v.spot.reclaimDue}
	}
	if v.state == StatePending || v.state == StateTerminating {
		s.Due = v.due
	}
	for _, t := range v.tags {
		s.Tags = append(s.Tags, stateTag(t))
	}
	return s
}

// restoreLocked validates st completely, then replaces the (empty) state of
// e with it and resumes the VMs' pending transitions. It returns the RUNNING
// VMs, whose guests the caller restarts. On error e is unchanged.
func (e *Emulator) restoreLocked(st *stateFile) ([]*vm, error) {
	ips, err := newIPAllocator(e.cfg.IPBase)
	if err != nil {
		return nil, err
	}
	if st.IPNext != "" {
		n, err := parseLoopback(st.IPNext)
		if err != nil {
			return nil, fmt.Errorf("ipNext: %w", err)
		}
		if n >= ips.first && n <= ips.last { // else IPBase changed: start over from it
			ips.next = n
		}
	}
	for _, s := range st.IPsInUse {
		n, err := parseLoopback(s)
		if err != nil {
			return nil, fmt.Errorf("ipsInUse: %w", err)
		}
		ips.inUse[n] = true
	}

	accounts := map[string]*account{}
	var all []*vm
	seen := map[string]bool{}
	seq := st.Seq
	for name, sa := range st.Accounts {
		if name == "" || sa == nil {
			return nil, errors.New("an account without name or content")
		}
		a := &account{vms: map[string]*vm{}, tokens: map[tokenKey]*tokenRecord{}, evicted: map[uint64]struct{}{}}
		for i := range sa.VMs {
			v, err := sa.VMs[i].toVM(name)
			if err != nil {
				return nil, fmt.Errorf("account %q: %w", name, err)
			}
			if seen[v.id] {
				return nil, fmt.Errorf("VM %s is listed twice", v.id)
			}
			seen[v.id] = true
			if v.ip != "" {
				n, _ := parseLoopback(v.ip) // checked by toVM
				ips.inUse[n] = true
			}
			a.vms[v.id] = v
			all = append(all, v)
			seq = max(seq, v.seq)
		}
		for _, t := range sa.Tokens {
			if t.Token == "" || len(t.Token) > maxClientTokenLen {
				return nil, fmt.Errorf("account %q: invalid ClientToken %q", name, t.Token)
			}
			if t.API != apiCVM && t.API != apiECS {
				return nil, fmt.Errorf("account %q: ClientToken %q: unknown api %q", name, t.Token, t.API)
			}
			if t.API == apiCVM && len(t.IDs) > 0 && ecsInstanceIDPattern.MatchString(t.IDs[0]) {
				t.API = apiECS // saved before tokens were kept per API
			}
			k := tokenKey{t.API, t.Token}
			if _, dup := a.tokens[k]; dup {
				return nil, fmt.Errorf("account %q: ClientToken %q is listed twice", name, t.Token)
			}
			for _, id := range t.IDs {
				if !instanceIDPattern.MatchString(id) && !ecsInstanceIDPattern.MatchString(id) {
					return nil, fmt.Errorf("account %q: ClientToken %q: malformed instance id %q", name, t.Token, id)
				}
			}
			a.tokens[k] = &tokenRecord{ids: slices.Clone(t.IDs), fingerprint: t.Fingerprint, creations: t.Creations, replays: t.Replays}
			a.tokenOrder = append(a.tokenOrder, k)
		}
		for _, fp := range sa.Evicted {
			a.evicted[fp] = struct{}{}
		}
		accounts[name] = a
	}

	// Valid: commit and resume.
	e.accounts, e.ips, e.seq = accounts, ips, seq
	e.counters.created = st.Counters.Created
	e.counters.createdECS = st.Counters.CreatedECS
	e.counters.terminated = st.Counters.Terminated
	e.counters.launchFailed = st.Counters.LaunchFailed
	e.counters.createdWithoutToken = st.Counters.CreatedWithoutToken
	e.counters.tokensReused = st.Counters.TokensReused
	slices.SortFunc(all, func(a, b *vm) int { return cmpSeq(a.seq, b.seq) })
	var running []*vm
	for _, v := range all {
		switch v.state {
		case StatePending:
			// The boot goes on where it was; one that was starting its
			// guest when the state was saved starts it again.
			e.scheduleAtLocked(v, v.due, e.bootLocked)
		case StateTerminating:
			e.scheduleAtLocked(v, v.due, e.removeLocked)
			e.discardSandboxAsyncLocked(v.id)
		case StateRunning:
			running = append(running, v)
		}
		if v.state != StateTerminating && v.spot != nil && !v.spot.reclaimDue.IsZero() {
			e.scheduleReclaimLocked(v)
		}
	}
	return running, nil
}

// toVM validates a saved VM and turns it into a live one.
func (s *stateVM) toVM(account string) (*vm, error) {
	switch s.API {
	case apiCVM, apiECS:
	default:
		return nil, fmt.Errorf("VM %s: unknown API %q", s.ID, s.API)
	}
	if !instanceIDPatternOf(s.API).MatchString(s.ID) {
		return nil, fmt.Errorf("malformed instance id %q", s.ID)
	}
	switch s.State {
	case StatePending, StateLaunchFailed, StateRunning, StateTerminating:
	default:
		return nil, fmt.Errorf("VM %s: unknown state %q", s.ID, s.State)
	}
	out := outcome(-1)
	for o, name := range outcomeNames {
		if name == s.Outcome {
			out = o
		}
	}
	if out < 0 {
		return nil, fmt.Errorf("VM %s: unknown launch outcome %q", s.ID, s.Outcome)
	}
	if s.Region == "" || s.Zone == "" {
		return nil, fmt.Errorf("VM %s: no region or zone", s.ID)
	}
	if s.State == StateRunning && s.PrivateIP == "" {
		return nil, fmt.Errorf("VM %s: RUNNING without a private IP", s.ID)
	}
	if s.PrivateIP != "" {
		if _, err := parseLoopback(s.PrivateIP); err != nil {
			return nil, fmt.Errorf("VM %s: %w", s.ID, err)
		}
	}
	v := &vm{
		id: s.ID, api: s.API, attrs: maps.Clone(s.Attrs), account: account, region: s.Region, zone: s.Zone,
		instanceType: s.InstanceType, imageID: s.ImageID, name: s.Name,
		chargeType: s.ChargeType, uuid: s.UUID, clientToken: s.ClientToken,
		state: s.State, ip: s.PrivateIP, created: s.CreatedAt, seq: s.Seq, outcome: out, due: s.Due,
		latestOp: s.LatestOp, latestOpState: s.LatestOpState, latestOpRequestID: s.LatestOpRequestID, latestOpErr: s.LatestOpErr,
		nodeName: s.NodeName, providerID: s.ProviderID, failReason: s.FailReason,
	}
	if s.Spot != nil {
		v.spot = &spotSpec{maxPrice: s.Spot.MaxPrice, reclaimAt: s.Spot.ReclaimAt, reclaimDue: s.Spot.ReclaimDue}
	}
	for _, t := range s.Tags {
		v.tags = append(v.tags, tag(t))
	}
	return v, nil
}

// readStateFile reads and decodes a state file; (nil, nil) if there is none.
func readStateFile(path string) (*stateFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cvmemu: read state file: %w", err)
	}
	corrupt := func(why error) error {
		return fmt.Errorf("cvmemu: state file %s is corrupt: %w (move it away to start empty)", path, why)
	}
	// The version first, leniently: a file from another version may well
	// have fields this one does not know.
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, corrupt(err)
	}
	if head.Version == nil {
		return nil, corrupt(errors.New("no format version"))
	}
	if *head.Version != stateVersion {
		return nil, fmt.Errorf("cvmemu: state file %s has format version %d, this emulator reads version %d (move it away to start empty)",
			path, *head.Version, stateVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var st stateFile
	if err := dec.Decode(&st); err != nil {
		return nil, corrupt(err)
	}
	if dec.More() {
		return nil, corrupt(errors.New("trailing data after the JSON document"))
	}
	return &st, nil
}

// writeFileDurably replaces path with data so that a crash leaves either the
// old or the new file: temporary file, fsync, rename, fsync of the directory.
func writeFileDurably(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// parseLoopback parses an IPv4 address in 127.0.0.0/8, the only addresses
// the emulator hands out.
func parseLoopback(s string) (uint32, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || !a.IsLoopback() {
		return 0, fmt.Errorf("invalid private IP %q", s)
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

func uint32ToAddr(n uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}
