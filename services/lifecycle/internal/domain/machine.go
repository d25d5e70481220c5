package domain

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"
)

// Event is an input of the state machine.
type Event interface{ eventName() string }

// StartCreate puts a Pending instance in a create batch (dispatcher).
type StartCreate struct{ BatchID, ClientToken string }

// CloudCreated reports the VM created for the instance.
type CloudCreated struct {
	Attempt uint32
	BatchID string
	CloudID string
	// Offering is where the VM was created (InstancesCreated.offering);
	// nil for a create without offerings, or when the cloud id comes from
	// an observation. A later CloudCreated of the same batch naming
	// another VM for a still Creating instance, with an offering, is a
	// relaunch: the cloud adapter terminated the first VM, which failed to
	// launch for want of capacity, and created this one elsewhere.
	Offering *cloudspec.Offering
}

// CloudCreateFailed reports that the create call failed for good (the
// cloud adapter has already retried retryable errors).
type CloudCreateFailed struct {
	Attempt uint32
	BatchID string
	Err     CloudError
}

// CloudObserved reports the VM's state as the cloud sees it.
type CloudObserved struct {
	Attempt uint32
	// CloudID is the observed VM ("": the instance's); an observation of
	// another VM than the instance's is not applied.
	CloudID   string
	State     CloudState
	PrivateIP string
	// LaunchError is, for CloudLaunchFailed, why the cloud says the VM
	// failed to launch (Kind capacity for a stock-out); nil when it does
	// not say.
	LaunchError *CloudError
}

// CloudTerminated reports that the VM is terminating or gone.
type CloudTerminated struct{ Attempt uint32 }

// CloudTerminateFailed reports that terminating the VM failed after retries.
type CloudTerminateFailed struct {
	Attempt uint32
	Err     CloudError
}

// HookFinished reports a hook run.
type HookFinished struct {
	Attempt   uint32
	Kind      HookKind
	Succeeded bool
	// Skipped: the runner had nothing to run; treated as success.
	Skipped    bool
	Retryable  bool
	ExitCode   int
	Error      string
	OutputTail string
	HostKey    string
}

// NodeReady reports a Ready Node carrying the instance's providerID.
type NodeReady struct{ NodeName string }

// DeleteRequested releases the instance from the target and starts its
// deletion. Force skips the before_delete hook and the delete queue.
type DeleteRequested struct {
	Reason string
	Force  bool
}

// Cancel drops a Pending instance.
type Cancel struct{ Reason string }

// StartDelete begins a queued deletion (dispatcher, within delete parallelism).
type StartDelete struct{}

// Tick fires deadlines and due retries (Env.Now is the time).
type Tick struct{}

// Retry re-drives the current step now (operator action).
type Retry struct{}

// VMGone reports that the reconciler no longer finds the instance's VM.
type VMGone struct{ Reason string }

// NodeGone reports that a Running instance's Node object is gone from the
// cluster (deleted by someone else: an operator, a controller).
type NodeGone struct{ NodeName string }

// NodeBack reports that the Node of an instance whose Node was gone is
// registered again.
type NodeBack struct{ NodeName string }

func (StartCreate) eventName() string          { return "StartCreate" }
func (CloudCreated) eventName() string         { return "CloudCreated" }
func (CloudCreateFailed) eventName() string    { return "CloudCreateFailed" }
func (CloudObserved) eventName() string        { return "CloudObserved" }
func (CloudTerminated) eventName() string      { return "CloudTerminated" }
func (CloudTerminateFailed) eventName() string { return "CloudTerminateFailed" }
func (HookFinished) eventName() string         { return "HookFinished" }
func (NodeReady) eventName() string            { return "NodeReady" }
func (DeleteRequested) eventName() string      { return "DeleteRequested" }
func (Cancel) eventName() string               { return "Cancel" }
func (StartDelete) eventName() string          { return "StartDelete" }
func (Tick) eventName() string                 { return "Tick" }
func (Retry) eventName() string                { return "Retry" }
func (VMGone) eventName() string               { return "VMGone" }
func (NodeGone) eventName() string             { return "NodeGone" }
func (NodeBack) eventName() string             { return "NodeBack" }

// EventName names an event for logs and metrics.
func EventName(ev Event) string { return ev.eventName() }

// Env is what a transition may depend on besides the record and the event.
type Env struct {
	Now time.Time
	// Group is the instance's group as currently defined.
	Group  NodeGroup
	Policy Policy
	// NoCluster: no node watcher is configured, so an instance counts as
	// Running once its after_created hook succeeded.
	NoCluster bool
	// Jitter in [-1, 1] picks this transition's backoff jitter.
	Jitter float64
}

// CommandKind is the kind of command an instance can wait on.
type CommandKind int

// Command kinds.
const (
	CmdNone CommandKind = iota
	CmdCreate
	CmdWatch
	CmdRunHook
	CmdTerminate
)

func (k CommandKind) String() string {
	switch k {
	case CmdCreate:
		return "create"
	case CmdWatch:
		return "watch"
	case CmdRunHook:
		return "hook"
	case CmdTerminate:
		return "terminate"
	}
	return "none"
}

// Command is the command an instance waits on, derived from its record.
type Command struct {
	Kind       CommandKind
	InstanceID string
	Attempt    uint32
	// BatchID is set for CmdCreate.
	BatchID string
	// Hook is set for CmdRunHook.
	Hook HookKind
}

// PendingCommand returns the command the record is waiting on, if any. The
// record itself is the outbox: after a crash, every in-flight record's
// command is re-published with the same (instance, attempt), which the
// command stream deduplicates and the workers handle idempotently.
func PendingCommand(i Instance) (Command, bool) {
	if !i.InFlight {
		return Command{}, false
	}
	c := Command{InstanceID: i.ID, Attempt: i.Attempt}
	switch i.State {
	case StateCreating:
		if i.CloudID == "" {
			c.Kind, c.BatchID = CmdCreate, i.BatchID
		} else {
			c.Kind = CmdWatch
		}
	case StateCreated:
		c.Kind, c.Hook = CmdRunHook, HookAfterCreated
	case StatePendingDeletion:
		c.Kind, c.Hook = CmdRunHook, HookBeforeDelete
	case StateDeleting:
		if i.CloudID == "" {
			return Command{}, false
		}
		c.Kind = CmdTerminate
	default:
		return Command{}, false
	}
	return c, true
}

// EffectKind is a side effect on the cluster.
type EffectKind int

// Effects.
const (
	// EffectPatchNode applies the group's labels, annotations and taints.
	EffectPatchNode EffectKind = iota + 1
	// EffectDeleteNode removes the Node object (not-found is success).
	EffectDeleteNode
)

// Effect must be carried out (idempotently) BEFORE the new record is
// persisted: if it fails, the record is not written and the step is retried.
type Effect struct {
	Kind     EffectKind
	NodeName string
}

// Move is one state change made by Apply, for metrics and logs.
type Move struct {
	From, To State
	Reason   string
	// Cause is the name of the event that made the move (EventName), or
	// "created" / "adopted" for a new record: a bounded counterpart of
	// Reason, for metrics.
	Cause string
	// InState is how long the instance was in From.
	InState time.Duration
}

// Result of Apply.
type Result struct {
	Instance Instance
	// Changed: the record must be written.
	Changed bool
	// Ignored explains why a valid event changed nothing (stale attempt,
	// duplicate, not yet applicable).
	Ignored string
	Moves   []Move
	// Command is the command issued by this transition, if any.
	Command *Command
	Effects []Effect
	// CreationFailed: this transition marked the creation as failed.
	CreationFailed bool
}

// Apply is the state machine: it returns the record after ev, whether it
// must be written, the command issued and the effects to carry out first.
// It never mutates inst. A stale or duplicate event is ignored (Result.Ignored);
// an event that has no meaning in the state returns ErrInvalidTransition.
func Apply(inst Instance, ev Event, env Env) (Result, error) {
	in := inst
	in.History = slices.Clone(inst.History)
	if in.LastError != nil {
		e := *in.LastError
		in.LastError = &e
	}
	m := &machine{env: env, in: in, event: ev.eventName()}
	var err error
	switch e := ev.(type) {
	case StartCreate:
		err = m.startCreate(e)
	case CloudCreated:
		err = m.cloudCreated(e)
	case CloudCreateFailed:
		err = m.createFailed(e)
	case CloudObserved:
		err = m.observed(e)
	case CloudTerminated:
		err = m.terminated(e)
	case CloudTerminateFailed:
		err = m.terminateFailed(e)
	case HookFinished:
		err = m.hookFinished(e)
	case NodeReady:
		err = m.nodeReady(e)
	case DeleteRequested:
		err = m.deleteRequested(e)
	case Cancel:
		err = m.cancel(e)
	case StartDelete:
		err = m.startDelete()
	case Tick:
		err = m.tick()
	case Retry:
		err = m.retry()
	case VMGone:
		err = m.vmGone(e)
	case NodeGone:
		err = m.nodeGone(e)
	case NodeBack:
		err = m.nodeBack(e)
	case SpotInterrupted:
		err = m.spotInterrupted(e)
	default:
		err = fmt.Errorf("unknown event %T", ev)
	}
	if err == nil {
		err = m.undeclared
	}
	if err != nil {
		return Result{Instance: inst}, fmt.Errorf("%s in state %s: %w", ev.eventName(), inst.State, err)
	}
	if !m.changed && m.ignored == "" {
		m.ignored = "no change"
	}
	for i := range m.moves {
		m.moves[i].Cause = ev.eventName()
	}
	res := Result{
		Instance:       m.in,
		Changed:        m.changed,
		Moves:          m.moves,
		Effects:        m.effects,
		CreationFailed: m.failed,
	}
	if !m.changed {
		res.Instance = inst
		res.Ignored = m.ignored
	}
	if m.issued {
		if c, ok := PendingCommand(m.in); ok {
			res.Command = &c
		}
	}
	return res, nil
}

type machine struct {
	env   Env
	event string
	// undeclared is the first move made that Transitions lacks.
	undeclared error
	in         Instance
	changed    bool
	issued     bool
	failed     bool
	ignored    string
	moves      []Move
	effects    []Effect
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidTransition, fmt.Sprintf(format, args...))
}

func (m *machine) ignore(reason string) error {
	m.ignored = reason
	return nil
}

func (m *machine) stale(attempt uint32) bool { return attempt != m.in.Attempt }

func (m *machine) staleReason(attempt uint32) error {
	return m.ignore(fmt.Sprintf("stale result of attempt %d (current %d)", attempt, m.in.Attempt))
}

// move changes state and clears the per-step bookkeeping.
func (m *machine) move(to State, reason string) {
	now := m.env.Now
	from := m.in.State
	if m.undeclared == nil && !Declared(from, to, m.event) {
		m.undeclared = undeclared(from, to, m.event)
	}
	m.moves = append(m.moves, Move{From: from, To: to, Reason: reason, InState: now.Sub(m.in.StateSince)})
	m.in.History = append(m.in.History, NewTransition(from, to, reason, now))
	if limit := m.env.Policy.HistoryLimit; limit > 0 && len(m.in.History) > limit {
		m.in.History = slices.Clone(m.in.History[len(m.in.History)-limit:])
	}
	m.in.State = to
	m.in.StateSince = now
	m.in.Deadline = time.Time{}
	m.in.NextRetryAt = time.Time{}
	m.in.InFlight = false
	m.changed = true
}

// progress resets retry bookkeeping after a step succeeded.
func (m *machine) progress() {
	m.in.Retries = 0
	m.in.LastError = nil
	m.in.CreationFailed = false
	m.changed = true
}

// issue sends a new command for the current step.
func (m *machine) issue(timeout time.Duration) {
	m.in.Attempt++
	m.in.InFlight = true
	m.in.Deadline = m.env.Now.Add(timeout)
	m.in.NextRetryAt = time.Time{}
	m.issued = true
	m.changed = true
}

func (m *machine) setError(code, msg string, class int32, retryable bool) {
	m.in.LastError = &ErrorInfo{Code: code, Message: msg, Class: class, Retryable: retryable, At: m.env.Now}
	m.changed = true
}

// creationFailed parks the instance: no command, no deadline, reported to
// CA with the error until it is deleted or retried.
func (m *machine) creationFailed(code, msg string, class int32) {
	m.in.CreationFailed = true
	m.in.InFlight = false
	m.in.Deadline = time.Time{}
	m.in.NextRetryAt = time.Time{}
	m.setError(code, msg, class, false)
	m.failed = true
	m.note("creation failed: " + code + ": " + msg)
}

// note records in the history what happened to the instance without
// moving it (an entry from and to its current state; not a move).
func (m *machine) note(reason string) {
	m.in.History = append(m.in.History, NewTransition(m.in.State, m.in.State, reason, m.env.Now))
	if limit := m.env.Policy.HistoryLimit; limit > 0 && len(m.in.History) > limit {
		m.in.History = slices.Clone(m.in.History[len(m.in.History)-limit:])
	}
}

// backoff schedules a retry of the current step.
func (m *machine) backoff(code, msg string) {
	m.in.InFlight = false
	m.in.Deadline = time.Time{}
	m.in.NextRetryAt = m.env.Now.Add(m.env.Policy.Backoff(m.in.Retries, m.env.Jitter))
	m.in.Retries++
	m.setError(code, msg, ClassOther, true)
}

func (m *machine) canRetry() bool { return int(m.in.Retries) < m.env.Policy.MaxRetries }

func (m *machine) startCreate(e StartCreate) error {
	if m.in.State != StatePending {
		return invalid("only a Pending instance can join a create batch")
	}
	if e.BatchID == "" || e.ClientToken == "" {
		return invalid("empty batch id or client token")
	}
	m.in.BatchID, m.in.ClientToken = e.BatchID, e.ClientToken
	m.move(StateCreating, "create batch "+e.BatchID)
	m.issue(m.env.Policy.LaunchTimeout)
	return nil
}

func (m *machine) cloudCreated(e CloudCreated) error {
	if e.CloudID == "" {
		return invalid("created without a cloud id")
	}
	if m.in.CloudID != "" {
		if m.in.CloudID == e.CloudID {
			// The cloud id may have come first from an observation,
			// without the offering: record where the VM is.
			if e.Offering != nil && m.in.Zone == "" && m.in.State != StateDeleted {
				m.landedOn(*e.Offering)
				return nil
			}
			return m.ignore("duplicate: cloud id already recorded")
		}
		if m.relaunched(e.CloudID) {
			return m.ignore(fmt.Sprintf("stale: VM %s was replaced by a relaunch", e.CloudID))
		}
		if e.Offering != nil && e.BatchID != "" && e.BatchID == m.in.BatchID && !m.stale(e.Attempt) &&
			m.in.State == StateCreating && m.in.InFlight {
			// A relaunch (never for a record that moved on: the new VM
			// of a Created instance would be an orphan the reconciler
			// terminates).
			m.note(RelaunchNote(*e.Offering, m.in.CloudID, e.CloudID))
			m.in.CloudID = e.CloudID
			m.landedOn(*e.Offering)
			// A new VM to wait for: a full launch timeout, under the same
			// attempt (the create command watches it).
			m.in.Deadline = m.env.Now.Add(m.env.Policy.LaunchTimeout)
			return nil
		}
		return m.ignore(fmt.Sprintf("conflicting cloud id %s (have %s)", e.CloudID, m.in.CloudID))
	}
	// A result of an earlier attempt of the same batch carries the same
	// ClientToken and so names the same VM: recording it is never wrong and
	// is what keeps a VM whose create we stopped waiting for from leaking.
	sameBatch := e.BatchID != "" && e.BatchID == m.in.BatchID
	if !sameBatch && (e.BatchID != "" || m.stale(e.Attempt)) {
		return m.ignore("result of another create batch or attempt")
	}
	switch m.in.State {
	case StateCreating, StatePendingDeletion, StateDeleting:
	case StateDeleted:
		return m.ignore("instance already deleted; the reconciler terminates the VM")
	default:
		return invalid("no create outstanding")
	}
	m.in.CloudID = e.CloudID
	if e.Offering != nil {
		m.landedOn(*e.Offering)
	} else {
		m.renderProviderID()
	}
	m.changed = true
	// A Creating instance stays in flight under the same attempt and launch
	// deadline: the create command goes on to watch the VM it created, and
	// its observations carry the create's attempt. Only when no create
	// command is watching (after lifecycle restarted, say) is a watch
	// command published for it (PendingCommand).
	if m.in.State == StateDeleting && !m.in.InFlight {
		m.issue(m.env.Policy.TerminateTimeout)
	}
	return nil
}

// landedOn records the offering the instance's VM was created on and
// renders its providerID with the VM's zone.
func (m *machine) landedOn(o cloudspec.Offering) {
	m.in.Zone, m.in.InstanceType, m.in.CapacityType = o.Zone, o.InstanceType, o.CapacityType
	m.renderProviderID()
	m.changed = true
}

// renderProviderID renders the providerID of the instance's cloud id, in
// the zone its VM is in (the template's when not recorded).
func (m *machine) renderProviderID() {
	t := m.env.Group.Template
	pid, err := ProviderIDFor(t, m.in.Zone, m.in.Group, m.in.ID, m.in.CloudID)
	if err != nil {
		// Templates are validated on load, so this is a template changed
		// under a running instance: fall back to the default rather than
		// lose the cloud id.
		pid, _ = ProviderIDFor(InstanceTemplate{Provider: t.Provider, Account: t.Account, Region: t.Region}, m.in.Zone, m.in.Group, m.in.ID, m.in.CloudID)
	}
	m.in.ProviderID = pid
}

// relaunched reports whether VM cloudID was the instance's until a
// relaunch replaced it (RelaunchNote in its history).
func (m *machine) relaunched(cloudID string) bool {
	for _, t := range m.in.History {
		if strings.Contains(t.Reason, "VM "+cloudID+" replaced by ") {
			return true
		}
	}
	return false
}

func (m *machine) createFailed(e CloudCreateFailed) error {
	if m.stale(e.Attempt) || (e.BatchID != "" && e.BatchID != m.in.BatchID) {
		return m.staleReason(e.Attempt)
	}
	if m.in.CloudID != "" {
		return m.ignore("instance already has a VM")
	}
	msg := fmt.Sprintf("%s: %s", e.Err.Code, e.Err.Message)
	switch m.in.State {
	case StateCreating:
		if !m.in.InFlight {
			return m.ignore("no create outstanding")
		}
		// The call definitively failed, so no VM exists for this token: the
		// next attempt must use a new batch and token.
		m.in.BatchID, m.in.ClientToken = "", ""
		if e.Err.Kind.Retryable() && m.canRetry() {
			m.move(StatePending, "create failed, will retry: "+e.Err.Kind.String())
			m.backoff(cloudCode(e.Err), msg)
			return nil
		}
		class := ClassOther
		if e.Err.Kind == contract.ErrorKindCapacity {
			class = ClassOutOfResources
		}
		if e.Err.Kind.Retryable() {
			msg = fmt.Sprintf("retries exhausted (%d): %s", m.in.Retries, msg)
		}
		m.creationFailed(cloudCode(e.Err), msg, class)
		return nil
	case StatePendingDeletion, StateDeleting:
		m.in.BatchID, m.in.ClientToken = "", ""
		m.changed = true
		if m.in.State == StateDeleting && !m.in.InFlight {
			m.move(StateDeleted, "create failed, no VM to delete")
		}
		return nil
	}
	return invalid("no create outstanding")
}

func cloudCode(e CloudError) string {
	if e.Code != "" {
		return e.Code
	}
	return e.Kind.String()
}

func (m *machine) observed(e CloudObserved) error {
	// An observation is about the VM it names: one of an earlier attempt
	// naming the record's own VM is as true as the current attempt's (a
	// create republished while its instances timed out one by one covers
	// them at different attempts, and its watch observes each VM once).
	sameVM := e.CloudID != "" && e.CloudID == m.in.CloudID && e.Attempt < m.in.Attempt
	if m.stale(e.Attempt) && !sameVM {
		return m.staleReason(e.Attempt)
	}
	if m.in.State != StateCreating || m.in.CloudID == "" || (!m.in.InFlight && !m.in.CreationFailed) {
		return invalid("not watching a launching VM")
	}
	if e.CloudID != "" && e.CloudID != m.in.CloudID {
		if m.relaunched(e.CloudID) || !m.in.InFlight {
			return m.ignore(fmt.Sprintf("observation of VM %s, not the instance's %s", e.CloudID, m.in.CloudID))
		}
		// The VM of a relaunch, observed before the InstancesCreated
		// naming it was applied (events are handled concurrently): try
		// again once it is.
		return Errorf(contract.CodeUnavailable, "observation of VM %s before the relaunch naming it (the instance's VM is %s); redeliver", e.CloudID, m.in.CloudID)
	}
	if m.in.CreationFailed && e.State != CloudRunning {
		return m.ignore("creation already failed")
	}
	// A late RUNNING observation also rescues an instance whose launch
	// deadline passed: the VM is usable after all.
	switch e.State {
	case CloudRunning:
		if e.PrivateIP == "" {
			return m.ignore("running without an IP yet")
		}
		m.in.PrivateIP = e.PrivateIP
		m.progress()
		m.move(StateCreated, "VM running at "+e.PrivateIP)
		m.afterCreated()
	case CloudPending, CloudUnknown:
		return m.ignore("still launching")
	case CloudLaunchFailed:
		m.launchFailed(e.LaunchError)
	case CloudNotFound:
		m.creationFailed("InstanceNotFound", "VM "+m.in.CloudID+" vanished while launching", ClassOther)
	case CloudStopped, CloudTerminating:
		m.creationFailed("Instance"+e.State.String(), "VM "+m.in.CloudID+" is "+e.State.String()+" while launching", ClassOther)
	}
	return nil
}

// launchFailed marks the creation of a VM that failed to launch as
// failed: for want of capacity (the zone or instance type ran out of
// stock after the create call) it is reported to CA as OutOfResources, so
// CA tries another group, with the cloud's code and reason; otherwise as
// Other. CA then deletes the instance, which terminates the VM.
func (m *machine) launchFailed(le *CloudError) {
	code, msg, class := "LaunchFailed", "the cloud reports that VM "+m.in.CloudID+" failed to launch", ClassOther
	if le != nil {
		if le.Code != "" {
			code = le.Code
		}
		if le.Message != "" {
			msg += ": " + le.Message
		}
		if le.Kind == contract.ErrorKindCapacity {
			class = ClassOutOfResources
		}
	}
	m.creationFailed(code, msg, class)
}

// afterCreated starts the after_created step of a Created instance.
func (m *machine) afterCreated() {
	hook := m.env.Group.Hooks.AfterCreated
	if hook == nil {
		m.move(StateJoined, "after_created hook skipped: the group has none")
		m.joined()
		return
	}
	if m.in.PrivateIP == "" {
		m.creationFailed("NoAddress", "the VM has no private IP to run the after_created hook on", ClassOther)
		return
	}
	m.issue(hookDeadline(m.env.Policy.AfterCreatedHookTimeout, hook))
}

func (m *machine) joined() {
	if m.env.NoCluster {
		m.move(StateRunning, "no cluster watcher configured: assuming the node joined")
		return
	}
	m.in.Deadline = m.env.Now.Add(m.env.Policy.JoinTimeout)
}

func (m *machine) hookFinished(e HookFinished) error {
	if m.stale(e.Attempt) {
		return m.staleReason(e.Attempt)
	}
	want := map[HookKind]State{HookAfterCreated: StateCreated, HookBeforeDelete: StatePendingDeletion}[e.Kind]
	if want == StateUnknown || m.in.State != want || !m.in.InFlight {
		return invalid("no %s hook outstanding", e.Kind)
	}
	m.in.HookOutputTail = tail(e.OutputTail, 4096)
	if m.in.SSHHostKey == "" && e.HostKey != "" {
		m.in.SSHHostKey = e.HostKey
	}
	m.changed = true
	if e.Succeeded || e.Skipped {
		reason := e.Kind.String() + " hook succeeded"
		if e.Skipped {
			reason = e.Kind.String() + " hook skipped by the runner"
		}
		m.progress()
		if e.Kind == HookAfterCreated {
			m.move(StateJoined, reason)
			m.joined()
		} else {
			m.move(StateDeleting, reason)
			m.startTerminate()
		}
		return nil
	}
	msg := e.Error
	if e.ExitCode >= 0 {
		msg = fmt.Sprintf("exit code %d: %s", e.ExitCode, e.Error)
	}
	m.hookFailed(e.Kind, msg, e.Retryable)
	return nil
}

func (m *machine) hookFailed(kind HookKind, msg string, retryable bool) {
	code := "AfterCreatedHookFailed"
	if kind == HookBeforeDelete {
		code = "BeforeDeleteHookFailed"
	}
	if kind == HookBeforeDelete && m.in.Interrupted() {
		// The cloud takes the VM back anyway: neither retry nor block.
		m.progress()
		m.move(StateDeleting, "before_delete hook failed, deleting anyway (spot interruption): "+msg)
		m.startTerminate()
		return
	}
	if retryable && m.canRetry() {
		m.backoff(code, msg)
		return
	}
	if !retryable {
		msg = "not retryable: " + msg
	} else {
		msg = fmt.Sprintf("retries exhausted (%d): %s", m.in.Retries, msg)
	}
	if kind == HookAfterCreated {
		m.creationFailed(code, msg, ClassOther)
		return
	}
	hook := m.env.Group.Hooks.BeforeDelete
	if hook != nil && hook.OnFailure == OnFailureBlock {
		// Held until an operator retries or force-deletes it.
		m.in.InFlight = false
		m.in.Deadline = time.Time{}
		m.in.NextRetryAt = time.Time{}
		m.setError(code, msg+" (onFailure=block)", ClassOther, false)
		return
	}
	m.progress()
	m.move(StateDeleting, "before_delete hook failed, deleting anyway: "+msg)
	m.startTerminate()
}

func (m *machine) nodeReady(e NodeReady) error {
	switch m.in.State {
	case StateJoined:
		m.progress()
		if e.NodeName != "" {
			m.in.NodeName = e.NodeName
		}
		m.move(StateRunning, "node "+m.in.Node()+" is Ready")
		m.effects = append(m.effects, Effect{Kind: EffectPatchNode, NodeName: m.in.Node()})
		return nil
	case StatePending, StateCreating, StateCreated:
		return m.ignore("node Ready before the after_created hook finished")
	case StateRunning:
		return m.ignore("already Running")
	}
	return m.ignore("deletion in progress")
}

func (m *machine) deleteRequested(e DeleteRequested) error {
	reason := e.Reason
	if reason == "" {
		reason = "deletion requested"
	}
	switch m.in.State {
	case StatePending:
		m.in.Released = true
		m.progress()
		m.move(StateDeleted, "cancelled before creation: "+reason)
		return nil
	case StateCreating, StateCreated, StateJoined, StateRunning:
		if m.in.LastError != nil {
			reason += " (last error: " + m.in.LastError.Code + ")"
		}
		m.in.Released = true
		m.progress()
		m.move(StatePendingDeletion, reason)
		if e.Force {
			m.move(StateDeleting, "forced: before_delete hook skipped")
			m.startTerminate()
		}
		return nil
	case StatePendingDeletion:
		if e.Force {
			m.progress()
			m.move(StateDeleting, "forced: before_delete hook skipped")
			m.startTerminate()
			return nil
		}
	}
	return m.ignore("already being deleted")
}

func (m *machine) cancel(e Cancel) error {
	if m.in.State != StatePending {
		return invalid("only a Pending instance can be cancelled")
	}
	m.in.Released = true
	m.progress()
	m.move(StateDeleted, "cancelled: "+e.Reason)
	return nil
}

func (m *machine) startDelete() error {
	if !m.in.AwaitingDeletionSlot() {
		return invalid("deletion not queued")
	}
	m.beforeDelete(time.Time{})
	return nil
}

// beforeDelete runs the before_delete step of a PendingDeletion instance.
// A non-zero until (a reclaimed spot VM's termination time) caps the
// hook's deadline, and skips the hook when too little is left for it.
func (m *machine) beforeDelete(until time.Time) {
	hook := m.env.Group.Hooks.BeforeDelete
	left := until.Sub(m.env.Now)
	switch {
	case hook == nil:
		m.move(StateDeleting, "before_delete hook skipped: the group has none")
		m.startTerminate()
	case m.in.PrivateIP == "":
		m.move(StateDeleting, "before_delete hook skipped: the instance never got an IP")
		m.startTerminate()
	case !until.IsZero() && left < minInterruptHook:
		m.move(StateDeleting, "before_delete hook skipped: the termination time is (almost) here")
		m.startTerminate()
	default:
		d := hookDeadline(m.env.Policy.BeforeDeleteHookTimeout, hook)
		if !until.IsZero() && left < d {
			d = left
		}
		m.issue(d)
	}
}

// startTerminate drives a Deleting instance towards Deleted.
func (m *machine) startTerminate() {
	switch {
	case m.in.CloudID != "":
		m.issue(m.env.Policy.TerminateTimeout)
	case m.in.BatchID != "":
		// A create may still return a VM for this token: wait for its
		// outcome (bounded) so the VM can be terminated by id.
		m.in.InFlight = false
		m.in.Deadline = m.env.Now.Add(m.env.Policy.TerminateTimeout)
		m.changed = true
	default:
		m.move(StateDeleted, "no VM was created")
	}
}

func (m *machine) terminated(e CloudTerminated) error {
	if m.stale(e.Attempt) {
		return m.staleReason(e.Attempt)
	}
	if m.in.State != StateDeleting || !m.in.InFlight {
		return invalid("no terminate outstanding")
	}
	m.closeOut("VM terminated")
	return nil
}

// closeOut ends the record: the VM is gone, so the Node object goes too.
func (m *machine) closeOut(reason string) {
	if m.in.Interrupted() {
		reason = ReasonInterrupted + ": " + reason
	}
	m.progress()
	m.move(StateDeleted, reason)
	if !m.env.NoCluster {
		m.effects = append(m.effects, Effect{Kind: EffectDeleteNode, NodeName: m.in.Node()})
	}
}

func (m *machine) terminateFailed(e CloudTerminateFailed) error {
	if m.stale(e.Attempt) {
		return m.staleReason(e.Attempt)
	}
	if m.in.State != StateDeleting || !m.in.InFlight {
		return invalid("no terminate outstanding")
	}
	if e.Err.Kind == contract.ErrorKindNotFound {
		m.closeOut("VM already gone")
		return nil
	}
	// Never give up on a termination: a VM must not leak. Backoff is capped.
	m.backoff(cloudCode(e.Err), fmt.Sprintf("terminate failed: %s: %s", e.Err.Code, e.Err.Message))
	return nil
}

func (m *machine) tick() error {
	now := m.env.Now
	switch {
	case !m.in.Deadline.IsZero() && !now.Before(m.in.Deadline):
		m.timeout()
	case !m.in.NextRetryAt.IsZero() && !now.Before(m.in.NextRetryAt) && !m.in.InFlight && m.in.State != StatePending:
		m.retryDue()
	default:
		return m.ignore("nothing due")
	}
	return nil
}

func (m *machine) timeout() {
	p := m.env.Policy
	switch m.in.State {
	case StateCreating:
		if m.in.CloudID == "" && m.in.InFlight {
			// Outcome unknown: repeat the call with the same ClientToken, so
			// a VM that was created is returned rather than duplicated.
			if m.canRetry() {
				m.in.Retries++
				m.setError("CreateTimeout", fmt.Sprintf("no create result within %s", p.LaunchTimeout), ClassOther, true)
				m.issue(p.LaunchTimeout)
				return
			}
			m.creationFailed("CreateTimeout", fmt.Sprintf("no create result after %d attempts", m.in.Retries+1), ClassOther)
			return
		}
		m.creationFailed("LaunchTimeout", fmt.Sprintf("VM %s not RUNNING with an IP within %s", m.in.CloudID, p.LaunchTimeout), ClassOther)
	case StateCreated:
		m.hookFailed(HookAfterCreated, "no result within the deadline", true)
	case StateJoined:
		m.creationFailed("JoinTimeout", fmt.Sprintf("no Ready node with providerID %s within %s", m.in.ProviderID, p.JoinTimeout), ClassOther)
	case StatePendingDeletion:
		m.hookFailed(HookBeforeDelete, "no result within the deadline", true)
	case StateRunning:
		// The only deadline of a Running instance: its Node has been gone
		// for the whole grace period.
		m.replaceLostNode()
	case StateDeleting:
		if m.in.InFlight {
			m.in.Retries++
			m.setError("TerminateTimeout", fmt.Sprintf("no terminate result within %s", p.TerminateTimeout), ClassOther, true)
			m.issue(p.TerminateTimeout)
			return
		}
		m.move(StateDeleted, "create outcome unknown; the reconciler terminates any VM it finds")
	default:
		m.in.Deadline = time.Time{}
		m.changed = true
	}
}

// retryDue re-issues the current step after a backoff.
func (m *machine) retryDue() {
	switch m.in.State {
	case StateCreated:
		if m.in.CreationFailed {
			return
		}
		m.afterCreated()
	case StatePendingDeletion:
		m.beforeDelete(time.Time{})
	case StateDeleting:
		m.startTerminate()
	default:
		m.in.NextRetryAt = time.Time{}
		m.changed = true
	}
}

func (m *machine) retry() error {
	p := m.env.Policy
	switch {
	case m.in.CreationFailed:
		m.in.CreationFailed = false
		m.in.LastError = nil
		m.in.Retries = 0
		m.changed = true
		switch m.in.State {
		case StateCreating:
			if m.in.CloudID == "" {
				if m.in.BatchID == "" {
					m.move(StatePending, "retry requested")
					return nil
				}
				m.issue(p.LaunchTimeout)
				return nil
			}
			m.issue(p.LaunchTimeout)
		case StateCreated:
			m.afterCreated()
		case StateJoined:
			m.joined()
		}
		return nil
	case m.in.State == StatePending:
		if m.in.NextRetryAt.IsZero() {
			return invalid("nothing to retry")
		}
		m.in.NextRetryAt = time.Time{}
		m.changed = true
		return nil
	case m.in.BlockedOnDeleteHook(), !m.in.NextRetryAt.IsZero() && !m.in.InFlight:
		m.in.LastError = nil
		m.in.Retries = 0
		m.in.NextRetryAt = time.Time{}
		m.changed = true
		m.retryDue()
		return nil
	case m.in.InFlight:
		// Re-issue now (a new attempt makes the old command's result stale).
		switch m.in.State {
		case StateCreating:
			deadline := m.in.Deadline
			m.issue(p.LaunchTimeout)
			if m.in.CloudID != "" && !deadline.IsZero() {
				m.in.Deadline = deadline
			}
		case StateCreated:
			m.afterCreated()
		case StatePendingDeletion:
			m.beforeDelete(time.Time{})
		case StateDeleting:
			m.startTerminate()
		}
		return nil
	case m.in.State == StateDeleting && m.in.CloudID == "" && m.in.BatchID != "":
		// Stop waiting for the create outcome.
		m.move(StateDeleted, "operator retry: gave up waiting for the create outcome")
		return nil
	}
	return invalid("nothing to retry")
}

func (m *machine) vmGone(e VMGone) error {
	switch m.in.State {
	case StateCreated, StateJoined, StateRunning, StatePendingDeletion, StateDeleting:
		// Not released: a live instance that vanished is replaced by the
		// dispatcher (the group is below target again).
		m.closeOut("VM vanished: " + e.Reason)
		return nil
	}
	return m.ignore("not applicable in " + m.in.State.String())
}

// CodeNodeDeleted is the LastError code of a Running instance whose Node
// object was deleted by someone else.
const CodeNodeDeleted = "NodeDeleted"

// nodeGone starts the grace period of a Running instance whose Node was
// deleted by someone else: the Node may register again (a kubelet restart
// re-registers it). When the period ends without it, the instance is
// replaced (see replaceLostNode).
func (m *machine) nodeGone(e NodeGone) error {
	if m.in.State != StateRunning {
		return m.ignore("the node of a " + m.in.State.String() + " instance is not watched")
	}
	if m.in.NodeLost() {
		return m.ignore("already waiting for the node to register again")
	}
	grace := m.env.Policy.NodeDeletedGrace
	name := e.NodeName
	if name == "" {
		name = m.in.Node()
	}
	if grace <= 0 {
		m.setError(CodeNodeDeleted, "node "+name+" was deleted from the cluster", ClassOther, false)
		m.replaceLostNode()
		return nil
	}
	m.in.Deadline = m.env.Now.Add(grace)
	m.setError(CodeNodeDeleted, fmt.Sprintf("node %s was deleted from the cluster; the instance is replaced unless the node registers again by %s",
		name, m.in.Deadline.UTC().Format(time.RFC3339)), ClassOther, false)
	return nil
}

func (m *machine) nodeBack(NodeBack) error {
	if !m.in.NodeLost() {
		return m.ignore("the node was not missing")
	}
	m.in.Deadline = time.Time{}
	m.in.LastError = nil
	m.changed = true
	return nil
}

// replaceLostNode deletes an instance whose Node is gone through the normal
// deletion path, without releasing it: the group's target still counts it,
// so the dispatcher creates a replacement. The before_delete hook is
// skipped: it prepares a Node's departure (drain), and the Node is gone.
func (m *machine) replaceLostNode() {
	reason := "node deleted from the cluster and not registered again"
	if grace := m.env.Policy.NodeDeletedGrace; grace > 0 {
		reason += " within " + grace.String()
	}
	m.in.Deadline = time.Time{}
	// Released as every deletion is; the target is not lowered, so the
	// group is one short and the dispatcher creates the replacement.
	m.in.Released = true
	m.move(StatePendingDeletion, reason+": replacing the instance")
	m.move(StateDeleting, "before_delete hook skipped: the node is gone")
	m.startTerminate()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
