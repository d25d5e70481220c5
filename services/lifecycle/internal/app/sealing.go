package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Sealer seals values in place (libs/sealed tokens). Lifecycle seals what
// its configuration file holds (every hook environment value and every
// secret parameter) and re-seals stored tokens under the newest key of the
// ring; it never sends or stores those values in plaintext. *sealed.Key
// implements it.
type Sealer interface {
	ID() string
	SealString(purpose, name, value string) (string, error)
	OpenString(purpose, name, token string) (string, error)
	Reseal(purpose, name, token string) (string, bool, error)
	ResealCredentials(account string, blob []byte, keyID string) ([]byte, string, bool, error)
}

// seals seals secret values with the Sealer (nil: such values are refused).
type seals struct {
	sealer Sealer
}

var errNoSealer = errors.New("hook environment values and secret parameters are stored sealed, and lifecycle has no sealing key: set --secrets-key-file (the key ring the gateway, the cloud adapters and the hook runners share)")

// sealValuesLocked seals every plaintext value of m for purpose. A
// plaintext value whose previous token (prev, the stored version) opens
// to the same value under the newest key keeps that token, so an
// unchanged file does not rewrite records (sealing is randomized); a token
// under an older key of the ring is re-sealed. It returns how many values
// were (re-)sealed.
func (sl *seals) sealValuesLocked(purpose string, m, prev map[string]string) (map[string]string, int, error) {
	if len(m) == 0 {
		return m, 0, nil
	}
	out := make(map[string]string, len(m))
	n := 0
	for _, name := range slices.Sorted(maps.Keys(m)) {
		v := m[name]
		if sealed.IsToken(v) {
			if sl.sealer == nil {
				out[name] = v
				continue
			}
			t, changed, err := sl.sealer.Reseal(purpose, name, v)
			if err != nil {
				return nil, 0, err
			}
			if changed {
				n++
			}
			out[name] = t
			continue
		}
		if sl.sealer == nil {
			return nil, 0, fmt.Errorf("%s %q: %w", purpose, name, errNoSealer)
		}
		if p, ok := prev[name]; ok && sealed.TokenKeyID(p) == sl.sealer.ID() {
			if pv, err := sl.sealer.OpenString(purpose, name, p); err == nil && pv == v {
				out[name] = p
				continue
			}
		}
		t, err := sl.sealer.SealString(purpose, name, v)
		if err != nil {
			return nil, 0, err
		}
		out[name] = t
		n++
	}
	return out, n, nil
}

func (sl *seals) sealTemplateLocked(t, prev *domain.InstanceTemplate) (int, error) {
	var pe, pp map[string]string
	if prev != nil {
		pe, pp = prev.HookEnv, prev.SecretParameters
	}
	env, n1, err := sl.sealValuesLocked(sealed.PurposeHookEnv, t.HookEnv, pe)
	if err != nil {
		return 0, fmt.Errorf("template %s hookEnv: %w", t.Name, err)
	}
	params, n2, err := sl.sealValuesLocked(sealed.PurposeTemplateParameter, t.SecretParameters, pp)
	if err != nil {
		return 0, fmt.Errorf("template %s secretParameters: %w", t.Name, err)
	}
	t.HookEnv, t.SecretParameters = env, params
	return n1 + n2, nil
}

func (sl *seals) sealHookLocked(h **domain.HookSpec, prev *domain.HookSpec) (int, error) {
	if *h == nil {
		return 0, nil
	}
	c := **h
	var pe map[string]string
	if prev != nil {
		pe = prev.Env
	}
	env, n, err := sl.sealValuesLocked(sealed.PurposeHookEnv, c.Env, pe)
	if err != nil {
		return 0, fmt.Errorf("hook %s env: %w", c.Name, err)
	}
	c.Env = env
	*h = &c
	return n, nil
}

// sealGroupLocked seals g's template and hooks in place; prev is the
// stored version (nil if none).
func (sl *seals) sealGroupLocked(g *domain.NodeGroup, prev *domain.NodeGroup) (int, error) {
	var pt *domain.InstanceTemplate
	var pa, pb *domain.HookSpec
	if prev != nil {
		pt, pa, pb = &prev.Template, prev.Hooks.AfterCreated, prev.Hooks.BeforeDelete
	}
	t := g.Template
	n, err := sl.sealTemplateLocked(&t, pt)
	if err != nil {
		return 0, err
	}
	g.Template = t
	n1, err := sl.sealHookLocked(&g.Hooks.AfterCreated, pa)
	if err != nil {
		return 0, err
	}
	n2, err := sl.sealHookLocked(&g.Hooks.BeforeDelete, pb)
	if err != nil {
		return 0, err
	}
	return n + n1 + n2, nil
}

// sealEntryLocked seals a catalog entry in place; prev is the stored one.
func (sl *seals) sealEntryLocked(e *domain.CatalogEntry, prev *domain.CatalogEntry) (int, error) {
	switch {
	case e.Template != nil:
		var pt *domain.InstanceTemplate
		if prev != nil {
			pt = prev.Template
		}
		t := *e.Template
		n, err := sl.sealTemplateLocked(&t, pt)
		e.Template = &t
		return n, err
	case e.Hook != nil:
		var ph *domain.HookSpec
		if prev != nil {
			ph = prev.Hook
		}
		return sl.sealHookLocked(&e.Hook, ph)
	case e.Account != nil && len(e.Account.SealedCredentials) > 0 && sl.sealer != nil:
		// Credentials the gateway sealed: moved to the newest key too, so
		// the older keys can go (lifecycle opens them only here).
		acct := *e.Account
		blob, id, changed, err := sl.sealer.ResealCredentials(acct.Name, acct.SealedCredentials, acct.KeyID)
		if err != nil {
			return 0, err
		}
		if !changed {
			return 0, nil
		}
		acct.SealedCredentials, acct.KeyID = blob, id
		e.Account = &acct
		return 1, nil
	}
	return 0, nil
}

// resealLocked re-seals every stored token under an older key of the ring
// (catalog entries and the groups' snapshots) under the newest key, so the
// older keys can be removed from the ring afterwards. It runs with every
// catalog convergence pass (at start with leadership, then periodically),
// and logs once when every stored value is under the newest key: the
// signal of the rotation procedure (README, "Rotating the sealing key").
func (ct *catalog) resealLocked(ctx context.Context, revs *Revisions) error {
	if ct.sealer == nil {
		return nil
	}
	var errs []error
	resealed := 0
	refs := slices.SortedFunc(maps.Keys(ct.cat.entries), func(x, y domain.CatalogRef) int {
		if x.Kind != y.Kind {
			return int(x.Kind) - int(y.Kind)
		}
		return strings.Compare(x.Name, y.Name)
	})
	for _, ref := range refs {
		rec := ct.cat.entries[ref]
		next := cloneEntry(rec.e)
		n, err := ct.sealEntryLocked(&next, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ref, err))
			continue
		}
		if n == 0 {
			continue
		}
		if _, err := ct.writeCatalogLocked(ctx, rec, next); err != nil {
			errs = append(errs, fmt.Errorf("re-sealing %s: %w", ref, err))
			if errors.Is(err, ports.ErrConflict) {
				ct.refreshCatalogLocked(ctx, ref)
			}
			continue
		}
		resealed += n
	}
	for _, id := range ct.sortedGroupIDsLocked() {
		rec := ct.groups[id]
		next := rec.g
		n, err := ct.sealGroupLocked(&next, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", id, err))
			continue
		}
		if n == 0 {
			continue
		}
		rev, err := ct.writeGroupLocked(ctx, rec, next)
		if err != nil {
			errs = append(errs, fmt.Errorf("re-sealing group %s: %w", id, err))
			if errors.Is(err, ports.ErrConflict) {
				ct.refreshGroupLocked(ctx, id)
			}
			continue
		}
		revs.group(rev)
		resealed += n
	}
	if resealed > 0 {
		ct.log.Info("re-sealed stored secret values under the newest sealing key", "values", resealed, "key_id", ct.sealer.ID())
	}
	err := errors.Join(errs...)
	state := "current:" + ct.sealer.ID()
	if err != nil {
		state = "pending"
	}
	if state != ct.sealedState {
		ct.sealedState = state
		if err == nil {
			ct.log.Info("every stored sealed value is under the newest sealing key; older keys can be removed from the key ring", "key_id", ct.sealer.ID())
		}
	}
	return err
}
