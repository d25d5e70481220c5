// Package manifestrun holds TestProdManifestsRun: the prod overlay of
// deploy/kustomize, rendered, run for real on this machine. Every service
// binary starts with exactly the command, args and environment its
// Deployment gives it, reads the rendered ConfigMaps and Secrets from its
// volume mounts, talks to NATS servers started from the rendered nats.conf
// and lifecycle to a real kube-apiserver under its rendered RBAC; then the
// probes, REST, the NATS identities and a scale-up through Cluster
// Autoscaler's mTLS gRPC are checked. See manifestrun_test.go for the few
// transformations between the manifests and this machine.
package manifestrun
