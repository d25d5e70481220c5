package cvmemu

import (
	"slices"
)

// Front-end neutral parts of the emulator core: launching VMs with quotas,
// stock-outs and ClientToken idempotency. Each front end parses its own
// request into a launchSpec and names its own error codes in a dialect.

// API names which front end created a VM; each front end only sees its own.
const (
	apiCVM = ""    // the zero value: state files from before ECS hold CVM VMs
	apiECS = "ecs" // Alibaba Cloud ECS
)

// dialect is a front end's vocabulary for the core's errors.
type dialect struct {
	api string
	// Error codes: instance quota exceeded, stock-out (when the StockOut
	// rule names none), dry run passed, and a ClientToken reused with
	// other parameters ("" means such a retry is answered from the record
	// anyway, as CVM does).
	quota, noStock, dryRun, tokenMismatch string
}

var cvmDialect = dialect{
	api:     apiCVM,
	quota:   CodeInstanceQuota,
	noStock: CodeInsufficientInstanceType,
	dryRun:  CodeDryRunOperation,
}

// launchSpec is a validated launch request.
type launchSpec struct {
	zone, instanceType, imageID, chargeType string
	token                                   string
	// spot, if not nil, makes the VMs spot VMs (reclaimable).
	spot *spotSpec
	// fingerprint identifies the request's parameters, for dialects that
	// refuse a ClientToken reused with other parameters.
	fingerprint string
	names       []string // one per VM: len(names) VMs are launched
	tags        []tag
	attrs       map[string]string
	dryRun      bool
}

// launchVMs creates len(s.names) VMs for the call's account and region, or
// answers the ClientToken's earlier result. answer renders the ids.
func (e *Emulator) launchVMs(c *call, d dialect, s launchSpec, answer func(ids []string) any) (any, *apiError) {
	count := len(s.names)
	e.mu.Lock()
	defer e.mu.Unlock()
	acct := e.accountLocked(c.account)
	if s.token != "" {
		if rec, ok := acct.tokens[tokenKey{d.api, s.token}]; ok {
			if d.tokenMismatch != "" && rec.fingerprint != s.fingerprint {
				return nil, errf(d.tokenMismatch, "The specified parameter has changed while using an already used clientToken.")
			}
			// Idempotent replay: same answer, no new VMs.
			rec.replays++
			e.changedLocked()
			return answer(slices.Clone(rec.ids)), nil
		}
	}
	if q := e.quota.MaxInstances; q > 0 && len(acct.vms)+count > q {
		return nil, errf(d.quota,
			"The instance quota is insufficient: %d instances exist, %d requested, quota %d.", len(acct.vms), count, q)
	}
	if q := e.quota.MaxInstancesPerZone; q > 0 {
		inZone := 0
		for _, v := range acct.vms {
			if v.zone == s.zone {
				inZone++
			}
		}
		if inZone+count > q {
			return nil, errf(d.quota,
				"The instance quota of zone %s is insufficient: %d instances exist, %d requested, quota %d.", s.zone, inZone, count, q)
		}
	}
	if so, ok := e.stockOutLocked(s.zone, s.instanceType, s.chargeType, false); ok {
		return nil, errf(so.code(d), "%s", soldOutMessage(s.instanceType, s.zone))
	}
	if s.dryRun {
		return nil, errf(d.dryRun, "DryRun Operation. It means that the request would have succeeded, but the DryRun parameter was used.")
	}

	now := e.now().UTC()
	ids := make([]string, 0, count)
	for _, name := range s.names {
		e.seq++
		v := &vm{
			id:                e.newInstanceIDLocked(d.api),
			api:               d.api,
			account:           c.account,
			region:            c.region,
			zone:              s.zone,
			instanceType:      s.instanceType,
			imageID:           s.imageID,
			name:              name,
			chargeType:        s.chargeType,
			uuid:              newUUID(),
			clientToken:       s.token,
			tags:              slices.Clone(s.tags),
			attrs:             s.attrs,
			state:             StatePending,
			created:           now,
			seq:               e.seq,
			spot:              s.spot.clone(),
			latestOp:          c.action,
			latestOpState:     "OPERATING",
			latestOpRequestID: c.reqID,
		}
		v.outcome, v.failReason = e.decideOutcomeLocked(d, s.zone, s.instanceType, s.chargeType)
		acct.vms[v.id] = v
		ids = append(ids, v.id)
		e.counters.created++
		if d.api == apiECS {
			e.counters.createdECS++
		}
		e.scheduleLocked(v, e.bootDelay, e.bootLocked)
	}
	if s.token == "" {
		e.counters.createdWithoutToken += count
	} else {
		e.rememberTokenLocked(acct, tokenKey{d.api, s.token}, s.fingerprint, ids)
	}
	e.changedLocked()
	e.log.Info(c.action, "account", c.account, "zone", s.zone, "type", s.instanceType, "ids", ids, "clientToken", s.token)
	return answer(ids), nil
}
