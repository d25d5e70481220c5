package app

import (
	"context"
	"reflect"
	"sort"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// maxStatusMessage bounds one error message in the status summary, so the
// summary stays small whatever the cloud or a hook printed.
const maxStatusMessage = 256

// Status returns the summary of every group: bounds, target, instances per
// state, and the newest last errors of live instances (at most
// Options.StatusErrors). ok is false while not leading.
func (a *App) Status() (s ports.Status, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.loaded {
		return ports.Status{}, false
	}
	byGroup := make(map[string]*ports.GroupStatus, len(a.groups))
	for id, g := range a.groups {
		byGroup[id] = &ports.GroupStatus{ID: id, MinSize: g.g.MinSize, MaxSize: g.g.MaxSize, TargetSize: g.g.TargetSize,
			Instances: map[string]int{}}
	}
	var errs []ports.InstanceError
	for _, r := range a.insts {
		in := r.Instance
		gs, ok := byGroup[in.Group]
		if !ok || in.State == domain.StateDeleted {
			continue
		}
		gs.Instances[in.State.String()]++
		if in.CreationFailed && in.Live() {
			gs.CreationFailed++
		}
		if in.NodeLost() {
			gs.NodeLost++
		}
		if in.LastError != nil {
			errs = append(errs, ports.InstanceError{Group: in.Group, Instance: in.ID, State: in.State.String(),
				Code: in.LastError.Code, Message: truncate(in.LastError.Message, maxStatusMessage), At: in.LastError.At})
		}
	}
	for _, gs := range byGroup {
		s.Groups = append(s.Groups, *gs)
	}
	sort.Slice(s.Groups, func(i, j int) bool { return s.Groups[i].ID < s.Groups[j].ID })
	sort.Slice(errs, func(i, j int) bool {
		if !errs[i].At.Equal(errs[j].At) {
			return errs[i].At.After(errs[j].At)
		}
		return errs[i].Instance < errs[j].Instance
	})
	s.RecentErrors = errs[:min(len(errs), max(a.opts.StatusErrors, 0))]
	s.Orphans = a.heldOrphansLocked()
	return s, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

// RunStatusReporter writes the status summary every StatusInterval when it
// changed, until ctx ends. Without a status sink it returns at once.
func (a *App) RunStatusReporter(ctx context.Context) error {
	if a.status == nil || a.opts.StatusInterval <= 0 {
		return nil
	}
	t := time.NewTicker(a.opts.StatusInterval)
	defer t.Stop()
	var last *ports.Status
	for {
		if s, ok := a.Status(); ok && (last == nil || !reflect.DeepEqual(*last, s)) {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := a.status.WriteStatus(wctx, s)
			cancel()
			if err != nil && !done(ctx) {
				a.log.Warn("writing the status summary failed; retrying at the next interval", "err", err)
			} else if err == nil {
				last = &s
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
