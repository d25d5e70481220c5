package cvmemu

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of the real ECS API.
const (
	ecsMaxAmount         = 100
	ecsMaxIDs            = 100
	ecsMaxTags           = 20
	ecsDefaultPageSize   = 10
	ecsMaxPageSize       = 100
	ecsMaxStatusPageSize = 50
	ecsMaxTagKeyLen      = 128
	ecsMaxTagValueLen    = 128
	ecsMaxClientTokenLen = 64
	ecsMaxTagResources   = 50
)

// ECS instance attributes kept in vm.attrs.
const (
	attrVSwitch        = "vSwitchId"
	attrSecurityGroups = "securityGroupIds" // comma-separated
	attrSpotStrategy   = "spotStrategy"
	attrHostName       = "hostName"
)

// Wire types; field names are those of the SDK's models.

type ecsTagJSON struct {
	TagKey   string `json:"TagKey"`
	TagValue string `json:"TagValue"`
}

type ecsIPList struct {
	IPAddress []string `json:"IpAddress"`
}

type ecsInstanceJSON struct {
	InstanceID          string    `json:"InstanceId"`
	InstanceName        string    `json:"InstanceName"`
	HostName            string    `json:"HostName"`
	RegionID            string    `json:"RegionId"`
	ZoneID              string    `json:"ZoneId"`
	InstanceType        string    `json:"InstanceType"`
	InstanceTypeFamily  string    `json:"InstanceTypeFamily"`
	CPU                 int32     `json:"Cpu"`
	Memory              int32     `json:"Memory"`
	ImageID             string    `json:"ImageId"`
	OSType              string    `json:"OSType"`
	Status              string    `json:"Status"`
	CreationTime        string    `json:"CreationTime"`
	StartTime           string    `json:"StartTime,omitempty"`
	ExpiredTime         string    `json:"ExpiredTime"`
	InstanceChargeType  string    `json:"InstanceChargeType"`
	SpotStrategy        string    `json:"SpotStrategy"`
	InstanceNetworkType string    `json:"InstanceNetworkType"`
	SerialNumber        string    `json:"SerialNumber"`
	DeletionProtection  bool      `json:"DeletionProtection"`
	VpcAttributes       ecsVpc    `json:"VpcAttributes"`
	SecurityGroupIDs    ecsSGList `json:"SecurityGroupIds"`
	InnerIPAddress      ecsIPList `json:"InnerIpAddress"`
	PublicIPAddress     ecsIPList `json:"PublicIpAddress"`
	Tags                ecsTags   `json:"Tags"`
}

type ecsVpc struct {
	VSwitchID        string    `json:"VSwitchId"`
	VpcID            string    `json:"VpcId"`
	PrivateIPAddress ecsIPList `json:"PrivateIpAddress"`
}

type ecsSGList struct {
	SecurityGroupID []string `json:"SecurityGroupId"`
}

type ecsTags struct {
	Tag []ecsTagJSON `json:"Tag"`
}

type ecsRunInstancesResponse struct {
	RequestID      string `json:"RequestId"`
	InstanceIDSets struct {
		InstanceIDSet []string `json:"InstanceIdSet"`
	} `json:"InstanceIdSets"`
	TradePrice float32 `json:"TradePrice"`
}

type ecsDescribeInstancesResponse struct {
	RequestID  string `json:"RequestId"`
	TotalCount int    `json:"TotalCount"`
	PageNumber int    `json:"PageNumber,omitempty"`
	PageSize   int    `json:"PageSize,omitempty"`
	NextToken  string `json:"NextToken"`
	Instances  struct {
		Instance []ecsInstanceJSON `json:"Instance"`
	} `json:"Instances"`
}

type ecsInstanceStatusJSON struct {
	InstanceID string `json:"InstanceId"`
	Status     string `json:"Status"`
}

type ecsDescribeInstanceStatusResponse struct {
	RequestID        string `json:"RequestId"`
	TotalCount       int    `json:"TotalCount"`
	PageNumber       int    `json:"PageNumber"`
	PageSize         int    `json:"PageSize"`
	InstanceStatuses struct {
		InstanceStatus []ecsInstanceStatusJSON `json:"InstanceStatus"`
	} `json:"InstanceStatuses"`
}

type ecsRequestIDResponse struct {
	RequestID string `json:"RequestId"`
}

// Parameter helpers.

func missing(name string) *apiError {
	return errf(ecsCodeMissingParameter, "The input parameter %q that is mandatory for processing this request is not supplied.", name)
}

// intParam parses an optional integer parameter within [lo, hi].
func intParam(p map[string]string, name string, def, lo, hi int) (int, *apiError) {
	s, ok := p[name]
	if !ok || s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, errf(ecsCodeInvalidParameter, "The specified parameter %q is not valid: %q must be an integer in [%d, %d].", name, s, lo, hi)
	}
	return n, nil
}

func boolParam(p map[string]string, name string) (bool, *apiError) {
	switch strings.ToLower(p[name]) {
	case "":
		return false, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errf(ecsCodeInvalidParameter, "The specified parameter %q is not valid: %q must be true or false.", name, p[name])
}

// listParam collects name.1, name.2, ... (the RPC encoding of a list). The
// indexes must run from 1 without gaps.
func listParam(p map[string]string, name string, limit int) ([]string, *apiError) {
	var out []string
	for i := 1; ; i++ {
		v, ok := p[name+"."+strconv.Itoa(i)]
		if !ok {
			break
		}
		if len(out) == limit {
			return nil, errf(ecsCodeInvalidParameter, "The specified parameter %q has more than %d items.", name, limit)
		}
		out = append(out, v)
	}
	for k := range p {
		if rest, ok := strings.CutPrefix(k, name+"."); ok && !strings.Contains(rest, ".") {
			if n, err := strconv.Atoi(rest); err != nil || n < 1 || n > len(out) {
				return nil, errf(ecsCodeInvalidParameter, "The specified parameter %q is not valid: list items must be numbered from 1 without gaps.", k)
			}
		}
	}
	return out, nil
}

// requiredListParam is listParam for a list of at least one item.
func requiredListParam(p map[string]string, name string, limit int) ([]string, *apiError) {
	l, aerr := listParam(p, name, limit)
	if aerr == nil && len(l) == 0 {
		aerr = missing(name + ".1")
	}
	return l, aerr
}

var reservedTagPrefix = regexp.MustCompile(`^(?i)(aliyun|acs:)`)

// tagParams collects Tag.N.Key/Tag.N.Value. requireKey: every item needs a
// key (RunInstances, TagResources); filters may leave it out.
func tagParams(p map[string]string, forFilter bool) ([]tag, *apiError) {
	var tags []tag
	seen := map[string]bool{}
	for i := 1; ; i++ {
		k, hasKey := p["Tag."+strconv.Itoa(i)+".Key"]
		v, hasValue := p["Tag."+strconv.Itoa(i)+".Value"]
		if !hasKey && !hasValue {
			break
		}
		if i > ecsMaxTags {
			return nil, errf(ecsCodeTagCountExceeded, "At most %d tags are allowed.", ecsMaxTags)
		}
		switch {
		case k == "":
			return nil, errf(ecsCodeTagKeyMalformed, "The specified Tag.%d.Key is empty.", i)
		case !forFilter && reservedTagPrefix.MatchString(k):
			return nil, errf(ecsCodeTagKeyMalformed, "The specified Tag.%d.Key %q must not start with aliyun or acs:.", i, k)
		case utf8.RuneCountInString(k) > ecsMaxTagKeyLen:
			return nil, errf(ecsCodeTagKeyMalformed, "The specified Tag.%d.Key is longer than %d characters.", i, ecsMaxTagKeyLen)
		case utf8.RuneCountInString(v) > ecsMaxTagValueLen:
			return nil, errf(ecsCodeTagValueMalformed, "The specified Tag.%d.Value is longer than %d characters.", i, ecsMaxTagValueLen)
		case seen[k]:
			return nil, errf(ecsCodeTagKeyDuplicated, "The tag key %q is specified more than once.", k)
		}
		seen[k] = true
		tags = append(tags, tag{Key: k, Value: v})
	}
	return tags, nil
}

// fingerprint identifies a RunInstances request's parameters, ClientToken
// aside, for IdempotentParameterMismatch.
func fingerprint(p map[string]string) string {
	keys := slices.Sorted(maps.Keys(p))
	h := sha256.New()
	for _, k := range keys {
		if k == "ClientToken" {
			continue
		}
		fmt.Fprintf(h, "%q=%q\n", k, p[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (e *Emulator) ecsRunInstances(c *call) (any, *apiError) {
	p := c.params
	zone := p["ZoneId"]
	vswitch := p["VSwitchId"]
	if zone == "" && vswitch != "" {
		z, ok := e.cfg.VSwitchZones[vswitch]
		if !ok {
			return nil, errf(ecsCodeVSwitchNotFound, "The specified VSwitchId %q does not exist (give ZoneId, or list it in Config.VSwitchZones).", vswitch)
		}
		zone = z
	}
	if zone == "" {
		return nil, missing("ZoneId")
	}
	if aerr := e.checkZone(c.region, zone); aerr != nil {
		return nil, errf(ecsCodeZoneNotFound, "The specified zone %q does not exist in region %q.", zone, c.region)
	}
	instanceType := p["InstanceType"]
	if instanceType == "" {
		return nil, missing("InstanceType")
	}
	imageID := p["ImageId"]
	if imageID == "" {
		return nil, missing("ImageId")
	}
	amount, aerr := intParam(p, "Amount", 1, 1, min(ecsMaxAmount, e.cfg.MaxInstanceCount))
	if aerr != nil {
		return nil, aerr
	}
	token := p["ClientToken"]
	if len(token) > ecsMaxClientTokenLen || strings.IndexFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return nil, errf(ecsCodeClientTokenMalformed, "ClientToken must be at most %d printable ASCII characters.", ecsMaxClientTokenLen)
	}
	chargeType, spot, aerr := ecsChargeAndSpot(p)
	if aerr != nil {
		return nil, aerr
	}
	spotVM, aerr := ecsSpot(spot, chargeType, p["SpotPriceLimit"])
	if aerr != nil {
		return nil, aerr
	}
	sgs, aerr := listParam(p, "SecurityGroupIds", 5)
	if aerr != nil {
		return nil, aerr
	}
	if sg := p["SecurityGroupId"]; sg != "" {
		if len(sgs) > 0 {
			return nil, errf(ecsCodeInvalidParameter, "SecurityGroupId and SecurityGroupIds.N cannot be specified at the same time.")
		}
		sgs = []string{sg}
	}
	tags, aerr := tagParams(p, false)
	if aerr != nil {
		return nil, aerr
	}
	dryRun, aerr := boolParam(p, "DryRun")
	if aerr != nil {
		return nil, aerr
	}
	unique, aerr := boolParam(p, "UniqueSuffix")
	if aerr != nil {
		return nil, aerr
	}
	names := make([]string, amount)
	for i := range names {
		names[i] = p["InstanceName"] // "" renders as the instance ID, as the real default
		if unique && names[i] != "" && amount > 1 {
			names[i] += fmt.Sprintf("%03d", i+1)
		}
	}
	attrs := map[string]string{attrVSwitch: vswitch, attrSecurityGroups: strings.Join(sgs, ","), attrSpotStrategy: spot}
	if hn := p["HostName"]; hn != "" {
		attrs[attrHostName] = hn
	}
	return e.launchVMs(c, ecsDialect, launchSpec{
		zone:         zone,
		instanceType: instanceType,
		imageID:      imageID,
		chargeType:   chargeType,
		token:        token,
		fingerprint:  fingerprint(p),
		names:        names,
		tags:         tags,
		attrs:        attrs,
		dryRun:       dryRun,
		spot:         spotVM,
	}, func(ids []string) any {
		resp := ecsRunInstancesResponse{RequestID: c.reqID}
		resp.InstanceIDSets.InstanceIDSet = ids
		return resp
	})
}

// ecsChargeAndSpot reads InstanceChargeType (PostPaid by default) and
// SpotStrategy (NoSpot by default) as RunInstances and
// DescribeAvailableResource take them.
func ecsChargeAndSpot(p map[string]string) (chargeType, spot string, _ *apiError) {
	chargeType = p["InstanceChargeType"]
	switch chargeType {
	case "":
		chargeType = "PostPaid"
	case "PostPaid", "PrePaid":
	default:
		return "", "", errf(ecsCodeChargeTypeNotSupported, "The specified InstanceChargeType %q is not valid (PostPaid or PrePaid).", chargeType)
	}
	spot = p["SpotStrategy"]
	switch spot {
	case "":
		spot = "NoSpot"
	case "NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit":
	default:
		return "", "", errf(ecsCodeSpotStrategyInvalid, "The specified SpotStrategy %q is not valid (NoSpot, SpotWithPriceLimit or SpotAsPriceGo).", spot)
	}
	return chargeType, spot, nil
}

// ecsSpot validates ECS's spot parameters: a spot instance is pay as you
// go, and SpotWithPriceLimit needs a positive SpotPriceLimit (which is
// only for it). It returns nil for NoSpot.
func ecsSpot(strategy, chargeType, limit string) (*spotSpec, *apiError) {
	if strategy == "NoSpot" {
		if limit != "" {
			return nil, errf(ecsCodeInvalidParameter, "SpotPriceLimit is only valid with SpotStrategy SpotWithPriceLimit.")
		}
		return nil, nil
	}
	if chargeType != "PostPaid" {
		return nil, errf(ecsCodeChargeTypeNotSupported, "A spot instance (SpotStrategy %s) must be PostPaid, not %s.", strategy, chargeType)
	}
	if strategy == "SpotAsPriceGo" {
		if limit != "" {
			return nil, errf(ecsCodeInvalidParameter, "SpotPriceLimit is only valid with SpotStrategy SpotWithPriceLimit.")
		}
		return &spotSpec{}, nil
	}
	if f, err := strconv.ParseFloat(limit, 64); err != nil || f <= 0 {
		if limit == "" {
			return nil, missing("SpotPriceLimit")
		}
		return nil, errf(ecsCodeInvalidParameter, "The specified SpotPriceLimit %q is not a positive price.", limit)
	}
	return &spotSpec{maxPrice: limit}, nil
}

// ecsStatusOf renders the core's state as ECS reports it.
func ecsStatusOf(v *vm) string {
	switch v.state {
	case StatePending:
		if v.ip != "" {
			return ECSStatusStarting // the guest is being started
		}
		return ECSStatusPending
	case StateRunning:
		return ECSStatusRunning
	case StateTerminating:
		return ECSStatusStopping
	}
	return ECSStatusStopped // LAUNCH_FAILED: the instance exists but never ran
}

// instanceIDsParam parses DescribeInstances' InstanceIds, a JSON array.
func instanceIDsParam(p map[string]string) ([]string, *apiError) {
	s := p["InstanceIds"]
	if s == "" {
		return nil, nil
	}
	var ids []string
	if err := json.Unmarshal([]byte(s), &ids); err != nil {
		return nil, errf(ecsCodeInstanceIDsMalformed, "The specified parameter InstanceIds is not a JSON array of strings: %v.", err)
	}
	if len(ids) > ecsMaxIDs {
		return nil, errf(ecsCodeInstanceIDsMalformed, "At most %d InstanceIds are allowed, got %d.", ecsMaxIDs, len(ids))
	}
	if len(ids) == 0 {
		return nil, nil // "[]" filters nothing, like an absent parameter
	}
	return ids, nil
}

// ecsSelectLocked lists the call's ECS VMs of its region that pass keep,
// oldest first (the order NextToken continues in).
func (e *Emulator) ecsSelectLocked(c *call, ids []string, keep func(*vm) bool) []*vm {
	acct := e.accountLocked(c.account)
	var out []*vm
	for _, v := range acct.vms {
		if v.api != apiECS || v.region != c.region || !keep(v) {
			continue
		}
		if ids != nil && !slices.Contains(ids, v.id) {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *vm) int { return cmpSeq(a.seq, b.seq) })
	return out
}

func (v *vm) hasTags(want []tag) bool {
	for _, w := range want {
		if !slices.ContainsFunc(v.tags, func(t tag) bool {
			return t.Key == w.Key && (w.Value == "" || t.Value == w.Value)
		}) {
			return false
		}
	}
	return true
}

// ecsPaging is either PageNumber/PageSize or NextToken/MaxResults paging.
type ecsPaging struct {
	byToken      bool
	after        uint64 // NextToken: the seq of the last VM of the previous page
	number, size int
	maxResults   int
}

func ecsPagingParams(p map[string]string, maxSize int) (ecsPaging, *apiError) {
	var pg ecsPaging
	var aerr *apiError
	if pg.number, aerr = intParam(p, "PageNumber", 1, 1, 1<<30); aerr != nil {
		return pg, aerr
	}
	if pg.size, aerr = intParam(p, "PageSize", ecsDefaultPageSize, 1, maxSize); aerr != nil {
		return pg, aerr
	}
	if pg.maxResults, aerr = intParam(p, "MaxResults", ecsDefaultPageSize, 1, maxSize); aerr != nil {
		return pg, aerr
	}
	_, hasMax := p["MaxResults"]
	tok := p["NextToken"]
	pg.byToken = hasMax || tok != ""
	if tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		seq, perr := strconv.ParseUint(strings.TrimPrefix(string(b), "after:"), 10, 64)
		if err != nil || perr != nil || !strings.HasPrefix(string(b), "after:") {
			return pg, errf(ecsCodeNextTokenMalformed, "The specified NextToken %q is not valid.", tok)
		}
		pg.after = seq
	}
	return pg, nil
}

// page cuts vms (oldest first) to the requested page; next is the
// NextToken for the rest ("" at the end).
func (pg ecsPaging) page(vms []*vm) (out []*vm, next string) {
	if !pg.byToken {
		return page(vms, (pg.number-1)*pg.size, pg.size), ""
	}
	i := 0
	for i < len(vms) && vms[i].seq <= pg.after {
		i++
	}
	out = vms[i:min(len(vms), i+pg.maxResults)]
	if i+len(out) < len(vms) {
		next = base64.RawURLEncoding.EncodeToString([]byte("after:" + strconv.FormatUint(out[len(out)-1].seq, 10)))
	}
	return out, next
}

func (e *Emulator) ecsDescribeInstances(c *call) (any, *apiError) {
	p := c.params
	ids, aerr := instanceIDsParam(p)
	if aerr != nil {
		return nil, aerr
	}
	tags, aerr := tagParams(p, true)
	if aerr != nil {
		return nil, aerr
	}
	pg, aerr := ecsPagingParams(p, ecsMaxPageSize)
	if aerr != nil {
		return nil, aerr
	}
	zone, status, itype, vswitch, image := p["ZoneId"], p["Status"], p["InstanceType"], p["VSwitchId"], p["ImageId"]
	keep := func(v *vm) bool {
		return (zone == "" || v.zone == zone) && (status == "" || ecsStatusOf(v) == status) &&
			(itype == "" || v.instanceType == itype) && (vswitch == "" || v.attrs[attrVSwitch] == vswitch) &&
			(image == "" || v.imageID == image) && v.hasTags(tags)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	all := e.ecsSelectLocked(c, ids, keep)
	vms, next := pg.page(all)
	resp := ecsDescribeInstancesResponse{RequestID: c.reqID, TotalCount: len(all), NextToken: next}
	if !pg.byToken {
		resp.PageNumber, resp.PageSize = pg.number, pg.size
	}
	resp.Instances.Instance = []ecsInstanceJSON{}
	for _, v := range vms {
		resp.Instances.Instance = append(resp.Instances.Instance, e.ecsInstanceJSONLocked(v))
	}
	return resp, nil
}

func (e *Emulator) ecsDescribeInstanceStatus(c *call) (any, *apiError) {
	p := c.params
	ids, aerr := listParam(p, "InstanceId", ecsMaxIDs)
	if aerr != nil {
		return nil, aerr
	}
	if ids == nil && p["InstanceId"] != "" {
		ids = []string{p["InstanceId"]}
	}
	pg, aerr := ecsPagingParams(p, ecsMaxStatusPageSize)
	if aerr != nil {
		return nil, aerr
	}
	pg.byToken = false // this action pages by number only
	zone := p["ZoneId"]
	e.mu.Lock()
	defer e.mu.Unlock()
	all := e.ecsSelectLocked(c, ids, func(v *vm) bool { return zone == "" || v.zone == zone })
	vms, _ := pg.page(all)
	resp := ecsDescribeInstanceStatusResponse{RequestID: c.reqID, TotalCount: len(all), PageNumber: pg.number, PageSize: pg.size}
	resp.InstanceStatuses.InstanceStatus = []ecsInstanceStatusJSON{}
	for _, v := range vms {
		resp.InstanceStatuses.InstanceStatus = append(resp.InstanceStatuses.InstanceStatus,
			ecsInstanceStatusJSON{InstanceID: v.id, Status: ecsStatusOf(v)})
	}
	return resp, nil
}

// ecsInstancesLocked finds every id among the call's ECS VMs, all or
// nothing, answering notFound for the first unknown one.
func (e *Emulator) ecsInstancesLocked(c *call, ids []string, notFound string) ([]*vm, *apiError) {
	acct := e.accountLocked(c.account)
	vms := make([]*vm, 0, len(ids))
	for _, id := range ids {
		v, ok := acct.vms[id]
		if !ok || v.api != apiECS || v.region != c.region {
			return nil, errf(notFound, "The specified instance %q does not exist.", id)
		}
		if !slices.Contains(vms, v) {
			vms = append(vms, v)
		}
	}
	return vms, nil
}

func (e *Emulator) ecsDeleteInstances(c *call) (any, *apiError) {
	p := c.params
	ids, aerr := requiredListParam(p, "InstanceId", ecsMaxIDs)
	if aerr != nil {
		return nil, aerr
	}
	force, aerr := boolParam(p, "Force")
	if aerr != nil {
		return nil, aerr
	}
	dryRun, aerr := boolParam(p, "DryRun")
	if aerr != nil {
		return nil, aerr
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	vms, aerr := e.ecsInstancesLocked(c, ids, ECSCodeInstanceNotFound)
	if aerr != nil {
		return nil, aerr
	}
	// All or nothing: validate every instance before deleting any. A
	// Stopped instance can be deleted; any other needs Force (the real API
	// stops it first), and one being deleted already cannot.
	for _, v := range vms {
		st := ecsStatusOf(v)
		if st == ECSStatusStopping || (!force && st != ECSStatusStopped) {
			return nil, errf(ECSCodeIncorrectStatus,
				"The current status of the resource does not support this operation: instance %s is %s (Force=%t).", v.id, st, force)
		}
	}
	if dryRun {
		return nil, errf(ecsCodeDryRun, "Request validation has been passed with DryRun flag set.")
	}
	for _, v := range vms {
		e.terminateLocked(v, c.action, c.reqID)
	}
	e.log.Info("DeleteInstances", "account", c.account, "ids", ids, "force", force)
	return ecsRequestIDResponse{RequestID: c.reqID}, nil
}

func (e *Emulator) ecsTagResources(c *call) (any, *apiError) {
	p := c.params
	switch rt := p["ResourceType"]; rt {
	case "instance":
	case "":
		return nil, missing("ResourceType")
	default:
		return nil, errf(ecsCodeResourceTypeNotFound, "The specified ResourceType %q is not supported by the emulator (instance).", rt)
	}
	ids, aerr := requiredListParam(p, "ResourceId", ecsMaxTagResources)
	if aerr != nil {
		return nil, aerr
	}
	tags, aerr := tagParams(p, false)
	if aerr != nil {
		return nil, aerr
	}
	if len(tags) == 0 {
		return nil, missing("Tag.1.Key")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	vms, aerr := e.ecsInstancesLocked(c, ids, ecsCodeResourceIDNotFound)
	if aerr != nil {
		return nil, aerr
	}
	merged := make([][]tag, len(vms))
	for i, v := range vms {
		ts := slices.Clone(v.tags)
		for _, t := range tags {
			if j := slices.IndexFunc(ts, func(x tag) bool { return x.Key == t.Key }); j >= 0 {
				ts[j].Value = t.Value
			} else {
				ts = append(ts, t)
			}
		}
		if len(ts) > ecsMaxTags {
			return nil, errf(ecsCodeTagCountExceeded, "Instance %s would have more than %d tags.", v.id, ecsMaxTags)
		}
		merged[i] = ts
	}
	for i, v := range vms {
		v.tags = merged[i]
	}
	e.changedLocked()
	e.log.Info("TagResources", "account", c.account, "ids", ids, "tags", len(tags))
	return ecsRequestIDResponse{RequestID: c.reqID}, nil
}

func (e *Emulator) ecsInstanceJSONLocked(v *vm) ecsInstanceJSON {
	cpu, mem := e.vmShapeLocked(v)
	name := v.name
	if name == "" {
		name = v.id
	}
	host := v.attrs[attrHostName]
	if host == "" {
		host = v.id
	}
	j := ecsInstanceJSON{
		InstanceID:          v.id,
		InstanceName:        name,
		HostName:            host,
		RegionID:            v.region,
		ZoneID:              v.zone,
		InstanceType:        v.instanceType,
		InstanceTypeFamily:  ecsFamily(v.instanceType),
		CPU:                 int32(cpu), //nolint:gosec // the shapes are small
		Memory:              int32(mem), //nolint:gosec // the shapes are small
		ImageID:             v.imageID,
		OSType:              "linux",
		Status:              ecsStatusOf(v),
		CreationTime:        v.created.UTC().Format("2006-01-02T15:04Z"),
		ExpiredTime:         "2099-12-31T15:59Z",
		InstanceChargeType:  v.chargeType,
		SpotStrategy:        v.attrs[attrSpotStrategy],
		InstanceNetworkType: "vpc",
		SerialNumber:        v.uuid,
		VpcAttributes:       ecsVpc{VSwitchID: v.attrs[attrVSwitch], PrivateIPAddress: ecsIPList{IPAddress: []string{}}},
		SecurityGroupIDs:    ecsSGList{SecurityGroupID: []string{}},
		InnerIPAddress:      ecsIPList{IPAddress: []string{}},
		PublicIPAddress:     ecsIPList{IPAddress: []string{}},
		Tags:                ecsTags{Tag: []ecsTagJSON{}},
	}
	if sgs := v.attrs[attrSecurityGroups]; sgs != "" {
		j.SecurityGroupIDs.SecurityGroupID = strings.Split(sgs, ",")
	}
	if v.state == StateRunning && v.ip != "" {
		j.VpcAttributes.PrivateIPAddress.IPAddress = []string{v.ip}
		j.StartTime = j.CreationTime
	}
	for _, t := range v.tags {
		j.Tags.Tag = append(j.Tags.Tag, ecsTagJSON{TagKey: t.Key, TagValue: t.Value})
	}
	return j
}

var (
	ecsTypePattern  = regexp.MustCompile(`^ecs\.([a-z]+)[0-9a-z-]*\.(small|medium|large|([0-9]*)xlarge)$`)
	ecsRatioPattern = regexp.MustCompile(`-c([1-9][0-9]*)m([1-9][0-9]*)\.`)
)

// ecsFamily is "ecs.g6" for "ecs.g6.large".
func ecsFamily(t string) string {
	if i := strings.LastIndexByte(t, '.'); i > 0 {
		return t[:i]
	}
	return t
}

// ECSInstanceShape derives vCPUs and memory (MiB, as DescribeInstances
// reports it) from ECS instance type names like "ecs.g6.large" (2 vCPUs,
// 8 GiB): the size gives the vCPUs (small and medium 1, large 2, xlarge 4,
// Nxlarge 4N), the family letter the GiB per vCPU (c 2, g 4, r 8, others
// 4) unless the family names its ratio ("ecs.t6-c1m2.large": 2 GiB per
// vCPU). 0, 0 if the name has another shape.
func ECSInstanceShape(t string) (cpu, memMiB int32) {
	m := ecsTypePattern.FindStringSubmatch(t)
	if m == nil {
		return 0, 0
	}
	switch m[2] {
	case "small", "medium":
		cpu = 1
	case "large":
		cpu = 2
	default:
		n := 1
		if m[3] != "" {
			n, _ = strconv.Atoi(m[3])
		}
		cpu = int32(4 * n)
	}
	perCPU := int32(4096)
	switch m[1][0] {
	case 'c':
		perCPU = 2048
	case 'r':
		perCPU = 8192
	}
	if r := ecsRatioPattern.FindStringSubmatch(t); r != nil {
		c, _ := strconv.Atoi(r[1])
		g, _ := strconv.Atoi(r[2])
		perCPU = int32(g * 1024 / c)
	}
	return cpu, cpu * perCPU
}
