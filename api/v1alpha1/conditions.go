package v1alpha1

// Condition types of CircuitBreaker status, and the reasons each may carry.
const (
	// ConditionReady is True when the breaker's configuration is valid and
	// published in the namespace's ConfigMap.
	ConditionReady = "Ready"

	// ReasonConfigPublished: the rendered configuration of the current
	// generation is in the ConfigMap.
	ReasonConfigPublished = "ConfigPublished"
	// ReasonConfigInvalid: the object could not be rendered (it slipped past
	// admission, e.g. stored before a schema change); the last published
	// configuration, if any, stays in place.
	ReasonConfigInvalid = "ConfigInvalid"
)

// The Open condition: True while the breaker's state is Open, so
// `kubectl wait --for=condition=Open` returns when the circuit opens.
const (
	ConditionOpen = "Open"

	// ReasonCircuitOpen: a pod (or, with scope Fleet, the fleet) has the circuit open.
	ReasonCircuitOpen = "CircuitOpen"
	// ReasonCircuitHalfOpen: no pod is open, at least one is probing.
	ReasonCircuitHalfOpen = "CircuitHalfOpen"
	// ReasonCircuitClosed: every reporting pod has the circuit closed.
	ReasonCircuitClosed = "CircuitClosed"
	// ReasonNoMembers: no pod reports this breaker yet.
	ReasonNoMembers = "NoMembers"
)

// The ConfigApplied condition: True when every reporting pod runs the
// configuration of the current generation.
const (
	ConditionConfigApplied = "ConfigApplied"

	// ReasonAllMembersApplied: every reporting pod runs the latest configuration.
	ReasonAllMembersApplied = "AllMembersApplied"
	// ReasonMembersBehind: some pods still run an older configuration.
	ReasonMembersBehind = "MembersBehind"
	// ReasonMembersRejected: some pods refused the latest configuration.
	ReasonMembersRejected = "MembersRejected"
)

// The Overridden condition: True while spec.override is in force (its until
// is ahead), so the rendered mode is the override's rather than spec.mode.
const (
	ConditionOverridden = "Overridden"

	// ReasonOverrideActive: spec.override holds the circuit until its until.
	ReasonOverrideActive = "OverrideActive"
	// ReasonOverrideExpired: spec.override's until has passed; spec.mode applies.
	ReasonOverrideExpired = "OverrideExpired"
	// ReasonNoOverride: no override is set (or it was removed).
	ReasonNoOverride = "NoOverride"
)

// Event reasons recorded on a CircuitBreaker when an override starts, runs out
// or is removed before its time.
const (
	EventOverrideStarted   = "OverrideStarted"
	EventOverrideExpired   = "OverrideExpired"
	EventOverrideCancelled = "OverrideCancelled"
)

// Event reasons recorded on a CircuitBreaker when its state changes or a pod
// refuses its configuration.
const (
	EventCircuitOpened     = "CircuitOpened"
	EventCircuitHalfOpened = "CircuitHalfOpened"
	EventCircuitClosed     = "CircuitClosed"
	EventConfigRejected    = "ConfigRejected"
	// EventMemberPruned (Normal): the reports of pods that are gone were deleted.
	EventMemberPruned = "MemberPruned"
)

// EventPodNotOnNode (Warning), recorded on a NodeBreakerReport: it claims more pods of a
// revision than the operator's cache has running on its node, or names notable pods that
// are not bound to it; the entry counts for the node's own pods alone. A node's agent
// speaks only for the pods of its node (docs/design.md §9).
const EventPodNotOnNode = "PodNotOnNode"

// Event reasons recorded on a CircuitBreaker when the state of spec.candidate, judged in
// shadow across its pods (status.candidate.state), changes: no call was refused, only
// counted. They are coalesced like the state Events: at most one per status write.
const (
	EventCandidateOpened = "CandidateOpened"
	EventCandidateClosed = "CandidateClosed"
)
