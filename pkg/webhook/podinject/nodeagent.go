package podinject

import (
	"path"

	corev1 "k8s.io/api/core/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The wiring to the node agent (docs/design.md §9): the pod reads its config from the
// agent of its node and sends its report there, so it mounts no ConfigMap, needs no
// RBAC and writes nothing to the API server. It proves who it is with a projected
// service-account token for the agent's audience alone.
const (
	// AgentTokenVolumeName is the projected volume that holds the token.
	AgentTokenVolumeName = "fusebox-node-agent-token"
	// AgentTokenExpirationSeconds is the token's lifetime: the shortest the API server
	// issues. The kubelet renews the file at 80% of it, so a token that leaks from the
	// node is good for ten minutes at most.
	AgentTokenExpirationSeconds = 600
)

// AgentTokenDir is where the token's volume is mounted: the directory of
// breakerconfig.NodeAgentTokenPath, the file the agent's clients read.
var AgentTokenDir = path.Dir(breakerconfig.NodeAgentTokenPath)

// injectedTokenVolume is the projected service-account token the pod presents to its
// agent. Bound to the pod, so the API server stops vouching for it once the pod is
// gone, and carrying the pod's node name, which the agent checks against its own.
func injectedTokenVolume() corev1.Volume {
	expiration := int64(AgentTokenExpirationSeconds)
	return corev1.Volume{Name: AgentTokenVolumeName, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience:          breakerconfig.NodeAgentAudience,
			ExpirationSeconds: &expiration,
			Path:              path.Base(breakerconfig.NodeAgentTokenPath),
		}}},
	}}}
}

func tokenMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: AgentTokenVolumeName, MountPath: AgentTokenDir, ReadOnly: true}
}

// agentEnv is the environment of a container wired to the agent at url, in order.
func agentEnv(url string) []corev1.EnvVar {
	return append([]corev1.EnvVar{
		{Name: breakerconfig.EnvNodeAgent, Value: url},
		{Name: breakerconfig.EnvNodeAgentToken, Value: breakerconfig.NodeAgentTokenPath},
	}, podIdentityEnv()...)
}

// tokenVolume adds the token's volume unless the pod has a volume of that name. A
// projected volume with a token of the agent's audience at the expected file counts as
// Fusebox's own whatever else it holds (the API server fills in defaultMode); any other
// volume of that name is the pod's, and the mounts mount it.
func (p *planner) tokenVolume(volumes []corev1.Volume) {
	for _, v := range volumes {
		if v.Name != AgentTokenVolumeName {
			continue
		}
		if !isAgentToken(v) {
			p.warn("kept the pod's own volume %q, which is not a service-account token for %s; it is what %s mounts",
				AgentTokenVolumeName, breakerconfig.NodeAgentAudience, AgentTokenDir)
		}
		return
	}
	appendItem(p, "/spec/volumes", volumes != nil, injectedTokenVolume())
}

func isAgentToken(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	for _, s := range v.Projected.Sources {
		if t := s.ServiceAccountToken; t != nil && t.Audience == breakerconfig.NodeAgentAudience &&
			t.Path == path.Base(breakerconfig.NodeAgentTokenPath) {
			return true
		}
	}
	return false
}
