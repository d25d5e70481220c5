package rest

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/sealed"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Secrets written through the admin API besides account credentials:
// every hook environment value (catalog hooks, templates' hookEnv, groups'
// inline hooks and templates) and every template secret parameter are
// sealed here, in place (libs/sealed tokens bound to the variable or
// parameter name and to their purpose), before they leave the gateway.
// Only the hook runner opens env values and only the cloud adapter opens
// parameters. Read answers show only that a value is sealed.

// secretParameters parses a secretParameters JSON object into parameter
// name -> compact JSON value. A value that is a sealed token (as specOf
// gives back for a PATCH) is kept as the token.
func secretParameters(field string, raw json.RawMessage) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, invalid(field, "must be a JSON object")
	}
	out := make(map[string]string, len(obj))
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if k == "" {
			return nil, invalid(field, "a parameter name must not be empty")
		}
		var s string
		if json.Unmarshal(obj[k], &s) == nil && sealed.IsToken(s) {
			out[k] = s
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, obj[k]); err != nil {
			return nil, invalid(field, "%q is not JSON", k)
		}
		out[k] = compact.String()
	}
	return out, nil
}

// tokensJSON is a sealed secretParameters map as a JSON object of tokens.
func tokensJSON(m map[string]string) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

func (h *handler) noKey(field string) error {
	return newError(http.StatusServiceUnavailable, contract.CodeUnavailable,
		field+" cannot be stored: hook environment values and secret parameters are stored sealed and the gateway has no secrets key (--secrets-key-file)").
		with("field", field)
}

func (h *handler) sealMap(field, purpose string, m map[string]string) (map[string]string, error) {
	if len(m) == 0 {
		return m, nil
	}
	if h.secrets == nil {
		return nil, h.noKey(field)
	}
	out, err := h.secrets.SealMap(purpose, m)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sealTemplate seals t's hook environment and secret parameters in place.
func (h *handler) sealTemplate(field string, t *domain.InstanceTemplate) error {
	if t == nil {
		return nil
	}
	env, err := h.sealMap(field+"hookEnv", sealed.PurposeHookEnv, t.HookEnv)
	if err != nil {
		return err
	}
	params, err := h.sealMap(field+"secretParameters", sealed.PurposeTemplateParameter, t.SecretParameters)
	if err != nil {
		return err
	}
	t.HookEnv, t.SecretParameters = env, params
	return nil
}

// sealHook seals a hook's environment in place.
func (h *handler) sealHook(field string, hk *domain.HookSpec) error {
	if hk == nil {
		return nil
	}
	env, err := h.sealMap(field+"env", sealed.PurposeHookEnv, hk.Env)
	if err != nil {
		return err
	}
	hk.Env = env
	return nil
}

// sealGroup seals a group record's inline template and hooks in place.
func (h *handler) sealGroup(g *domain.NodeGroup) error {
	if err := h.sealTemplate("instanceTemplate.", g.InstanceTemplate); err != nil {
		return err
	}
	if err := h.sealHook("hooks.afterCreated.", g.Hook(true)); err != nil {
		return err
	}
	return h.sealHook("hooks.beforeDelete.", g.Hook(false))
}
