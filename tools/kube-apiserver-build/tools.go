//go:build tools

// Package tools pins k8s.io/kubernetes so that this module can build the
// real kube-apiserver used by integration tests (tools/kube/kubetest):
//
//	GOWORK=off go build -o "$DIR/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
//
// The build tag keeps this file out of every build; it only records the
// dependency for `go mod tidy`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
