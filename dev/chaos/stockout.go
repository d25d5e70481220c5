package main

import (
	"context"
	"fmt"
	"time"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// The stock-out wave: the group delta (its own zone, two creations in
// flight, so its launches spread over the scale-up) meets its zone and
// instance type sold out twice: first refused by RunInstances
// (ResourceInsufficient.SpecifiedInstanceType), then accepted and failing
// after the call (AtLaunch: the VMs end LAUNCH_FAILED). Each window closes
// once the emulator answered it at least once (or after stockOutWindow),
// and the zone is in stock again for the rest of the run. The creations
// it hits must be reported to CA as failed with class 1 (OutOfResources);
// CA deletes them in the scale-down, and no LAUNCH_FAILED VM may remain.

const (
	deltaGroup     = "delta"
	deltaZone      = "ap-guangzhou-6"
	deltaType      = "S5.MEDIUM4" // harness.ConfigYAML's CVM instance type
	stockOutWindow = 30 * time.Second
)

// stockOutWave is what the wave injected and saw.
type stockOutWave struct {
	// refused are RunInstances answers with the no-stock code while the
	// plain stock-out was set; launchFailed VMs that ended LAUNCH_FAILED
	// while the AtLaunch one was.
	refused, launchFailed int
	// windows are how long each stock-out lasted.
	plainFor, atLaunchFor time.Duration
	// skipped says why a window saw nothing.
	skipped string
}

// stockOutBegin sells delta's zone and type out before the scale-up asks
// for instances, so its first launches are refused; stockOutRun goes on.
func (f *faults) stockOutBegin() {
	f.stockOutStats = f.r.w.Emulator.Stats()
	f.stockOutStart = time.Now()
	f.r.w.Emulator.SetSoldOut(cvmemu.StockOut{Zone: deltaZone, InstanceType: deltaType})
	f.event("stock-out: %s %s sold out (RunInstances refused)", deltaZone, deltaType)
}

// stockOutRun runs the rest of the wave: the plain stock-out until it
// struck, then AtLaunch until it struck, each for at most stockOutWindow.
func (f *faults) stockOutRun(ctx context.Context) error {
	emu := f.r.w.Emulator
	before, start := f.stockOutStats, f.stockOutStart
	refused := func() int {
		return emu.Stats().ErrorCodes[cvmemu.CodeInsufficientInstanceType] - before.ErrorCodes[cvmemu.CodeInsufficientInstanceType]
	}
	_, err := waitFor(ctx, stockOutWindow, func() bool { return refused() > 0 })
	plainFor := time.Since(start)
	n := refused()
	if err != nil {
		emu.ClearSoldOut(deltaZone, deltaType)
		return err
	}

	mid := emu.Stats()
	start = time.Now()
	emu.SetSoldOut(cvmemu.StockOut{Zone: deltaZone, InstanceType: deltaType, AtLaunch: true})
	f.event("stock-out: %s %s sold out at launch (accepted, then LAUNCH_FAILED) after %d refusals in %.1fs", deltaZone, deltaType, n, plainFor.Seconds())
	failed := func() int { return emu.Stats().VMsLaunchFailed - mid.VMsLaunchFailed }
	_, err = waitFor(ctx, stockOutWindow, func() bool { return failed() > 0 })
	atLaunchFor := time.Since(start)
	emu.ClearSoldOut(deltaZone, deltaType)
	m := failed()
	f.event("stock-out: %s %s in stock again (%d launches failed in %.1fs)", deltaZone, deltaType, m, atLaunchFor.Seconds())
	f.mu.Lock()
	f.stockOut = stockOutWave{refused: n, launchFailed: m, plainFor: plainFor, atLaunchFor: atLaunchFor}
	if n == 0 || m == 0 {
		f.stockOut.skipped = fmt.Sprintf("a window closed after %s without striking", stockOutWindow)
	}
	f.mu.Unlock()
	return err
}

// stockOutRow is the wave's line of the table: injected = refusals +
// launch failures; survived = all of them when delta's failures reached CA
// with class 1 (OutOfResources) and nothing was left; lost = delta's instances neither Running
// nor reported failed after the scale-up, plus LAUNCH_FAILED VMs still
// listed at the end (nothing deleted them).
func (r *run) stockOutRow(vms []cvmemu.VMInfo) (row, []string) {
	f := r.faults
	so := f.stockOut
	d := f.afterScaleUp[deltaGroup]
	class1 := 0
	codes := map[string]int{}
	for _, in := range d.instances {
		ei := in.GetStatus().GetErrorInfo()
		if ei.GetErrorCode() == "" || in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
			continue
		}
		codes[ei.GetErrorCode()]++
		if ei.GetInstanceErrorClass() == 1 /* OutOfResources */ {
			class1++
		}
	}
	left := 0
	var violations []string
	for _, vm := range vms {
		if vm.State == cvmemu.StateLaunchFailed {
			left++
			violations = append(violations, fmt.Sprintf("VM %s (zone %s) still LAUNCH_FAILED at the end: nothing deleted it", vm.ID, vm.Zone))
		}
	}
	if so.refused == 0 || so.launchFailed == 0 {
		violations = append(violations, fmt.Sprintf("stock-out wave did not strike: %d refusals, %d launch failures (%s)", so.refused, so.launchFailed, so.skipped))
	}
	unaccounted := r.requested(deltaGroup) - d.running - d.failed
	lost := max(unaccounted, 0) + left
	survived := 0
	if lost == 0 && class1 > 0 {
		survived = so.refused + so.launchFailed
	}
	note := fmt.Sprintf("%s %s sold out %.1fs (RunInstances refused %d times) then %.1fs at launch (%d VMs LAUNCH_FAILED); after the scale-up delta had %d Running, %d failed (class-1 answers: %d; codes %v); LAUNCH_FAILED VMs left at the end: %d; survived = all, when delta's failures reached CA as class 1 and nothing was left",
		deltaZone, deltaType, so.plainFor.Seconds(), so.refused, so.atLaunchFor.Seconds(), so.launchFailed, d.running, d.failed, class1, codes, left)
	return row{"stock-out wave (delta)", so.refused + so.launchFailed, survived, lost, note}, violations
}
