package breakerconfig

import "strings"

// The names that the operator, the webhooks and the pods must agree on. This file
// is their one definition; every other package imports them from here.

// Group and Version of Fusebox's API (docs/design.md §1).
const (
	Group   = "resilience.fusebox.dev"
	Version = "v1alpha1"
)

// ConfigMapName is the ConfigMap, one per namespace, that holds the rendered
// configuration of every CircuitBreaker in it.
const ConfigMapName = "fusebox-breakers"

// KeySuffix ends every ConfigMap key that holds a breaker's document.
const KeySuffix = ".json"

// MaxKeyNameLength is the longest breaker name whose key fits in a ConfigMap:
// data keys are at most 253 characters, and the suffix takes five.
const MaxKeyNameLength = 253 - len(KeySuffix)

// Key is the ConfigMap data key under which the breaker named name is published.
func Key(name string) string { return name + KeySuffix }

// NameOfKey returns the breaker name a data key publishes, and false for a key
// that publishes none.
func NameOfKey(key string) (string, bool) {
	name, ok := strings.CutSuffix(key, KeySuffix)
	return name, ok && name != ""
}

// ManagedByLabel marks the objects Fusebox writes; its value is ManagedByValue.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "fusebox"
)

// Mode values of Config.Mode, spelled as the CircuitBreaker's spec.mode.
const (
	ModeEnforce      = "Enforce"
	ModeMetricsOnly  = "MetricsOnly"
	ModeForcedOpen   = "ForcedOpen"
	ModeForcedClosed = "ForcedClosed"
)

// Scope values of Config.Scope.
const (
	ScopePod   = "Pod"
	ScopeFleet = "Fleet"
)

// State values on the wire: in the fleet verdict, in pod reports and in
// CircuitBreaker status.
const (
	StateClosed   = "Closed"
	StateOpen     = "Open"
	StateHalfOpen = "HalfOpen"
)

// Reason values of ReportEntry.Reason: how a pod's breaker reached its state.
const (
	// ReasonStarted: the breaker has not moved since it was created.
	ReasonStarted = "Started"
	// ReasonTripped: the pod's own calls opened the circuit.
	ReasonTripped = "Tripped"
	// ReasonManual: the application called Trip.
	ReasonManual = "Manual"
	// ReasonProbeFailed: a probe failed and re-opened the circuit.
	ReasonProbeFailed = "ProbeFailed"
	// ReasonProbesSucceeded: successThreshold probes succeeded and closed it.
	ReasonProbesSucceeded = "ProbesSucceeded"
	// ReasonTimedOut: time moved it (open → half-open, or a half-open period
	// whose probes never reported back → open).
	ReasonTimedOut = "TimedOut"
	// ReasonAdopted: the pod took a verdict reached elsewhere (the fleet's).
	ReasonAdopted = "Adopted"
	// ReasonForced: a forced mode holds the state.
	ReasonForced = "Forced"
)

// Earned reports whether a pod that reached state for reason did so on its own
// evidence, so that the state may move the fleet (docs/design.md §5.12): an Open reached
// by its calls, Trip or a failed probe, or a Closed reached by probes.
func Earned(state, reason string) bool {
	switch state {
	case StateOpen:
		return reason == ReasonTripped || reason == ReasonManual || reason == ReasonProbeFailed
	case StateClosed:
		return reason == ReasonProbesSucceeded
	}
	return false
}

// Trigger values of ReportEntry.Trigger: which judgement of calls opened the
// circuit.
const (
	TriggerFailureRate  = "FailureRate"
	TriggerSlowCallRate = "SlowCallRate"
	TriggerFailedProbe  = "FailedProbe"
	TriggerSlowProbe    = "SlowProbe"
)

// The environment of an application pod, as the pod-injection webhook sets it and
// pkg/breaker/kube reads it: the pod's identity from the downward API, and where the
// ConfigMap is mounted.
const (
	EnvPodName   = "POD_NAME"
	EnvPodUID    = "POD_UID"
	EnvNamespace = "POD_NAMESPACE"
	EnvConfigDir = "FUSEBOX_CONFIG_DIR"
)
