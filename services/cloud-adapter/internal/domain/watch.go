package domain

import "time"

// Watch follows a set of VMs until each has settled, deciding which
// observations are worth reporting. It reports a VM's state only when it
// changes, never reports RUNNING without a private IP (nothing can be done
// with such a VM yet), and concludes NOT_FOUND only after the VM has been
// absent for a grace period, because a freshly created VM can be missing
// from Describe answers for a few seconds.
//
// A VM has settled once it is RUNNING with an IP, LAUNCH_FAILED, STOPPED,
// TERMINATING or NOT_FOUND: none of them turns into a usable node by itself.
type Watch struct {
	grace time.Duration
	order []string
	vms   map[string]*watched
}

type watched struct {
	last        State
	absentSince time.Time
	settled     bool
}

// Change is an observation to report.
type Change struct {
	CloudID string
	Status  Status
}

// NewWatch watches cloudIDs (duplicates are watched once). notFoundGrace is
// how long a VM must stay absent before it is reported NOT_FOUND.
func NewWatch(cloudIDs []string, notFoundGrace time.Duration) *Watch {
	w := &Watch{grace: notFoundGrace, vms: make(map[string]*watched, len(cloudIDs))}
	for _, id := range cloudIDs {
		if _, dup := w.vms[id]; dup || id == "" {
			continue
		}
		w.vms[id] = &watched{}
		w.order = append(w.order, id)
	}
	return w
}

// Add watches one more VM (a VM created during the watch); a VM already
// watched, or an empty id, is ignored.
func (w *Watch) Add(cloudID string) {
	if _, dup := w.vms[cloudID]; dup || cloudID == "" {
		return
	}
	w.vms[cloudID] = &watched{}
	w.order = append(w.order, cloudID)
}

// Pending returns the VMs not settled yet, in the order given to NewWatch.
func (w *Watch) Pending() []string {
	var ids []string
	for _, id := range w.order {
		if !w.vms[id].settled {
			ids = append(ids, id)
		}
	}
	return ids
}

// Done reports whether every VM has settled.
func (w *Watch) Done() bool { return len(w.Pending()) == 0 }

// Observe applies one round of Describe answers taken at now: found holds the
// VMs the cloud returned (by cloud id); a pending VM missing from it is
// absent. It returns the changes to report, in watch order.
func (w *Watch) Observe(now time.Time, found map[string]Status) []Change {
	var changes []Change
	for _, id := range w.order {
		vm := w.vms[id]
		if vm.settled {
			continue
		}
		st, ok := found[id]
		if !ok {
			if vm.absentSince.IsZero() {
				vm.absentSince = now
			}
			if now.Sub(vm.absentSince) >= w.grace {
				vm.settled = true
				vm.last = StateNotFound
				changes = append(changes, Change{CloudID: id, Status: Status{CloudID: id, State: StateNotFound}})
			}
			continue
		}
		vm.absentSince = time.Time{}
		state := st.State
		if state == StateRunning && st.PrivateIP == "" {
			// Running without an address yet: still on its way.
			state = StatePending
		}
		if state == StateUnknown {
			continue
		}
		vm.settled = settled(state)
		if state != vm.last {
			vm.last = state
			st.CloudID = id
			st.State = state
			changes = append(changes, Change{CloudID: id, Status: st})
		}
	}
	return changes
}

func settled(s State) bool {
	switch s {
	case StateRunning, StateLaunchFailed, StateStopped, StateTerminating, StateNotFound:
		return true
	}
	return false
}
