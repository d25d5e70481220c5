// Package cloudspec is the one home of what nodesmith knows about each
// cloud that is not an API call: the provider names, the create parameters
// an instance template may carry (and how they agree with the template's
// zone and instance type), the providerID format of each cloud's Nodes and
// the shape of a cloud API key. It is pure Go with no cloud SDK, so
// lifecycle (configuration file, adoption), the gateway (REST validation)
// and the cloud adapter share one definition.
//
// The request schemas under internal/ are generated from the SDKs the cloud
// adapter uses (internal/gen); SameJSONShape lets the adapters' tests check
// that they still match (Provider.CheckRequest).
package cloudspec

import (
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
)

// Provider names, as accounts and templates spell them.
const (
	// Tencent is Tencent Cloud (CVM).
	Tencent = "tencentcloud"
	// Alibaba is Alibaba Cloud (ECS).
	Alibaba = "alibabacloud"
	// DefaultProvider is the provider of accounts and templates that name
	// none.
	DefaultProvider = Tencent
)

// FieldError is one thing wrong with a template, named by its path from
// the template: "zone", "instanceType", "parameters",
// "parameters.Placement.Zone", "parameters.DataDisks[1].DiskSize". The
// gateway answers it as a 4xx naming the field, the configuration file
// loader as a problem at that field's line.
type FieldError struct {
	Path string
	Msg  string
}

func (e FieldError) Error() string { return e.Path + ": " + e.Msg }

// Credentials is a cloud API key: a key id, its secret and, for temporary
// (STS) keys, a security token. Each cloud names the three differently
// (CredentialNames: Tencent SecretId/SecretKey/Token, Alibaba
// AccessKeyId/AccessKeySecret/SecurityToken); nodesmith's Go code uses
// these neutral fields. Its String, GoString and LogValue hide everything,
// so printing or logging one by mistake leaks nothing.
type Credentials struct {
	KeyID  string
	Secret string
	// SecurityToken is set for temporary credentials only.
	SecurityToken string
}

const redacted = "[redacted]"

func (Credentials) String() string       { return redacted }
func (Credentials) GoString() string     { return redacted }
func (Credentials) LogValue() slog.Value { return slog.StringValue(redacted) }

// Valid reports whether the key id and secret are both set.
func (c Credentials) Valid() bool { return c.KeyID != "" && c.Secret != "" }

// Equal reports whether two credentials are the same.
func (c Credentials) Equal(o Credentials) bool { return c == o }

// CredentialNames are a cloud's own names of the Credentials fields, for
// documentation and error messages.
type CredentialNames struct {
	KeyID         string
	Secret        string
	SecurityToken string
}

// ProviderIDParts is what a cloud's providerID says about a VM.
type ProviderIDParts struct {
	// Region is "" when the providerID names only the zone.
	Region string
	// Zone is "" when the providerID names only the region.
	Zone    string
	CloudID string
}

// InRegion reports whether the VM is in region: the providerID names that
// region, or a zone of it (zones are "<region>-<suffix>" on both clouds).
func (p ProviderIDParts) InRegion(region string) bool {
	if region == "" {
		return false
	}
	if p.Region != "" {
		return p.Region == region
	}
	return strings.HasPrefix(p.Zone, region+"-") && len(p.Zone) > len(region)+1
}

// Provider is one cloud's rules.
type Provider struct {
	// Name is the provider name ("tencentcloud").
	Name string
	// Title is the cloud's name for people ("Tencent Cloud").
	Title string
	// Credentials are the cloud's names of the API key fields.
	Credentials CredentialNames
	// ZoneField and InstanceTypeField are where the create parameters
	// name the VM's zone and instance type, as a dotted path
	// ("Placement.Zone").
	ZoneField, InstanceTypeField string
	// SubnetField is where they name the subnet (an offering's subnetId).
	SubnetField string

	// request is the JSON shape of the create request (generated).
	request reflect.Type
	// requestName names the create request in messages.
	requestName string
	// required lists fields that must be set: each entry is a set of
	// alternatives, one of which must be non-empty.
	required [][]string
	// forbidden maps fields nodesmith sets itself to the reason.
	forbidden map[string]string
	// capacity writes a template's capacity type and max price into its
	// parameters (Reconcile); checkSpot checks the parameters' spot
	// fields as the cloud does (ValidateParameters).
	capacity func(obj map[string]any, t *Template) []FieldError
	// capacityFields are the top-level parameters capacity writes; an
	// offering with its own capacity type replaces them (ApplyOffering).
	capacityFields []string
	// isSpot reports whether parameters ask for spot capacity.
	isSpot    func(obj map[string]any) bool
	checkSpot func(obj map[string]any) []FieldError
	// providerID and parseProviderID are the cloud's providerID format.
	providerID      func(region, zone, cloudID string) string
	parseProviderID func(string) (ProviderIDParts, bool)
}

var providers = map[string]Provider{}

func register(p Provider) { providers[p.Name] = p }

// Lookup returns the rules of a provider name.
func Lookup(name string) (Provider, bool) {
	p, ok := providers[name]
	return p, ok
}

// Names lists the provider names, sorted.
func Names() []string {
	out := make([]string, 0, len(providers))
	for n := range providers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CheckName returns an error naming the known providers when name is
// not one of them.
func CheckName(name string) error {
	if _, ok := providers[name]; ok {
		return nil
	}
	return fmt.Errorf("unknown provider %q (known: %s)", name, strings.Join(Names(), ", "))
}

// ProviderID is the providerID the cloud's own cloud-controller-manager
// (and Cluster Autoscaler's provider for that cloud) gives the Node of a
// VM.
func (p Provider) ProviderID(region, zone, cloudID string) string {
	return p.providerID(region, zone, cloudID)
}

// ParseProviderID reads a providerID in the cloud's format.
func (p Provider) ParseProviderID(providerID string) (ProviderIDParts, bool) {
	return p.parseProviderID(providerID)
}

// CloudIDFromProviderID returns the VM id a providerID in the cloud's
// format names.
func (p Provider) CloudIDFromProviderID(providerID string) (string, bool) {
	parts, ok := p.parseProviderID(providerID)
	return parts.CloudID, ok
}

// CheckRequest reports how an SDK's create request type (the one the
// cloud adapter decodes the parameters into) differs from the schema
// parameters are validated against; nil when they match. The adapters'
// tests call it so an SDK upgrade cannot silently change what a valid
// template is (regenerate with internal/gen).
func (p Provider) CheckRequest(sdkRequest reflect.Type) error {
	if err := SameJSONShape(p.request, sdkRequest); err != nil {
		return fmt.Errorf("%s: the SDK request differs from libs/cloudspec's schema (regenerate it: cd libs/cloudspec/internal/gen && GOWORK=off go run .): %w", p.requestName, err)
	}
	return nil
}
