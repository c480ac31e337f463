//go:build tools

// Package rollouts pins the Argo Rollouts controller that hack/rollouts.sh builds from
// source for the end-to-end suite's rollout gate specs (docs/rollouts.md, "On a real
// cluster"). It is a module of its own, out of the workspace, for the same reason as
// hack/tools: Argo Rollouts' go.mod pins Kubernetes' modules with replace directives,
// which a module only obeys when it is the main module, and which must not reach the
// operator's build.
package rollouts

import (
	_ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
)
