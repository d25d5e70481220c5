package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/restapi"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/api/resource"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func invalid(field, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, contract.CodeInvalidArgument, field+": "+fmt.Sprintf(format, args...)).with("field", field)
}

// durationOf is the record's value of a validated duration ("": none).
func durationOf(s string) *durationpb.Duration {
	if s == "" {
		return nil
	}
	return durationpb.New(restapi.Duration(s))
}

// groupRecord validates spec and builds the record for group id. current is
// the existing record (nil on create).
func groupRecord(spec *GroupSpec, id string, current *statev1.NodeGroup) (*statev1.NodeGroup, error) {
	if spec.ID != "" && spec.ID != id {
		return nil, invalid("id", "%q differs from the id in the path %q", spec.ID, id)
	}
	if err := validateSpec(spec.Validate()); err != nil {
		return nil, err
	}
	g := &statev1.NodeGroup{Id: id, MaxSize: *spec.MaxSize, AdoptExisting: spec.AdoptExisting, Source: "api"}
	if spec.MinSize != nil {
		g.MinSize = *spec.MinSize
	}
	switch {
	case spec.TargetSize != nil:
		g.TargetSize = *spec.TargetSize
	case current != nil:
		g.TargetSize = min(max(current.GetTargetSize(), g.MinSize), g.MaxSize)
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
	g.InstanceTemplate = &statev1.InstanceTemplate{
		Name: it.Name, Provider: it.Provider, Account: it.Account, Region: it.Region, Zone: it.Zone,
		InstanceType: it.InstanceType, Arch: it.Arch, Os: it.OS, HourlyPrice: it.HourlyPrice, SshPort: it.SSHPort,
		ParametersJson: params, ProviderIdTemplate: it.ProviderIDTemplate, HookEnv: it.HookEnv,
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
		rec := &statev1.NodeTemplate{Labels: nt.Labels, Annotations: nt.Annotations, Capacity: nt.Capacity, Allocatable: nt.Allocatable}
		for _, t := range nt.Taints {
			rec.Taints = append(rec.Taints, &statev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		g.NodeTemplate = rec
	}

	if o := spec.AutoscalingOptions; o != nil {
		g.AutoscalingOptions = &statev1.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGpuUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonsetsUtilization:      o.IgnoreDaemonSetsUtilization,
			ScaleDownUnneeded:                durationOf(o.ScaleDownUnneededTime),
			ScaleDownUnready:                 durationOf(o.ScaleDownUnreadyTime),
			MaxNodeProvision:                 durationOf(o.MaxNodeProvisionTime),
		}
	}

	if h := spec.Hooks; h != nil {
		hooks := &statev1.Hooks{}
		for _, hk := range []struct {
			in  *HookSpec
			out **statev1.HookSpec
		}{{h.AfterCreated, &hooks.AfterCreated}, {h.BeforeDelete, &hooks.BeforeDelete}} {
			if hk.in == nil {
				continue
			}
			if strings.TrimSpace(hk.in.Script) == "" {
				// By name: the catalog's hook (checked by the handler).
				*hk.out = &statev1.HookSpec{Name: hk.in.Name}
				continue
			}
			*hk.out = &statev1.HookSpec{Name: hk.in.Name, Script: hk.in.Script, Timeout: durationOf(hk.in.Timeout), Env: hk.in.Env,
				OnFailure: onFailureOf(hk.in.OnFailure)}
		}
		g.Hooks = hooks
	}
	if p := spec.Parallelism; p != nil {
		g.Parallelism = &statev1.Parallelism{Create: p.Create, Delete: p.Delete}
	}
	return g, nil
}

// specOf is the full spec of a record, write-only fields included: the
// base a PATCH merges into. It never leaves the process.
func specOf(r *statev1.NodeGroup) *GroupSpec {
	view := groupJSON(app.GroupView{Record: r}, nil)
	minSize, maxSize, target := r.GetMinSize(), r.GetMaxSize(), r.GetTargetSize()
	spec := &GroupSpec{
		MinSize: &minSize, MaxSize: &maxSize, TargetSize: &target, AdoptExisting: r.GetAdoptExisting(),
		NodeTemplate: view.NodeTemplate, AutoscalingOptions: view.AutoscalingOptions, Parallelism: view.Parallelism,
	}
	if it := r.GetInstanceTemplate(); it != nil {
		spec.InstanceTemplate = &InstanceTemplateSpec{InstanceTemplate: *view.InstanceTemplate, ProviderIDTemplate: it.GetProviderIdTemplate(), HookEnv: it.GetHookEnv(),
			SecretParameters: tokensJSON(it.GetSecretParameters())}
		if it.GetParametersJson() != "" {
			spec.InstanceTemplate.Parameters = json.RawMessage(it.GetParametersJson())
		}
	}
	if h := r.GetHooks(); h != nil {
		spec.Hooks = &HooksSpec{AfterCreated: hookSpecOf(h.GetAfterCreated()), BeforeDelete: hookSpecOf(h.GetBeforeDelete())}
	}
	return spec
}

func hookSpecOf(h *statev1.HookSpec) *HookSpec {
	if h == nil {
		return nil
	}
	return &HookSpec{Name: h.GetName(), Script: h.GetScript(), Timeout: dur(h.GetTimeout()), Env: h.GetEnv(), OnFailure: onFailureName(h.GetOnFailure())}
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
