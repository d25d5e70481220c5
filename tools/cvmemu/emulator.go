// Package cvmemu emulates the Tencent Cloud CVM API (version 2017-03-12)
// closely enough that the official tencentcloud-sdk-go client can drive it
// over plain HTTP: TC3-HMAC-SHA256 signatures are verified, requests and
// responses have the real shapes and error codes, VMs boot asynchronously,
// and quotas, stock-outs, rate limits and injected faults behave like the
// real service's.
//
// The same emulator core also speaks the Alibaba Cloud ECS API (2014-05-26,
// see Emulator.ECS and StartECS) to the official alibabacloud-go ECS SDK:
// ACS3-HMAC-SHA256 signatures, RPC-style parameters, ECS error codes and
// HTTP statuses. Both front ends share VMs, SSH guests, cluster joins,
// quotas, stock-outs and the state file; each lists only the VMs it
// created and remembers its own ClientTokens. Rate limits and faults are
// set per action for one API (SetFaultsFor, APICVM, APIECS) or for both.
//
// Optionally each RUNNING VM gets an SSH server (package simvm) on its
// loopback "private IP", and joins reported by the VM's kubeadm shim register
// nodes in a simulated cluster (package simcluster):
//
//	emulator -> VM with SSH -> hook runs "kubeadm join" -> cluster node Ready
//
// Capacity and spot (capacity.go, spot.go, adminhttp.go): stock-outs per
// zone, instance type and charge type answer RunInstances with the real
// codes, or (StockOut.AtLaunch) let the call succeed and end the VMs
// LAUNCH_FAILED with a LatestOperationErrorMsg saying so;
// DescribeZoneInstanceConfigInfos (CVM), DescribeInstanceTypes and
// DescribeAvailableResource (ECS, ecsshapes.go) list the instance type
// table per zone with the stock-outs' sold-out status; spot VMs (CVM SPOTPAID with InstanceMarketOptions, ECS SpotStrategy) can
// be reclaimed (ScheduleReclaim), which their metadata endpoint (Metadata,
// one listener, a path prefix per VM) announces before the VM is
// terminated. Admin serves the stock-out and reclaim knobs over HTTP.
//
// A Hold in front of the emulator keeps a call's answer from its client
// after the call took effect, so a test can kill the client at the worst
// moment (the VMs exist, the client does not know them).
//
// It is a development and test tool. By default everything is in memory;
// with Config.StateFile the VMs survive a restart of the process (and with
// a persistent simvm.Factory, their sandboxes and SSH host keys too).
package cvmemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// maxBodyBytes matches the real API's 10 MB limit for POST bodies.
const maxBodyBytes = 10 << 20

// Emulator is the CVM API emulator. It is an http.Handler; use Start for a
// ready-made HTTP server. All methods are safe for concurrent use.
type Emulator struct {
	cfg     Config
	log     *slog.Logger
	ssh     *simvm.Factory
	drain   func(vmID string, args []string) error
	cluster *simcluster.Cluster

	// wg tracks timers and background guest work, so Close can wait.
	wg sync.WaitGroup

	mu             sync.Mutex
	closed         bool
	rng            *mrand.Rand
	launch         LaunchPolicy
	quota          Quota
	stockOuts      []StockOut
	instanceTypes  []InstanceType // read-only after New
	rateLimits     map[scopeKey]float64
	bootDelay      time.Duration
	terminateDelay time.Duration
	faults         map[scopeKey]ActionFaults
	injected       map[scopeKey][]Fault
	accounts       map[string]*account
	// runObserver sees the body of every well-formed RunInstances request
	// (tests check what reached the cloud, e.g. sealed parameters opened).
	runObserver func(account string, body []byte)
	// nonces are the ECS signature nonces seen within the clock skew.
	nonces     map[string]time.Time
	noncePrune int // prune nonces when the map reaches this size
	buckets    map[rateKey]*tokenBucket
	windows    map[rateKey]*rateWindow
	ips        ipAllocator
	seq        uint64
	counters   counters

	// Persistence (Config.StateFile); saveReq is nil without it. saveReq
	// holds one token while a save is due.
	saveReq  chan struct{}
	saveStop chan struct{}
	saveDone chan struct{}
}

// rateKey is an action of one front end called by one account.
type rateKey struct {
	account string
	scopeKey
}

// Option adds optional collaborators to an Emulator.
type Option func(*Emulator)

// WithSSH gives every VM that reaches RUNNING an SSH server from f, bound to
// the VM's private IP. Without it VMs still get IPs, but nothing listens.
func WithSSH(f *simvm.Factory) Option { return func(e *Emulator) { e.ssh = f } }

// WithCluster connects VM joins to c: a kubeadm join on a VM registers the
// node, a kubeadm reset or the VM's termination makes it NotReady (the Node
// object stays, as in a real cluster, until someone deletes it).
func WithCluster(c *simcluster.Cluster) Option { return func(e *Emulator) { e.cluster = c } }

// WithDrain performs the `kubectl drain` calls of the VMs' hooks with
// drain (simvm.VMSpec.OnDrain: the VM's id and kubectl's arguments after
// "drain"), e.g. evictions through a real API server. Without it a drain
// only prints what kubectl would.
func WithDrain(drain func(vmID string, args []string) error) Option {
	return func(e *Emulator) { e.drain = drain }
}

// New returns an Emulator for cfg (see DefaultConfig). With
// Config.StateFile it first restores the saved VMs: it returns once the
// RUNNING ones have their SSH servers back (or retry in the background if
// that failed), and fails if the file cannot be read or makes no sense.
func New(cfg Config, opts ...Option) (*Emulator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.GuestEnv == nil {
		cfg.GuestEnv = DefaultGuestEnv
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ips, err := newIPAllocator(cfg.IPBase)
	if err != nil {
		return nil, err
	}
	e := &Emulator{
		cfg:            cfg,
		log:            log,
		rng:            mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		launch:         cfg.Launch,
		quota:          cfg.Quota,
		stockOuts:      slices.Clone(cfg.StockOuts),
		instanceTypes:  slices.Clone(cfg.InstanceTypes),
		rateLimits:     map[scopeKey]float64{},
		bootDelay:      cfg.BootDelay,
		terminateDelay: cfg.TerminateDelay,
		faults:         map[scopeKey]ActionFaults{},
		injected:       map[scopeKey][]Fault{},
		accounts:       map[string]*account{},
		nonces:         map[string]time.Time{},
		noncePrune:     1024,
		buckets:        map[rateKey]*tokenBucket{},
		windows:        map[rateKey]*rateWindow{},
		ips:            ips,
		counters:       newCounters(),
	}
	if len(e.instanceTypes) == 0 {
		e.instanceTypes = DefaultInstanceTypes()
	}
	for a, r := range cfg.RateLimits {
		e.rateLimits[scopeKey{APIAny, a}] = r
	}
	for _, o := range opts {
		o(e)
	}
	if cfg.StateFile != "" {
		if err := e.openState(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Emulator) now() time.Time { return e.cfg.Now() }

// Close stops all timers, shuts down every VM's SSH server and waits for
// background work, then saves the state (Config.StateFile): VMs keep their
// state for the next New, and with a persistent simvm.Factory their
// sandboxes stay. The handler answers InternalError afterwards.
func (e *Emulator) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	var guests []*simvm.VM
	for _, a := range e.accounts {
		for _, v := range a.vms {
			e.cancelTimerLocked(v)
			e.cancelReclaimLocked(v)
			if v.guest != nil {
				guests = append(guests, v.guest)
				v.guest = nil
			}
		}
	}
	e.mu.Unlock()
	var errs []error
	for _, g := range guests {
		if err := g.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close VM %s: %w", g.ID(), err))
		}
	}
	e.wg.Wait()
	if e.saveReq != nil {
		close(e.saveStop)
		<-e.saveDone
		if err := e.saveState(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// call is one authenticated API request.
type call struct {
	ctx      context.Context
	reqID    string
	action   string
	secretID string
	account  string
	region   string
	api      string // the front end's VMs: apiCVM or apiECS
	// body is the CVM front end's JSON body; params the ECS front end's
	// query and form parameters.
	body   []byte
	params map[string]string
}

// frontEnd is one cloud API served by the emulator core: it owns the wire
// protocol (framing, signature, error shape), the core owns the VMs,
// accounts, rate limits and faults.
type frontEnd interface {
	// actionOf names the request's action, or "" if it names none the
	// front end implements (the counters stay bounded).
	actionOf(r *http.Request) string
	// admit checks protocol and signature and returns the call; the call
	// is non-nil once the action and account are known, even with an
	// error (e.g. a bad region), so rate accounting sees it.
	admit(w http.ResponseWriter, r *http.Request, reqID string) (*call, *apiError)
	// actions are the front end's actions by name.
	actions() map[string]actionFunc
	// write answers the client.
	write(w http.ResponseWriter, reqID string, result any, aerr *apiError)
	// throttled is the error for a request over its rate limit; a token
	// is back after wait.
	throttled(observed int, limit float64, wait time.Duration) *apiError
}

type errorBody struct {
	Code    string `json:"Code"`
	Message string `json:"Message"`
}

type errorResponse struct {
	Error     errorBody `json:"Error"`
	RequestID string    `json:"RequestId"`
}

// ServeHTTP implements the CVM API endpoint (see ECS for the other).
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.serve(cvmFront{e}, w, r)
}

// serve handles one request of front end fe.
func (e *Emulator) serve(fe frontEnd, w http.ResponseWriter, r *http.Request) {
	reqID := newUUID()
	result, aerr, drop := e.handle(fe, w, r, reqID)
	if drop && dropConnection(w) {
		e.log.Debug("fault: dropped connection", "requestId", reqID)
		return
	}
	fe.write(w, reqID, result, aerr)
}

// writeJSON answers payload as JSON with status.
func (e *Emulator) writeJSON(w http.ResponseWriter, reqID string, status int, payload any, fallback string) {
	b, err := json.Marshal(payload)
	if err != nil {
		// Only our own response types are marshalled; this is a bug.
		e.log.Error("marshal response", "err", err, "requestId", reqID)
		b, status = []byte(fallback), http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// dropConnection closes the client connection without a response.
func dropConnection(w http.ResponseWriter) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// handle validates, authenticates and dispatches a request. It returns the
// success payload or an API error, and whether to drop the connection.
func (e *Emulator) handle(fe frontEnd, w http.ResponseWriter, r *http.Request, reqID string) (any, *apiError, bool) {
	action := fe.actionOf(r)
	if action == "" {
		action = invalidAction // keeps the counters bounded whatever clients send
	}
	log := e.log.With("requestId", reqID, "action", action)
	e.countRequest(action)

	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		e.countError(action, CodeInternalError)
		return nil, errf(CodeInternalError, "The emulator is shutting down."), false
	}
	c, aerr := fe.admit(w, r, reqID)
	if c != nil {
		if rerr := e.rateCheck(fe, c, aerr == nil); aerr == nil {
			aerr = rerr
		}
	}
	if aerr != nil {
		log.Debug("request rejected", "code", aerr.Code, "msg", aerr.Message)
		e.countError(action, aerr.Code)
		return nil, aerr, false
	}
	log = log.With("account", c.account)

	fault, aerr := e.applyFaults(c)
	if aerr != nil {
		e.countError(c.action, aerr.Code)
		return nil, aerr, false
	}
	if fault != nil && !fault.AfterCommit {
		log.Debug("fault injected before commit", "code", fault.Code, "drop", fault.DropConnection)
		e.countError(c.action, fault.Code)
		return nil, fault.apiError(), fault.DropConnection
	}

	result, aerr := fe.actions()[c.action](e, c)
	if aerr != nil {
		log.Debug("request failed", "code", aerr.Code, "msg", aerr.Message)
		e.countError(c.action, aerr.Code)
		return nil, aerr, false
	}
	if fault != nil {
		log.Debug("fault injected after commit", "code", fault.Code, "drop", fault.DropConnection)
		e.countError(c.action, fault.Code)
		return nil, fault.apiError(), fault.DropConnection
	}
	return result, nil, false
}

// rateCheck records the call for the peak-rate statistics and, if limit,
// applies the action's rate limit (a token bucket per account and action;
// the real clock, not cfg.Now).
func (e *Emulator) rateCheck(fe frontEnd, c *call, limit bool) *apiError {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := rateKey{c.account, scopeKey{apiOf(c), c.action}}
	now := time.Now()
	win := e.windows[key]
	if win == nil {
		win = &rateWindow{}
		e.windows[key] = win
	}
	observed := win.observe(now)
	if rate := e.rateLimitLocked(c); limit && rate > 0 {
		b := e.buckets[key]
		if b == nil || b.rate != rate {
			b = newTokenBucket(rate, now)
			e.buckets[key] = b
		}
		if !b.allow(now) {
			e.counters.throttled[c.action]++
			return fe.throttled(observed, rate, b.wait())
		}
	}
	return nil
}

// cvmFront is the Tencent Cloud CVM API: JSON POST bodies, X-TC-* headers,
// TC3-HMAC-SHA256, every answer HTTP 200 with {"Response":{...}}.
type cvmFront struct{ e *Emulator }

func (f cvmFront) actionOf(r *http.Request) string {
	if a := r.Header.Get("X-TC-Action"); slices.Contains(Actions, a) {
		return a
	}
	return ""
}

func (f cvmFront) write(w http.ResponseWriter, reqID string, result any, aerr *apiError) {
	payload := map[string]any{"Response": result}
	if aerr != nil {
		payload = map[string]any{"Response": errorResponse{Error: errorBody{Code: aerr.Code, Message: aerr.Message}, RequestID: reqID}}
	}
	w.Header().Set("X-TC-RequestId", reqID)
	f.e.writeJSON(w, reqID, http.StatusOK, payload,
		`{"Response":{"Error":{"Code":"InternalError","Message":"response encoding failed"},"RequestId":"`+reqID+`"}}`)
}

func (f cvmFront) throttled(observed int, limit float64, _ time.Duration) *apiError {
	return errf(CodeRequestLimitExceeded,
		"Your current request times equals to `%d` in a second, which exceeds the frequency limit `%g` for a second. Please reduce the frequency of calls.",
		observed, limit)
}

// actionFunc runs an admitted call of one action.
type actionFunc func(*Emulator, *call) (any, *apiError)

var cvmActions = map[string]actionFunc{
	ActionRunInstances:                    (*Emulator).runInstances,
	ActionDescribeInstances:               (*Emulator).describeInstances,
	ActionDescribeInstancesStatus:         (*Emulator).describeInstancesStatus,
	ActionTerminateInstances:              (*Emulator).terminateInstances,
	ActionAttachResourcesTag:              (*Emulator).attachResourcesTag,
	ActionDescribeZoneInstanceConfigInfos: (*Emulator).describeZoneInstanceConfigInfos,
}

func (f cvmFront) actions() map[string]actionFunc { return cvmActions }

// admit performs what the CVM API gateway does before an action runs:
// protocol checks, signature, version, action and region.
func (f cvmFront) admit(w http.ResponseWriter, r *http.Request, reqID string) (*call, *apiError) {
	e := f.e
	if r.Method != http.MethodPost {
		return nil, errf(CodeInvalidParameter, "The emulator only supports POST requests with a JSON body (got %s).", r.Method)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, errf(CodeInvalidParameter, "Content-Type %q is not supported; use application/json.", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errf(CodeRequestSizeLimitExceeded, "The request body exceeds %d bytes.", maxBodyBytes)
		}
		return nil, errf(CodeInvalidParameter, "Cannot read the request body: %v.", err)
	}
	// A missing Authorization header is an AuthFailure, answered by
	// verifySignature; the other headers are plain parameters.
	for _, h := range []string{"X-TC-Action", "X-TC-Version", "X-TC-Timestamp"} {
		if r.Header.Get(h) == "" {
			return nil, errf(CodeMissingParameter, "The request is missing the required header `%s`.", h)
		}
	}
	ts, err := strconv.ParseInt(r.Header.Get("X-TC-Timestamp"), 10, 64)
	if err != nil {
		return nil, errf(CodeInvalidParameter, "X-TC-Timestamp must be a Unix timestamp in seconds.")
	}
	secretID, aerr := e.verifySignature(r, body, ts)
	if aerr != nil {
		return nil, aerr
	}
	if v, want := r.Header.Get("X-TC-Version"), versionOf(r.Header.Get("X-TC-Action")); v != want {
		return nil, errf(CodeNoSuchVersion, "The API version `%s` does not exist; the emulator serves %s.", v, want)
	}
	action := r.Header.Get("X-TC-Action")
	if !slices.Contains(Actions, action) {
		return nil, errf(CodeInvalidAction, "The action `%s` is not supported by the emulator.", action)
	}
	c := &call{ctx: r.Context(), reqID: reqID, action: action, secretID: secretID, account: e.accountOf(secretID), body: body}
	c.region = r.Header.Get("X-TC-Region")
	if c.region == "" {
		return c, errf(CodeMissingParameter, "The request is missing the required parameter `Region`.")
	}
	if !e.regionOK(c.region) {
		return c, errf(CodeUnsupportedRegion, "The region `%s` is not supported.", c.region)
	}
	return c, nil
}

func (e *Emulator) regionOK(region string) bool {
	return len(e.cfg.Regions) == 0 || slices.Contains(e.cfg.Regions, region)
}

func (e *Emulator) accountOf(secretID string) string {
	if a, ok := e.cfg.Accounts[secretID]; ok && a != "" {
		return a
	}
	return secretID
}

// applyFaults sleeps for injected latency and picks the fault, if any, for
// this request. A non-nil error means the client went away while waiting.
func (e *Emulator) applyFaults(c *call) (*Fault, *apiError) {
	e.mu.Lock()
	own, anyAPI := scopeKey{apiOf(c), c.action}, scopeKey{APIAny, c.action}
	af, ok := e.faults[own]
	if !ok {
		af = e.faults[anyAPI]
	}
	var f *Fault
	if q := e.injected[own]; len(q) > 0 {
		f = &q[0]
		e.injected[own] = q[1:]
	} else if q := e.injected[anyAPI]; len(q) > 0 {
		f = &q[0]
		e.injected[anyAPI] = q[1:]
	} else if af.ErrorRate > 0 && e.rng.Float64() < af.ErrorRate {
		f = &Fault{Code: af.ErrorCode, AfterCommit: af.AfterCommit}
	}
	e.mu.Unlock()

	if af.Latency > 0 {
		t := time.NewTimer(af.Latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.ctx.Done():
			return nil, errf(CodeInternalError, "The client went away.")
		}
	}
	if f != nil {
		ff := *f
		if ff.Code == "" {
			ff.Code = CodeInternalError
		}
		if ff.Message == "" {
			ff.Message = "An internal error occurred (injected fault)."
		}
		return &ff, nil
	}
	return nil, nil
}

// decodeParams decodes a JSON body strictly: unknown fields answer
// UnknownParameter, as the real API does.
func decodeParams(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return errf(CodeUnknownParameter, "The parameter %s is not recognized.", name)
		}
		return errf(CodeInvalidParameter, "The request body is not valid JSON for this action: %v.", err)
	}
	if dec.More() {
		return errf(CodeInvalidParameter, "The request body has trailing data after the JSON object.")
	}
	return nil
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ObserveRunInstances makes f see the JSON body of every well-formed
// RunInstances request, with the calling account (nil stops). For tests.
func (e *Emulator) ObserveRunInstances(f func(account string, body []byte)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runObserver = f
}
