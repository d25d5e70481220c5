package sealed

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Sealed values in place: a secret that lives inside an ordinary string
// field (a hook environment value, a template secret parameter) is
// replaced by a token
//
//	sealed:v1:<key id>:<base64url of the blob>
//
// bound (AEAD associated data) to the purpose and the name of the value,
// so a token copied to another variable, another parameter or another
// purpose does not open.
const TokenPrefix = "sealed:v1:"

// Purposes of sealed values: part of the associated data.
const (
	// PurposeHookEnv: a hook environment value (named by its variable);
	// sealed by the gateway (admin API) and lifecycle (configuration
	// file), opened only by the hook runner.
	PurposeHookEnv = "hook-env"
	// PurposeTemplateParameter: a template's secretParameters entry (named
	// by its top-level parameter, the value is JSON); sealed by the
	// gateway and lifecycle, opened only by the cloud adapter.
	PurposeTemplateParameter = "template-parameter"
)

// ErrNotToken: the value is not a sealed token.
var ErrNotToken = errors.New("not a sealed value")

// IsToken reports whether s looks like a sealed token.
func IsToken(s string) bool { return strings.HasPrefix(s, TokenPrefix) }

// TokenKeyID returns the id of the key a token is sealed under ("" when s
// is not a token).
func TokenKeyID(s string) string {
	if !IsToken(s) {
		return ""
	}
	id, _, ok := strings.Cut(strings.TrimPrefix(s, TokenPrefix), ":")
	if !ok {
		return ""
	}
	return id
}

func tokenAAD(purpose, name string) []byte {
	return []byte("nodesmith/" + purpose + "\x00" + name)
}

// SealString seals value as a token bound to purpose and name.
func (k *Key) SealString(purpose, name, value string) (string, error) {
	blob, err := k.Seal([]byte(value), tokenAAD(purpose, name))
	if err != nil {
		return "", err
	}
	return TokenPrefix + k.ID() + ":" + base64.RawURLEncoding.EncodeToString(blob), nil
}

// OpenString opens a token sealed for purpose and name. Errors never show
// the value.
func (k *Key) OpenString(purpose, name, token string) (string, error) {
	if !IsToken(token) {
		return "", fmt.Errorf("%s %q: %w", purpose, name, ErrNotToken)
	}
	id, b64, ok := strings.Cut(strings.TrimPrefix(token, TokenPrefix), ":")
	if !ok || id == "" {
		return "", fmt.Errorf("%s %q: %w", purpose, name, ErrCorrupt)
	}
	blob, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", purpose, name, ErrCorrupt)
	}
	pt, err := k.Open(blob, id, tokenAAD(purpose, name))
	if err != nil {
		return "", fmt.Errorf("opening %s %q: %w", purpose, name, err)
	}
	return string(pt), nil
}

// Reseal returns token re-sealed under the ring's sealing key, and true,
// when it is sealed under another key of the ring; otherwise token and
// false. A token that does not open is an error.
func (k *Key) Reseal(purpose, name, token string) (string, bool, error) {
	if TokenKeyID(token) == k.ID() {
		return token, false, nil
	}
	v, err := k.OpenString(purpose, name, token)
	if err != nil {
		return token, false, err
	}
	t, err := k.SealString(purpose, name, v)
	if err != nil {
		return token, false, err
	}
	return t, true, nil
}

// SealMap seals every value of m that is not already a token (a token is
// kept as is: it was sealed before). It returns a new map; nil stays nil.
func (k *Key) SealMap(purpose string, m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for name, v := range m {
		if IsToken(v) {
			out[name] = v
			continue
		}
		t, err := k.SealString(purpose, name, v)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// OpenMap opens every token of m (plain values are kept: they were never
// secret, e.g. the standard variables a hook command adds). It returns a
// new map.
func (k *Key) OpenMap(purpose string, m map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(m))
	var errs []error
	for name, v := range m {
		if !IsToken(v) {
			out[name] = v
			continue
		}
		pt, err := k.OpenString(purpose, name, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[name] = pt
	}
	return out, errors.Join(errs...)
}

// Redact returns m with every value replaced by a mark saying whether it
// is sealed ("(sealed)") or set in plaintext ("(set)"): what read-only
// answers show.
func Redact(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for name, v := range m {
		if IsToken(v) {
			out[name] = RedactedSealed
		} else {
			out[name] = RedactedSet
		}
	}
	return out
}

// Marks Redact puts in place of values.
const (
	RedactedSealed = "(sealed)"
	RedactedSet    = "(set)"
)
