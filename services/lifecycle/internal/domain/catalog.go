package domain

import (
	"fmt"
	"strings"
	"time"
)

// CatalogKind is the kind of a catalog entry.
type CatalogKind int

// Catalog kinds.
const (
	KindUnknown CatalogKind = iota
	KindTemplate
	KindAccount
	KindHook
)

func (k CatalogKind) String() string {
	switch k {
	case KindTemplate:
		return "instance template"
	case KindAccount:
		return "cloud account"
	case KindHook:
		return "hook"
	}
	return "unknown kind"
}

// Account is a cloud account of the catalog. Its credentials, when set,
// are sealed (opaque here): only the gateway and the cloud adapter hold
// the key.
type Account struct {
	Name     string
	Provider string
	// Regions the account is used in; the first is the default region of
	// templates on the account that name none.
	Regions []string
	// SealedCredentials are opaque; empty means the cloud adapter's own
	// files or environment hold the credentials.
	SealedCredentials []byte
	KeyID             string
}

// Validate returns every problem with the account.
func (a Account) Validate() []FieldError {
	var errs []FieldError
	if p := ValidName(a.Name); p != "" {
		errs = append(errs, FieldError{Field: "name", Problem: p})
	}
	if a.Provider == "" {
		errs = append(errs, FieldError{Field: "provider", Problem: "must not be empty"})
	}
	seen := map[string]bool{}
	for i, r := range a.Regions {
		switch {
		case r == "":
			errs = append(errs, FieldError{Field: fmt.Sprintf("regions[%d]", i), Problem: "must not be empty"})
		case seen[r]:
			errs = append(errs, FieldError{Field: fmt.Sprintf("regions[%d]", i), Problem: fmt.Sprintf("duplicate region %q", r)})
		}
		seen[r] = true
	}
	if len(a.SealedCredentials) > 0 && a.KeyID == "" {
		errs = append(errs, FieldError{Field: "credentials", Problem: "sealed credentials without the id of their key"})
	}
	return errs
}

// ValidateHook returns every problem with a named hook.
func ValidateHook(h HookSpec) []FieldError {
	var errs []FieldError
	if p := ValidName(h.Name); p != "" {
		errs = append(errs, FieldError{Field: "name", Problem: p})
	}
	if h.Script == "" {
		errs = append(errs, FieldError{Field: "script", Problem: "must not be empty"})
	}
	if h.Timeout < 0 {
		errs = append(errs, FieldError{Field: "timeout", Problem: fmt.Sprintf("must not be negative, got %s", h.Timeout)})
	}
	for k := range h.Env {
		if !envName.MatchString(k) {
			errs = append(errs, FieldError{Field: "env", Problem: fmt.Sprintf("%q is not a valid environment variable name", k)})
		}
	}
	return errs
}

// CatalogEntry is a named instance template, cloud account or hook.
// Exactly one of Template, Account and Hook is set.
type CatalogEntry struct {
	Template  *InstanceTemplate
	Account   *Account
	Hook      *HookSpec
	Source    Source
	UpdatedAt time.Time
}

// Kind is the entry's kind.
func (e CatalogEntry) Kind() CatalogKind {
	switch {
	case e.Template != nil:
		return KindTemplate
	case e.Account != nil:
		return KindAccount
	case e.Hook != nil:
		return KindHook
	}
	return KindUnknown
}

// Name is the entry's name.
func (e CatalogEntry) Name() string {
	switch {
	case e.Template != nil:
		return e.Template.Name
	case e.Account != nil:
		return e.Account.Name
	case e.Hook != nil:
		return e.Hook.Name
	}
	return ""
}

// CatalogRef names a catalog entry.
type CatalogRef struct {
	Kind CatalogKind
	Name string
}

// Ref is the entry's reference.
func (e CatalogEntry) Ref() CatalogRef { return CatalogRef{Kind: e.Kind(), Name: e.Name()} }

func (r CatalogRef) String() string { return fmt.Sprintf("%s %q", r.Kind, r.Name) }

// Validate returns every problem with the entry.
func (e CatalogEntry) Validate() []FieldError {
	// The name is a token of a KV key ("<kind>.<name>"): dots are fine,
	// an empty token ("a..b") is not.
	if n := e.Name(); strings.Contains(n, "..") {
		return []FieldError{{Field: "name", Problem: fmt.Sprintf("%q must not contain \"..\"", n)}}
	}
	switch e.Kind() {
	case KindTemplate:
		return e.Template.Validate()
	case KindAccount:
		return e.Account.Validate()
	case KindHook:
		return ValidateHook(*e.Hook)
	}
	return []FieldError{{Problem: "the entry holds no template, account or hook"}}
}
