package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/restapi"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func invalid(field, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, contract.CodeInvalidArgument, field+": "+fmt.Sprintf(format, args...)).with("field", field)
}

// durationOf is the record's value of a validated duration ("": none).
func durationOf(s string) *time.Duration {
	if s == "" {
		return nil
	}
	d := restapi.Duration(s)
	return &d
}

// timeoutOf is a hook timeout, zero when not given.
func timeoutOf(s string) time.Duration {
	if s == "" {
		return 0
	}
	return restapi.Duration(s)
}

// groupRecord validates spec and builds the record for group id. current is
// the existing record (nil on create).
func groupRecord(spec *GroupSpec, id string, current *domain.NodeGroup) (*domain.NodeGroup, error) {
	if spec.ID != "" && spec.ID != id {
		return nil, invalid("id", "%q differs from the id in the path %q", spec.ID, id)
	}
	if err := validateSpec(spec.Validate()); err != nil {
		return nil, err
	}
	g := &domain.NodeGroup{ID: id, MaxSize: *spec.MaxSize, AdoptExisting: spec.AdoptExisting, Source: "api"}
	if spec.MinSize != nil {
		g.MinSize = *spec.MinSize
	}
	switch {
	case spec.TargetSize != nil:
		g.TargetSize = *spec.TargetSize
	case current != nil:
		g.TargetSize = min(max(current.TargetSize, g.MinSize), g.MaxSize)
	default:
		g.TargetSize = g.MinSize
	}
	if err := domain.ValidateBounds(g.MinSize, g.MaxSize, g.TargetSize); err != nil {
		return nil, invalid("targetSize", "%s", domain.MessageOf(err))
	}

	it := spec.InstanceTemplate
	// A template given by name only refers to the catalog's template of
	// that name (the handler checks it exists; lifecycle resolves it).
	if it.Provider == "" && !it.ByName() {
		return nil, invalid("instanceTemplate.provider", "is required (or give only the name of a catalog template)")
	}
	params := ""
	if len(it.Parameters) > 0 && string(it.Parameters) != "null" {
		var compact bytes.Buffer
		if err := json.Compact(&compact, it.Parameters); err != nil {
			return nil, invalid("instanceTemplate.parameters", "must be a JSON object")
		}
		params = compact.String()
	}
	g.InstanceTemplate = &domain.InstanceTemplate{
		Name: it.Name, Provider: it.Provider, Account: it.Account, Region: it.Region, Zone: it.Zone,
		InstanceType: it.InstanceType, Arch: it.Arch, OS: it.OS, HourlyPrice: it.HourlyPrice, SSHPort: it.SSHPort,
		ParametersJSON: params, ProviderIDTemplate: it.ProviderIDTemplate, HookEnv: it.HookEnv,
		CapacityType: it.CapacityType, MaxPrice: it.MaxPrice,
		Offerings: offeringsOf(it.Offerings), OfferingStrategy: it.OfferingStrategy,
	}
	if err := inlineOfferings(g.InstanceTemplate); err != nil {
		return nil, err
	}
	var err error
	if g.InstanceTemplate.SecretParameters, err = secretParameters("instanceTemplate.secretParameters", it.SecretParameters); err != nil {
		return nil, err
	}

	if nt := spec.NodeTemplate; nt != nil {
		for what, m := range map[string]map[string]string{"capacity": nt.Capacity, "allocatable": nt.Allocatable} {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				q, err := resource.ParseQuantity(strings.TrimSpace(m[k]))
				if err != nil || q.Sign() < 0 {
					return nil, invalid("nodeTemplate."+what+"."+k, "invalid quantity %q", m[k])
				}
			}
		}
		rec := &domain.NodeTemplate{Labels: nt.Labels, Annotations: nt.Annotations, Capacity: nt.Capacity, Allocatable: nt.Allocatable}
		for _, t := range nt.Taints {
			rec.Taints = append(rec.Taints, domain.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		g.NodeTemplate = rec
	}

	if o := spec.AutoscalingOptions; o != nil {
		g.AutoscalingOptions = &domain.PartialOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGPUUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonSetsUtilization:      o.IgnoreDaemonSetsUtilization,
			ScaleDownUnneeded:                durationOf(o.ScaleDownUnneededTime),
			ScaleDownUnready:                 durationOf(o.ScaleDownUnreadyTime),
			MaxNodeProvision:                 durationOf(o.MaxNodeProvisionTime),
		}
	}

	if h := spec.Hooks; h != nil {
		hooks := &domain.Hooks{}
		for _, hk := range []struct {
			in  *HookSpec
			out **domain.HookSpec
		}{{h.AfterCreated, &hooks.AfterCreated}, {h.BeforeDelete, &hooks.BeforeDelete}} {
			if hk.in == nil {
				continue
			}
			if strings.TrimSpace(hk.in.Script) == "" {
				// By name: the catalog's hook (checked by the handler).
				*hk.out = &domain.HookSpec{Name: hk.in.Name}
				continue
			}
			*hk.out = &domain.HookSpec{Name: hk.in.Name, Script: hk.in.Script, Timeout: timeoutOf(hk.in.Timeout), Env: hk.in.Env,
				OnFailure: onFailureOf(hk.in.OnFailure)}
		}
		g.Hooks = hooks
	}
	if p := spec.Parallelism; p != nil {
		g.Parallelism = &domain.Parallelism{Create: p.Create, Delete: p.Delete}
	}
	return g, nil
}

// specOf is the full spec of a record, write-only fields included: the
// base a PATCH merges into. It never leaves the process.
func specOf(r *domain.NodeGroup) *GroupSpec {
	view := groupJSON(app.GroupView{Record: r}, nil)
	minSize, maxSize, target := r.MinSize, r.MaxSize, r.TargetSize
	spec := &GroupSpec{
		MinSize: &minSize, MaxSize: &maxSize, TargetSize: &target, AdoptExisting: r.AdoptExisting,
		NodeTemplate: view.NodeTemplate, AutoscalingOptions: view.AutoscalingOptions, Parallelism: view.Parallelism,
	}
	if it := r.InstanceTemplate; it != nil {
		spec.InstanceTemplate = &InstanceTemplateSpec{InstanceTemplate: *view.InstanceTemplate, ProviderIDTemplate: it.ProviderIDTemplate, HookEnv: it.HookEnv,
			SecretParameters: tokensJSON(it.SecretParameters)}
		if it.ParametersJSON != "" {
			spec.InstanceTemplate.Parameters = json.RawMessage(it.ParametersJSON)
		}
	}
	if h := r.Hooks; h != nil {
		spec.Hooks = &HooksSpec{AfterCreated: hookSpecOf(h.AfterCreated), BeforeDelete: hookSpecOf(h.BeforeDelete)}
	}
	return spec
}

func hookSpecOf(h *domain.HookSpec) *HookSpec {
	if h == nil {
		return nil
	}
	return &HookSpec{Name: h.Name, Script: h.Script, Timeout: timeout(h.Timeout), Env: h.Env, OnFailure: onFailureName(h.OnFailure)}
}

// mergePatch applies an RFC 7386 JSON merge patch to doc.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = mergePatch(d[k], v)
	}
	return d
}

// applyPatch merges patch into base and decodes the result strictly. The
// patch may use the deprecated field names (a Warning header each): they
// are renamed before the merge, so they replace the canonical fields.
func applyPatch[T any](w http.ResponseWriter, base *T, patch []byte) (*T, error) {
	var p any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "malformed JSON merge patch")
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "a merge patch must be a JSON object")
	}
	p, warnings, errs := restapi.Normalize(p, base)
	addWarnings(w, warnings)
	if len(errs) > 0 {
		return nil, specError(errs)
	}
	raw, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var out T
	if _, err := restapi.DecodeTree(mergePatch(doc, p), &out, restapi.DecodeOptions{}); err != nil {
		return nil, specError(err)
	}
	return &out, nil
}

// inlineOfferings applies the cloud's rules (libs/cloudspec Reconcile) to
// an inline template that names offerings, a capacity type or a max
// price, as a catalog template write does: the capacity is written into
// the parameters and the offerings checked (422 naming the field under
// instanceTemplate). Other inline templates are stored as given.
func inlineOfferings(t *domain.InstanceTemplate) error {
	if t.CapacityType == "" && t.MaxPrice == "" && len(t.Offerings) == 0 && t.OfferingStrategy == "" {
		return nil
	}
	p, known := cloudspec.Lookup(t.Provider)
	if !known {
		return nil
	}
	ct := cloudspec.Template{
		Zone: t.Zone, InstanceType: t.InstanceType, Parameters: t.ParametersJSON,
		CapacityType: t.CapacityType, MaxPrice: t.MaxPrice, OfferingStrategy: t.OfferingStrategy,
	}
	for _, o := range t.Offerings {
		ct.Offerings = append(ct.Offerings, cloudspec.Offering(o))
	}
	if errs := p.Reconcile(&ct); len(errs) > 0 {
		field := "instanceTemplate." + errs[0].Path
		return newError(http.StatusUnprocessableEntity, contract.CodeInvalidArgument, field+": "+errs[0].Msg).with("field", field)
	}
	t.Zone, t.InstanceType, t.ParametersJSON, t.CapacityType, t.MaxPrice = ct.Zone, ct.InstanceType, ct.Parameters, ct.CapacityType, ct.MaxPrice
	return nil
}
