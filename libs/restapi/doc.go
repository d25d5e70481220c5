// Package restapi holds the wire types of the api-gateway's REST API
// (/api/v1, described by the gateway's openapi.json): the JSON request and
// response bodies, the error body and the watch stream's events. The
// gateway's rest adapter serves them and nodesmithctl's client reads them:
// one declaration, so the two cannot drift.
//
// The write documents (GroupSpec, InstanceTemplateSpec, HookSpec,
// AccountSpec) are also the schema of lifecycle's configuration file
// (ConfigFile): one decoder (Decode: field paths, deprecated spellings as
// warnings) and one Validate serve the file and the API.
//
// The package is pure data: it imports only the standard library (and
// libs/contract, the shared names, which does too), so the
// CLI's static binary stays free of the services' dependencies. Changing a
// JSON name or omitempty here changes the API (the gateway's
// testdata/wire.golden pins the bytes).
//
// The views are explicit rather than protojson of the state records
// because records carry material operators must not read back: hook
// scripts and environments (kubeadm join tokens), the cloud's create
// parameters (which may hold login passwords) and account credentials.
// Those appear only in request bodies (write-only) and never in a view.
package restapi
