package podinject

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The wiring to the mounted ConfigMap, for pods that read their config themselves
// and write their own BreakerReport (docs/design.md §7).

// injectedConfigVolume is the volume of that wiring: the namespace's
// fusebox-breakers ConfigMap, optional, so the pod starts before any CircuitBreaker
// exists.
func injectedConfigVolume() corev1.Volume {
	optional := true
	return corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: breakerconfig.ConfigMapName},
		Optional:             &optional,
	}}}
}

func configMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true}
}

// configEnv is the environment of that wiring, in order.
func configEnv() []corev1.EnvVar {
	return append([]corev1.EnvVar{{Name: breakerconfig.EnvConfigDir, Value: MountPath}}, podIdentityEnv()...)
}

// configVolume adds the ConfigMap volume unless the pod has a volume of that name. A
// ConfigMap volume of fusebox-breakers counts as Fusebox's own whatever its items,
// mode or optionality (the API server fills in defaultMode, so an exact comparison
// would call an injected pod's volume foreign on the next pass). Any other volume of
// that name is the pod's; the mounts then mount it, since a volume named
// fusebox-breakers is most likely meant for Fusebox (a projected volume, say).
func (p *planner) configVolume(volumes []corev1.Volume) {
	for _, v := range volumes {
		if v.Name != VolumeName {
			continue
		}
		if cm := v.ConfigMap; cm == nil || cm.Name != breakerconfig.ConfigMapName {
			p.warn("kept the pod's own volume %q, which is not the %s ConfigMap; it is what %s mounts", VolumeName, breakerconfig.ConfigMapName, MountPath)
		}
		return
	}
	appendItem(p, "/spec/volumes", volumes != nil, injectedConfigVolume())
}
