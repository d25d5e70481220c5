package contract

import (
	"fmt"
	"regexp"
	"strings"
)

// HookKind says at which point of an instance's life a hook runs; values
// equal nodesmith.hook.v1.HookKind.
type HookKind int

// Hook kinds.
const (
	HookUnspecified HookKind = iota
	// HookAfterCreated runs once the VM is up; it typically joins the node
	// to the cluster.
	HookAfterCreated
	// HookBeforeDelete runs before the VM is terminated (drain, leave).
	HookBeforeDelete
)

// String is the kind's name in metric labels, logs and message ids.
func (k HookKind) String() string {
	switch k {
	case HookAfterCreated:
		return "after_created"
	case HookBeforeDelete:
		return "before_delete"
	}
	return "unspecified"
}

// MaxGroupIDLength keeps instance ids ("<group>-<10 chars>"), node names
// and KV keys short; a DNS-1123 label allows 63.
const MaxGroupIDLength = 40

// MaxNameLength bounds the names of templates, hooks and accounts.
const MaxNameLength = 63

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// ValidGroupID reports why id cannot name a node group, or "" when it can.
// Group ids are DNS-1123 labels so they fit in instance ids, node names,
// label values and NATS KV keys (no dots: the key is "<group>.<id>").
func ValidGroupID(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > MaxGroupIDLength:
		return fmt.Sprintf("must be at most %d characters, got %d", MaxGroupIDLength, len(id))
	case !dns1123Label.MatchString(id):
		return fmt.Sprintf("%q must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit", id)
	}
	return ""
}

// ValidName reports why s cannot name a template, hook or account, or ""
// when it can. Names appear in logs, commands, cloud tags and KV keys
// ("templates.<name>"), where a dot separates tokens: so no two dots in a
// row and none at either end.
func ValidName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxNameLength:
		return fmt.Sprintf("must be at most %d characters, got %d", MaxNameLength, len(s))
	case !nameRE.MatchString(s) || strings.Contains(s, ".."):
		return fmt.Sprintf("%q may contain only letters, digits, '-', '_' and '.' (not two dots in a row), starting and ending with a letter or digit", s)
	}
	return ""
}
