package cvmemu

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// Limits of the real API.
const (
	maxIDsPerCall       = 100
	maxLimit            = 100
	defaultLimit        = 20
	maxFilters          = 10
	maxFilterValues     = 5
	maxClientTokenLen   = 64
	maxInstanceNameLen  = 128
	maxTagsPerInstance  = 50
	defaultInstanceType = "S5.MEDIUM4"
	defaultChargeType   = "POSTPAID_BY_HOUR"
	defaultInstanceName = "未命名" // what the console shows for unnamed instances
)

var (
	instanceIDPattern    = regexp.MustCompile(`^ins-[a-z0-9]{8}$`)
	ecsInstanceIDPattern = regexp.MustCompile(`^i-[a-z0-9]{20}$`)
)

func instanceIDPatternOf(api string) *regexp.Regexp {
	if api == apiECS {
		return ecsInstanceIDPattern
	}
	return instanceIDPattern
}

// Wire types. Field names are exactly those of the SDK's models.

type placementJSON struct {
	Zone      string `json:"Zone"`
	ProjectID int64  `json:"ProjectId"`
}

type tagJSON struct {
	Key   string `json:"Key"`
	Value string `json:"Value"`
}

type instanceJSON struct {
	Placement                placementJSON `json:"Placement"`
	InstanceID               string        `json:"InstanceId"`
	InstanceType             string        `json:"InstanceType"`
	CPU                      int64         `json:"CPU,omitempty"`
	Memory                   int64         `json:"Memory,omitempty"`
	RestrictState            string        `json:"RestrictState"`
	InstanceName             string        `json:"InstanceName"`
	InstanceChargeType       string        `json:"InstanceChargeType"`
	PrivateIPAddresses       []string      `json:"PrivateIpAddresses"`
	PublicIPAddresses        []string      `json:"PublicIpAddresses"`
	ImageID                  string        `json:"ImageId"`
	CreatedTime              string        `json:"CreatedTime"`
	InstanceState            string        `json:"InstanceState"`
	Tags                     []tagJSON     `json:"Tags"`
	StopChargingMode         string        `json:"StopChargingMode"`
	UUID                     string        `json:"Uuid"`
	LatestOperation          string        `json:"LatestOperation,omitempty"`
	LatestOperationState     string        `json:"LatestOperationState,omitempty"`
	LatestOperationRequestID string        `json:"LatestOperationRequestId,omitempty"`
	LatestOperationErrorMsg  string        `json:"LatestOperationErrorMsg,omitempty"`
	IsolatedSource           string        `json:"IsolatedSource"`
	DisableAPITermination    bool          `json:"DisableApiTermination"`
	DefaultLoginUser         string        `json:"DefaultLoginUser"`
	DefaultLoginPort         int64         `json:"DefaultLoginPort"`
}

type runInstancesResponse struct {
	InstanceIDSet []string `json:"InstanceIdSet"`
	RequestID     string   `json:"RequestId"`
}

type describeInstancesResponse struct {
	TotalCount  int            `json:"TotalCount"`
	InstanceSet []instanceJSON `json:"InstanceSet"`
	RequestID   string         `json:"RequestId"`
}

type instanceStatusJSON struct {
	InstanceID    string `json:"InstanceId"`
	InstanceState string `json:"InstanceState"`
}

type describeInstancesStatusResponse struct {
	TotalCount        int                  `json:"TotalCount"`
	InstanceStatusSet []instanceStatusJSON `json:"InstanceStatusSet"`
	RequestID         string               `json:"RequestId"`
}

type terminateInstancesResponse struct {
	RequestID string `json:"RequestId"`
}

func (e *Emulator) runInstances(c *call) (any, *apiError) {
	var p cvm.RunInstancesRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	obs := e.runObserver
	e.mu.Unlock()
	if obs != nil {
		obs(c.account, bytes.Clone(c.body))
	}
	count := int64(1)
	if p.InstanceCount != nil {
		count = *p.InstanceCount
	}
	if count < 1 || count > int64(e.cfg.MaxInstanceCount) {
		return nil, errf(CodeInvalidParameterValue, "InstanceCount must be in [1, %d], got %d.", e.cfg.MaxInstanceCount, count)
	}
	if p.Placement == nil || deref(p.Placement.Zone) == "" {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `Placement.Zone`.")
	}
	zone := *p.Placement.Zone
	if aerr := e.checkZone(c.region, zone); aerr != nil {
		return nil, aerr
	}
	if deref(p.ImageId) == "" && p.LaunchTemplate == nil {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `ImageId`.")
	}
	instanceType := deref(p.InstanceType)
	if instanceType == "" {
		instanceType = defaultInstanceType
	}
	chargeType := deref(p.InstanceChargeType)
	if chargeType == "" {
		chargeType = defaultChargeType
	}
	token := deref(p.ClientToken)
	if len(token) > maxClientTokenLen {
		return nil, errf(CodeClientTokenTooLong, "ClientToken must be at most %d characters.", maxClientTokenLen)
	}
	name := deref(p.InstanceName)
	if utf8.RuneCountInString(name) > maxInstanceNameLen {
		return nil, errf(CodeInstanceNameTooLong, "InstanceName must be at most %d characters.", maxInstanceNameLen)
	}
	tags, aerr := instanceTags(p.TagSpecification)
	if aerr != nil {
		return nil, aerr
	}
	spot, aerr := e.spotOptions(chargeType, instanceType, p.InstanceMarketOptions)
	if aerr != nil {
		return nil, aerr
	}
	return e.launchVMs(c, cvmDialect, launchSpec{
		spot:         spot,
		zone:         zone,
		instanceType: instanceType,
		imageID:      deref(p.ImageId),
		chargeType:   chargeType,
		token:        token,
		names:        expandNames(name, int(count)),
		tags:         tags,
		dryRun:       deref(p.DryRun),
	}, func(ids []string) any {
		return runInstancesResponse{InstanceIDSet: ids, RequestID: c.reqID}
	})
}

func (e *Emulator) rememberTokenLocked(acct *account, token tokenKey, fingerprint string, ids []string) {
	rec := acct.tokens[token]
	if rec == nil {
		for len(acct.tokenOrder) >= e.cfg.MaxClientTokens {
			old := acct.tokenOrder[0]
			acct.tokenOrder = acct.tokenOrder[1:]
			delete(acct.tokens, old)
			// Remember a fingerprint, so a client re-using a token
			// after it was forgotten is still caught (bounded too).
			if len(acct.evicted) < 10*e.cfg.MaxClientTokens {
				acct.evicted[tokenFingerprint(old)] = struct{}{}
			}
		}
		rec = &tokenRecord{}
		acct.tokens[token] = rec
		acct.tokenOrder = append(acct.tokenOrder, token)
		if _, seen := acct.evicted[tokenFingerprint(token)]; seen {
			rec.creations++ // it created VMs before it was forgotten
		}
	}
	rec.ids = slices.Clone(ids)
	rec.fingerprint = fingerprint
	rec.creations++
	if rec.creations > 1 {
		e.counters.tokensReused++
	}
}

func tokenFingerprint(k tokenKey) uint64 {
	h := fnv.New64a()
	if k.api != apiCVM { // CVM tokens keep the fingerprints of older state files
		h.Write([]byte(k.api + "\x00"))
	}
	h.Write([]byte(k.token))
	return h.Sum64()
}

// checkZone validates a zone against the configuration and the region.
func (e *Emulator) checkZone(region, zone string) *apiError {
	if len(e.cfg.Zones) > 0 {
		if !slices.Contains(e.cfg.Zones, zone) {
			return errf(CodeParamValueZoneNotSupport, "The zone `%s` is not supported.", zone)
		}
	}
	rest, ok := strings.CutPrefix(zone, region+"-")
	if !ok || rest == "" {
		return errf(CodeZoneMismatchRegion, "The zone `%s` does not belong to region `%s`.", zone, region)
	}
	return nil
}

// newInstanceIDLocked returns an unused instance ID: CVM's "ins-" + 8
// lowercase alphanumerics, or ECS's "i-" + 20.
func (e *Emulator) newInstanceIDLocked(api string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	prefix, n := "ins-", 8
	if api == apiECS {
		prefix, n = "i-", 20
	}
	for {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		id := prefix + string(b)
		if e.findLocked(id) == nil {
			return id
		}
	}
}

var namePattern = regexp.MustCompile(`\{R:(\d+)\}`)

// expandNames implements the real naming rules for multi-instance launches:
// "{R:x}" patterns count up from x; without a pattern a suffix 1..n is
// appended when launching more than one instance.
func expandNames(name string, count int) []string {
	out := make([]string, count)
	for i := range out {
		switch {
		case name == "":
			out[i] = defaultInstanceName
		case namePattern.MatchString(name):
			out[i] = namePattern.ReplaceAllStringFunc(name, func(m string) string {
				start, err := strconv.Atoi(namePattern.FindStringSubmatch(m)[1])
				if err != nil {
					return m
				}
				return strconv.Itoa(start + i)
			})
		case count > 1:
			out[i] = name + strconv.Itoa(i+1)
		default:
			out[i] = name
		}
	}
	return out
}

// instanceTags extracts the tags for ResourceType "instance".
func instanceTags(specs []*cvm.TagSpecification) ([]tag, *apiError) {
	var tags []tag
	seen := map[string]bool{}
	for _, spec := range specs {
		if spec == nil {
			continue
		}
		rt := deref(spec.ResourceType)
		switch rt {
		case "instance":
		case "host", "keypair", "disk", "image":
			continue // other resources of the launch; not modelled
		default:
			return nil, errf(CodeInvalidParameterValue, "TagSpecification.ResourceType `%s` is invalid.", rt)
		}
		for _, t := range spec.Tags {
			if t == nil || deref(t.Key) == "" {
				return nil, errf(CodeIllegalTagKey, "A tag key must not be empty.")
			}
			k := *t.Key
			if seen[k] {
				return nil, errf(CodeParamValueDuplicateTags, "The tag key `%s` is specified more than once.", k)
			}
			seen[k] = true
			tags = append(tags, tag{Key: k, Value: deref(t.Value)})
		}
	}
	if len(tags) > maxTagsPerInstance {
		return nil, errf(CodeParamValueLimitExceeded, "At most %d tags per instance are allowed.", maxTagsPerInstance)
	}
	return tags, nil
}

// pageParams validates Offset and Limit (default 0 and 20, Limit at most 100).
func pageParams(offset, limit *int64) (int, int, *apiError) {
	o, l := int64(0), int64(defaultLimit)
	if offset != nil {
		o = *offset
	}
	if limit != nil {
		l = *limit
	}
	if o < 0 {
		return 0, 0, errf(CodeParamValueRange, "Offset must not be negative.")
	}
	if l > maxLimit {
		return 0, 0, errf(CodeParamValueLimitExceeded, "Limit must be at most %d.", maxLimit)
	}
	if l < 1 {
		return 0, 0, errf(CodeParamValueRange, "Limit must be in [1, %d].", maxLimit)
	}
	return int(o), int(l), nil
}

// checkInstanceIDs validates an InstanceIds list and returns it de-duplicated.
func checkInstanceIDs(ids []*string) ([]string, *apiError) {
	if len(ids) > maxIDsPerCall {
		return nil, errf(CodeParamValueLimitExceeded, "At most %d InstanceIds per request are allowed, got %d.", maxIDsPerCall, len(ids))
	}
	out := make([]string, 0, len(ids))
	seen := map[string]bool{}
	for _, p := range ids {
		id := deref(p)
		if !instanceIDPattern.MatchString(id) {
			return nil, errf(CodeInstanceIDMalformed, "The instance ID `%s` is malformed.", id)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

type filter struct {
	name   string
	values []string
}

func checkFilters(fs []*cvm.Filter) ([]filter, *apiError) {
	if len(fs) > maxFilters {
		return nil, errf(CodeParamValueLimitExceeded, "At most %d Filters are allowed.", maxFilters)
	}
	out := make([]filter, 0, len(fs))
	for _, f := range fs {
		if f == nil || deref(f.Name) == "" {
			return nil, errf(CodeInvalidFilter, "A filter needs a Name.")
		}
		name := *f.Name
		switch {
		case slices.Contains([]string{"instance-id", "instance-state", "zone", "instance-name", "private-ip-address",
			"instance-charge-type", "tag-key", "tag-value", "image-id", "instance-type"}, name):
		case strings.HasPrefix(name, "tag:") && len(name) > len("tag:"):
		default:
			return nil, errf(CodeInvalidFilter, "The filter `%s` is not supported.", name)
		}
		if len(f.Values) > maxFilterValues {
			return nil, errf(CodeFilterValueLimitExceeded, "At most %d values per filter are allowed.", maxFilterValues)
		}
		vals := make([]string, 0, len(f.Values))
		for _, v := range f.Values {
			vals = append(vals, deref(v))
		}
		out = append(out, filter{name: name, values: vals})
	}
	return out, nil
}

// match reports whether v passes every filter (values within one filter
// are alternatives).
func (v *vm) match(fs []filter) bool {
	for _, f := range fs {
		if !slices.ContainsFunc(f.values, func(want string) bool { return v.matchOne(f.name, want) }) {
			return false
		}
	}
	return true
}

func (v *vm) matchOne(name, want string) bool {
	switch name {
	case "instance-id":
		return v.id == want
	case "instance-state":
		return v.state == want
	case "zone":
		return v.zone == want
	case "instance-name":
		return strings.Contains(v.name, want) // the real filter is a fuzzy match
	case "private-ip-address":
		return v.ip != "" && v.ip == want
	case "instance-charge-type":
		return v.chargeType == want
	case "image-id":
		return v.imageID == want
	case "instance-type":
		return v.instanceType == want
	case "tag-key":
		return slices.ContainsFunc(v.tags, func(t tag) bool { return t.Key == want })
	case "tag-value":
		return slices.ContainsFunc(v.tags, func(t tag) bool { return t.Value == want })
	default: // tag:<key>
		key := strings.TrimPrefix(name, "tag:")
		return slices.ContainsFunc(v.tags, func(t tag) bool { return t.Key == key && t.Value == want })
	}
}

// selectLocked returns the VMs of the call's account and region: the listed
// ids in request order (unknown ids are skipped, like the real API), or all
// matching the filters, newest first.
func (e *Emulator) selectLocked(c *call, ids []string, fs []filter) []*vm {
	acct := e.accountLocked(c.account)
	var out []*vm
	if len(ids) > 0 {
		for _, id := range ids {
			if v, ok := acct.vms[id]; ok && v.region == c.region && v.api == c.api {
				out = append(out, v)
			}
		}
		return out
	}
	for _, v := range acct.vms {
		if v.region == c.region && v.api == c.api && v.match(fs) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *vm) int { return cmpSeq(b.seq, a.seq) })
	return out
}

func page[T any](items []T, offset, limit int) []T {
	if offset >= len(items) {
		return []T{}
	}
	return items[offset:min(len(items), offset+limit)]
}

func (e *Emulator) describeInstances(c *call) (any, *apiError) {
	var p cvm.DescribeInstancesRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	if len(p.InstanceIds) > 0 && len(p.Filters) > 0 {
		return nil, errf(CodeInvalidParameter, "InstanceIds and Filters cannot be specified at the same time.")
	}
	ids, aerr := checkInstanceIDs(p.InstanceIds)
	if aerr != nil {
		return nil, aerr
	}
	fs, aerr := checkFilters(p.Filters)
	if aerr != nil {
		return nil, aerr
	}
	offset, limit, aerr := pageParams(p.Offset, p.Limit)
	if aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	all := e.selectLocked(c, ids, fs)
	resp := describeInstancesResponse{TotalCount: len(all), InstanceSet: []instanceJSON{}, RequestID: c.reqID}
	for _, v := range page(all, offset, limit) {
		resp.InstanceSet = append(resp.InstanceSet, e.instanceJSONLocked(v))
	}
	return resp, nil
}

func (e *Emulator) describeInstancesStatus(c *call) (any, *apiError) {
	var p cvm.DescribeInstancesStatusRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	ids, aerr := checkInstanceIDs(p.InstanceIds)
	if aerr != nil {
		return nil, aerr
	}
	offset, limit, aerr := pageParams(p.Offset, p.Limit)
	if aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	all := e.selectLocked(c, ids, nil)
	resp := describeInstancesStatusResponse{TotalCount: len(all), InstanceStatusSet: []instanceStatusJSON{}, RequestID: c.reqID}
	for _, v := range page(all, offset, limit) {
		resp.InstanceStatusSet = append(resp.InstanceStatusSet, instanceStatusJSON{InstanceID: v.id, InstanceState: v.state})
	}
	return resp, nil
}

func (e *Emulator) terminateInstances(c *call) (any, *apiError) {
	var p cvm.TerminateInstancesRequestParams
	if aerr := decodeParams(c.body, &p); aerr != nil {
		return nil, aerr
	}
	if len(p.InstanceIds) == 0 {
		return nil, errf(CodeMissingParameter, "The request is missing the required parameter `InstanceIds`.")
	}
	ids, aerr := checkInstanceIDs(p.InstanceIds)
	if aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	acct := e.accountLocked(c.account)
	// All or nothing: validate every id before touching any VM.
	vms := make([]*vm, 0, len(ids))
	for _, id := range ids {
		v, ok := acct.vms[id]
		if !ok || v.region != c.region || v.api != c.api {
			return nil, errf(CodeInstanceIDNotFound, "The instance `%s` is not found.", id)
		}
		if v.state == StateTerminating {
			return nil, errf(CodeInstanceStateTerminating, "The instance `%s` is being terminated.", id)
		}
		vms = append(vms, v)
	}
	for _, v := range vms {
		e.terminateLocked(v, c.action, c.reqID)
	}
	e.log.Info("TerminateInstances", "account", c.account, "ids", ids)
	return terminateInstancesResponse{RequestID: c.reqID}, nil
}

func (e *Emulator) instanceJSONLocked(v *vm) instanceJSON {
	cpu, memMiB := e.vmShapeLocked(v)
	mem := memMiB / 1024
	j := instanceJSON{
		Placement:                placementJSON{Zone: v.zone},
		InstanceID:               v.id,
		InstanceType:             v.instanceType,
		CPU:                      cpu,
		Memory:                   mem,
		RestrictState:            "NORMAL",
		InstanceName:             v.name,
		InstanceChargeType:       v.chargeType,
		PrivateIPAddresses:       []string{},
		ImageID:                  v.imageID,
		CreatedTime:              v.created.Format("2006-01-02T15:04:05Z"),
		InstanceState:            v.state,
		Tags:                     []tagJSON{},
		StopChargingMode:         "NOT_APPLICABLE",
		UUID:                     v.uuid,
		LatestOperation:          v.latestOp,
		LatestOperationState:     v.latestOpState,
		LatestOperationRequestID: v.latestOpRequestID,
		LatestOperationErrorMsg:  v.latestOpErr,
		IsolatedSource:           "NOTISOLATED",
		DefaultLoginUser:         "root",
		DefaultLoginPort:         22,
	}
	if v.state == StateRunning && v.ip != "" {
		j.PrivateIPAddresses = []string{v.ip}
	}
	if v.guest != nil {
		if port, err := portOf(v.guest.Addr()); err == nil {
			j.DefaultLoginPort = port
		}
	}
	for _, t := range v.tags {
		j.Tags = append(j.Tags, tagJSON(t))
	}
	return j
}

func portOf(addr string) (int64, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return 0, fmt.Errorf("no port in %q", addr)
	}
	return strconv.ParseInt(addr[i+1:], 10, 64)
}

var shapePattern = regexp.MustCompile(`^[A-Z0-9]+\.(SMALL|MEDIUM|LARGE|(\d*)XLARGE)(\d+)$`)

// InstanceShape derives CPU and memory (GiB) from names like "S5.MEDIUM4"
// (2 cores, 4 GiB) or "S5.2XLARGE16" (8 cores, 16 GiB), or from ECS names
// (see ECSInstanceShape); 0, 0 if unknown. A VM whose type is in the
// emulator's table reports the table's shape instead (vmShapeLocked).
func InstanceShape(t string) (cpu, mem int64) {
	m := shapePattern.FindStringSubmatch(t)
	if m == nil {
		c, mib := ECSInstanceShape(t)
		return int64(c), int64(mib) / 1024
	}
	mem, _ = strconv.ParseInt(m[3], 10, 64)
	switch m[1] {
	case "SMALL":
		cpu = 1
	case "MEDIUM":
		cpu = 2
	case "LARGE":
		cpu = 4
	default:
		n := int64(1)
		if m[2] != "" {
			n, _ = strconv.ParseInt(m[2], 10, 64)
		}
		cpu = 4 * n
	}
	return cpu, mem
}

// vmShapeLocked is a VM's vCPUs and memory (MiB), the one shape its
// DescribeInstances, the admin listing (VMInfo) and so the simulated
// kubelets report: its type's row in the table, else what the name gives
// (InstanceShape, ECSInstanceShape); 0, 0 for a name of another shape.
func (e *Emulator) vmShapeLocked(v *vm) (cpu, memMiB int64) {
	if v.api == apiECS {
		if it, ok := e.ecsInstanceTypeInfo(v.instanceType); ok {
			return it.CPU, it.Memory * 1024
		}
		c, m := ECSInstanceShape(v.instanceType)
		return int64(c), int64(m)
	}
	if it, ok := e.instanceTypeInfo(v.instanceType); ok {
		return it.CPU, it.Memory * 1024
	}
	c, g := InstanceShape(v.instanceType)
	return c, g * 1024
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
