package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/api/resource"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func invalid(field, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, contract.CodeInvalidArgument, field+": "+fmt.Sprintf(format, args...)).with("field", field)
}

func durationField(field, s string) (*durationpb.Duration, error) {
	if s == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, invalid(field, "invalid duration %q (use Go syntax, e.g. 10m)", s)
	}
	if d < 0 {
		return nil, invalid(field, "must not be negative")
	}
	return durationpb.New(d), nil
}

// groupRecord validates spec and builds the record for group id. current is
// the existing record (nil on create).
func groupRecord(spec *GroupSpec, id string, current *statev1.NodeGroup) (*statev1.NodeGroup, error) {
	if spec.MinSize == nil || spec.MaxSize == nil {
		return nil, invalid("minSize", "minSize and maxSize are required")
	}
	if spec.InstanceTemplate == nil {
		return nil, invalid("instanceTemplate", "is required")
	}
	g := &statev1.NodeGroup{
		Id: id, MinSize: *spec.MinSize, MaxSize: *spec.MaxSize, AdoptExisting: spec.AdoptExisting, Source: "api",
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
	byName := it.Name != "" && it.Provider == "" && it.Account == "" && it.Region == "" && len(it.Parameters) == 0
	if it.Provider == "" && !byName {
		return nil, invalid("instanceTemplate.provider", "is required (or give only the name of a catalog template)")
	}
	if it.HourlyPrice < 0 {
		return nil, invalid("instanceTemplate.hourlyPrice", "must not be negative")
	}
	params := ""
	if len(it.Parameters) > 0 && string(it.Parameters) != "null" {
		var obj map[string]any
		if err := json.Unmarshal(it.Parameters, &obj); err != nil {
			return nil, invalid("instanceTemplate.parameters", "must be a JSON object")
		}
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
		for i, t := range nt.Taints {
			switch t.Effect {
			case "NoSchedule", "PreferNoSchedule", "NoExecute":
			default:
				return nil, invalid(fmt.Sprintf("nodeTemplate.taints[%d].effect", i), "must be NoSchedule, PreferNoSchedule or NoExecute")
			}
			if t.Key == "" {
				return nil, invalid(fmt.Sprintf("nodeTemplate.taints[%d].key", i), "is required")
			}
			rec.Taints = append(rec.Taints, &statev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		g.NodeTemplate = rec
	}

	if o := spec.AutoscalingOptions; o != nil {
		rec := &statev1.AutoscalingOptions{
			ScaleDownUtilizationThreshold:    o.ScaleDownUtilizationThreshold,
			ScaleDownGpuUtilizationThreshold: o.ScaleDownGPUUtilizationThreshold,
			ZeroOrMaxNodeScaling:             o.ZeroOrMaxNodeScaling,
			IgnoreDaemonsetsUtilization:      o.IgnoreDaemonSetsUtilization,
		}
		for name, v := range map[string]*float64{"scaleDownUtilizationThreshold": o.ScaleDownUtilizationThreshold, "scaleDownGpuUtilizationThreshold": o.ScaleDownGPUUtilizationThreshold} {
			if v != nil && (*v < 0 || *v > 1) {
				return nil, invalid("autoscalingOptions."+name, "must be between 0 and 1")
			}
		}
		var err error
		if rec.ScaleDownUnneeded, err = durationField("autoscalingOptions.scaleDownUnneeded", o.ScaleDownUnneeded); err != nil {
			return nil, err
		}
		if rec.ScaleDownUnready, err = durationField("autoscalingOptions.scaleDownUnready", o.ScaleDownUnready); err != nil {
			return nil, err
		}
		if rec.MaxNodeProvision, err = durationField("autoscalingOptions.maxNodeProvision", o.MaxNodeProvision); err != nil {
			return nil, err
		}
		if rec.MaxNodeProvision != nil && rec.MaxNodeProvision.AsDuration() == 0 {
			return nil, invalid("autoscalingOptions.maxNodeProvision", "must be positive (CA deletes nodes not ready within it)")
		}
		g.AutoscalingOptions = rec
	}

	if h := spec.Hooks; h != nil {
		hooks := &statev1.Hooks{}
		for _, hk := range []struct {
			field string
			in    *HookSpec
			out   **statev1.HookSpec
		}{{"hooks.afterCreated", h.AfterCreated, &hooks.AfterCreated}, {"hooks.beforeDelete", h.BeforeDelete, &hooks.BeforeDelete}} {
			if hk.in == nil {
				continue
			}
			if strings.TrimSpace(hk.in.Script) == "" {
				if hk.in.Name == "" || hk.in.Timeout != "" || len(hk.in.Env) > 0 || hk.in.OnFailure != "" {
					return nil, invalid(hk.field+".script", "is required (or give only the name of a catalog hook)")
				}
				// By name: the catalog's hook (checked by the handler).
				*hk.out = &statev1.HookSpec{Name: hk.in.Name}
				continue
			}
			timeout, err := durationField(hk.field+".timeout", hk.in.Timeout)
			if err != nil {
				return nil, err
			}
			spec := &statev1.HookSpec{Name: hk.in.Name, Script: hk.in.Script, Timeout: timeout, Env: hk.in.Env}
			switch strings.ToUpper(hk.in.OnFailure) {
			case "":
			case "CONTINUE", "ON_FAILURE_CONTINUE":
				spec.OnFailure = statev1.OnFailure_ON_FAILURE_CONTINUE
			case "BLOCK", "ON_FAILURE_BLOCK":
				spec.OnFailure = statev1.OnFailure_ON_FAILURE_BLOCK
			default:
				return nil, invalid(hk.field+".onFailure", "must be CONTINUE or BLOCK")
			}
			*hk.out = spec
		}
		g.Hooks = hooks
	}
	if p := spec.Parallelism; p != nil {
		if p.Create < 0 || p.Delete < 0 {
			return nil, invalid("parallelism", "must not be negative")
		}
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
	out := &HookSpec{Name: h.GetName(), Script: h.GetScript(), Timeout: dur(h.GetTimeout()), Env: h.GetEnv()}
	switch h.GetOnFailure() {
	case statev1.OnFailure_ON_FAILURE_CONTINUE:
		out.OnFailure = "CONTINUE"
	case statev1.OnFailure_ON_FAILURE_BLOCK:
		out.OnFailure = "BLOCK"
	}
	return out
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

// applyPatch merges patch into base and decodes the result strictly.
func applyPatch[T any](base *T, patch []byte) (*T, error) {
	var p any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "malformed JSON merge patch")
	}
	if _, ok := p.(map[string]any); !ok {
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "a merge patch must be a JSON object")
	}
	raw, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	merged, err := json.Marshal(mergePatch(doc, p))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	var out T
	if err := dec.Decode(&out); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return nil, invalid(typ.Field, "must be %s", typ.Type)
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(field, `"`)
			return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("unknown field %q", field)).with("field", field)
		}
		return nil, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "invalid patch result: "+err.Error())
	}
	return &out, nil
}
