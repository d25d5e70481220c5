// Package providerid holds the placeholder providerID nodesmith reports to
// Cluster Autoscaler for an instance whose VM has no cloud id yet. Lifecycle
// assigns it and resolves it in DeleteNodes; the gateway indexes it. It is a
// pure package (standard library only) so domain code may use it.
package providerid

import "strings"

// Scheme prefixes placeholder providerIDs: "nodesmith:///<group>/<instance id>".
const Scheme = "nodesmith:///"

// Placeholder returns the placeholder providerID of an instance.
func Placeholder(group, instanceID string) string {
	return Scheme + group + "/" + instanceID
}

// ParsePlaceholder splits a placeholder providerID into group and instance
// id. It does not allocate.
func ParsePlaceholder(providerID string) (group, instanceID string, ok bool) {
	rest, found := strings.CutPrefix(providerID, Scheme)
	if !found {
		return "", "", false
	}
	group, instanceID, found = strings.Cut(rest, "/")
	if !found || group == "" || instanceID == "" || strings.Contains(instanceID, "/") {
		return "", "", false
	}
	return group, instanceID, true
}
