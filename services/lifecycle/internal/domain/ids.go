package domain

import (
	"errors"
	"fmt"
	"strings"
	"text/template"
)

// IDAlphabet is the alphabet of random id parts: lower-case base32, which is
// valid in DNS-1123 labels, NATS KV keys and cloud client tokens.
const IDAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// InstanceIDRandomLength is the number of random characters in an instance id.
const InstanceIDRandomLength = 10

// maxPrefix keeps instance ids well within a DNS-1123 label (63).
const maxPrefix = 20

// NewInstanceID builds "<group prefix>-<random>"; random must come from
// IDAlphabet. The id is also the Node name, so it must be a DNS-1123 label.
func NewInstanceID(group, random string) string {
	prefix := group
	if len(prefix) > maxPrefix {
		prefix = strings.TrimRight(prefix[:maxPrefix], "-")
	}
	return prefix + "-" + random
}

// ValidInstanceID reports whether id could have been made by NewInstanceID.
func ValidInstanceID(id string) bool {
	return len(id) <= 63 && dns1123Label.MatchString(id)
}

// NewClientToken derives the cloud idempotency token from a batch id: at
// most 64 ASCII characters, stable for the batch's life.
func NewClientToken(batchID string) string {
	t := "nodesmith-" + batchID
	if len(t) > 64 {
		t = t[:64]
	}
	return t
}

// DefaultProviderIDTemplate is used when a template sets none; with the
// default provider (cloudspec.DefaultProvider) it yields
// externalgrpc://tencentcloud/<account>/<region>/<cloud id>.
const DefaultProviderIDTemplate = "externalgrpc://{{.Provider}}/{{.Account}}/{{.Region}}/{{.CloudID}}"

// ProviderIDFields are what a providerID template may reference.
type ProviderIDFields struct {
	Provider, Account, Region, Zone, CloudID, InstanceID, Group string
}

func parseProviderIDTemplate(s string) (*template.Template, error) {
	if s == "" {
		s = DefaultProviderIDTemplate
	}
	return template.New("providerID").Option("missingkey=error").Parse(s)
}

// CheckProviderIDTemplate validates a template by rendering sample values.
func CheckProviderIDTemplate(s string) error {
	_, err := RenderProviderID(s, ProviderIDFields{
		Provider: "p", Account: "a", Region: "r", Zone: "z", CloudID: "ins-1", InstanceID: "g-x", Group: "g",
	})
	return err
}

// RenderProviderID renders a providerID template.
func RenderProviderID(tmpl string, f ProviderIDFields) (string, error) {
	t, err := parseProviderIDTemplate(tmpl)
	if err != nil {
		return "", fmt.Errorf("parsing providerID template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, f); err != nil {
		return "", fmt.Errorf("rendering providerID template: %w", err)
	}
	out := b.String()
	switch {
	case out == "":
		return "", errors.New("providerID template renders an empty string")
	case strings.ContainsAny(out, " \t\n"):
		return "", fmt.Errorf("providerID %q contains white space", out)
	case f.CloudID != "" && !strings.Contains(out, f.CloudID):
		return "", fmt.Errorf("providerID template must include {{.CloudID}}, got %q", tmpl)
	}
	return out, nil
}

// ProviderIDFor renders the real providerID of an instance with a cloud
// id. zone is the zone its VM is in ("" for the template's): with
// offerings the VMs of one template are in several zones, and a providerID
// such as Tencent's qcloud:///<zone>/<id> must name the VM's.
func ProviderIDFor(t InstanceTemplate, zone, group, instanceID, cloudID string) (string, error) {
	if zone == "" {
		zone = t.Zone
	}
	return RenderProviderID(t.ProviderIDTemplate, ProviderIDFields{
		Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: zone,
		CloudID: cloudID, InstanceID: instanceID, Group: group,
	})
}
