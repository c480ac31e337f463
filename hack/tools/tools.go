//go:build tools

// Package tools pins the control-plane binaries that hack/envtest.sh builds for
// envtest. It lives in its own module so the Fusebox module never depends on
// k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
