//go:build tools

// Package tools pins the Kubernetes binaries that hack/ builds from source: the
// control plane that hack/envtest.sh builds for envtest, and the node components
// (kubelet, controller-manager, scheduler, kube-proxy, kubectl) that hack/cluster.sh
// adds to run a real single-node cluster. It lives in its own module so the Fusebox
// module never depends on k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
