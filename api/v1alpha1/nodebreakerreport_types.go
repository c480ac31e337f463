package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bounds of a NodeBreakerReport. A node runs at most a few hundred pods (the kubelet's
// maxPods is 110 by default), so MaxNodePods is room to spare and every count of an entry
// fits it; the sums of a node's traffic counters are at most MaxNodePods times a pod's
// bound (breakerconfig.MaxTrafficCount), which stays far inside int64 and below 2^53
// once the operator adds up 1,000 nodes' shares.
const (
	MaxNodePods          = 1024
	MaxNodeReportEntries = 256
	MaxNotablePods       = 5
	MaxNodeTrafficSum    = 1024 * 1_000_000_000_000
	// MaxNodeInFlight bounds the sum of a node's pods' in-flight peaks: MaxNodePods pods
	// at MaxInFlight each.
	MaxNodeInFlight = MaxNodePods * MaxInFlight
	// MaxConfigErrorSample bounds the one refusal a node entry quotes (its pods' others
	// are on the node, GET /v1/pods).
	MaxConfigErrorSample = 256
)

// NodeBreakerEntry is what the pods of one node that run one breaker at one revision add
// up to. The node agent adds them up, each pod's figures bounded first as docs/design.md
// §5.17 bounds them across pods; the pods' own lines stay on the node and are read on
// demand (the agent's GET /v1/pods, `kubectl fusebox pods`). An entry's size grows with
// nothing but its notable pods, at most MaxNotablePods.
//
// How the counts bound each other (open, halfOpen and closed at most pods; earnedOpen at
// most open; onLatestConfig, holdingVerdict and configErrors at most pods; failures at most
// calls; accepts, retries and throttled at most requests; notable at most pods) is checked
// by the admission policy of node reports (config/policy/nodebreakerreport_identity.yaml),
// not by CEL rules here: on the entry type they were half the API server's CPU of every
// node report write (docs/benchmarks.md, "What one node report write costs").
type NodeBreakerEntry struct {
	// name is the breaker's name, the name of its CircuitBreaker.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// revision is the revision of the pods' workload, read by the agent from the Pods
	// (their pod-template-hash label, else rollouts-pod-template-hash, else
	// controller-revision-hash); "" for pods with none. The operator counts an entry only
	// for as many running pods of this revision as its own cache has bound to the node.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Revision string `json:"revision"`

	// pods is how many of the node's pods run this breaker at this revision and report it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Pods int32 `json:"pods"`

	// closed, open and halfOpen count those pods by their circuit's state.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Closed int32 `json:"closed"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Open int32 `json:"open"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	HalfOpen int32 `json:"halfOpen"`

	// earnedOpen is how many of the open pods hold an Open they earned (reasons Tripped,
	// Manual, ProbeFailed): the Opens that move a fleet verdict (docs/design.md §5.12).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	EarnedOpen int32 `json:"earnedOpen"`

	// openSince is when the earliest of those earned Opens was reached, to the
	// microsecond; the operator counts it as at most the time it first saw it plus the
	// documented skew.
	// +optional
	// +kubebuilder:validation:Format=date-time
	OpenSince *metav1.MicroTime `json:"openSince,omitempty"`

	// consecutiveOpens is the most consecutive open periods any earned Open of these pods
	// has had (maxOpenTimeout backs them off); the operator clamps it to what the
	// CircuitBreaker's backoff can reach.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	ConsecutiveOpens int32 `json:"consecutiveOpens,omitempty"`

	// openTimeout is the longest current open period among these pods.
	// +optional
	// +kubebuilder:validation:Type=string
	OpenTimeout *metav1.Duration `json:"openTimeout,omitempty"`

	// earnedClosed is how many of the closed pods closed on their own probes (reason
	// ProbesSucceeded), and closedSince when the latest of them did, to the microsecond.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	EarnedClosed int32 `json:"earnedClosed,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	ClosedSince *metav1.MicroTime `json:"closedSince,omitempty"`

	// holdingVerdict is how many of the pods hold the fleet's verdict as they were told
	// it (reason Adopted): the echoes of a verdict, counted.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	HoldingVerdict int32 `json:"holdingVerdict"`

	// configGeneration is the newest configuration generation any of the pods runs, and
	// onLatestConfig how many of them run it and refuse nothing.
	// +kubebuilder:validation:Minimum=0
	ConfigGeneration int64 `json:"configGeneration"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	OnLatestConfig int32 `json:"onLatestConfig"`

	// configErrors is how many of the pods refuse the configuration published to them,
	// and configError one of their reasons, as status text (sanitized, at most 256
	// characters).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	ConfigErrors int32 `json:"configErrors"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ConfigError string `json:"configError,omitempty"`

	// calls and failures are the pods' windows added up: their calls at their last
	// transition and the failures among them. Each pod counts for at most four times the
	// node's median pod (docs/design.md §5.17).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Calls int64 `json:"calls"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Failures int64 `json:"failures"`

	// requests, accepts, retries and throttled are the pods' traffic windows added up,
	// for a breaker with retryBudget or throttle (docs/design.md §5.15, §5.16), each pod
	// first bounded as calls are.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Requests int64 `json:"requests"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Accepts int64 `json:"accepts"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Retries int64 `json:"retries"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Throttled int64 `json:"throttled"`

	// inFlightPeak and limited add up the pods' in-flight peaks and the calls they refused
	// over their limit, for a breaker with spec.concurrency (docs/design.md §12), each pod
	// first bounded as calls are; baseline is the node's median pod's baseline latency,
	// among those that report one. Optional, so that an agent that knows none of them
	// still writes a report the API server takes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000
	InFlightPeak int64 `json:"inFlightPeak,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Limited int64 `json:"limited,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') && duration(self) <= duration('1h')`,message="must be a duration of at most 1h, such as 12ms"
	Baseline *metav1.Duration `json:"baseline,omitempty"`

	// keys adds up the pods' breaker Groups, for a Group.
	// +optional
	Keys *NodeKeySummary `json:"keys,omitempty"`

	// candidate adds up the pods' shadow judgements of spec.candidate (docs/design.md
	// §11), while the configuration they run has one.
	// +optional
	Candidate *NodeCandidateSummary `json:"candidate,omitempty"`

	// notable names at most 5 of the pods, the most relevant first: open (the most
	// recent first), then half-open, then refusing the configuration, then behind it.
	// Closed pods on the latest configuration are never notable.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	Notable []NotablePod `json:"notable,omitempty"`
}

// NodeKeySummary adds up the breaker Groups of a node's pods (docs/groups.md).
//
// +kubebuilder:validation:XValidation:rule="self.open + self.halfOpen <= self.keys",message="open and halfOpen together must be at most keys"
type NodeKeySummary struct {
	// keys, open and halfOpen are the pods' per-key breakers added up, each pod's counts
	// at most 400,000.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=409600000
	Keys int32 `json:"keys"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=409600000
	Open int32 `json:"open"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=409600000
	HalfOpen int32 `json:"halfOpen"`

	// most is the most keys one pod holds.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=400000
	Most int32 `json:"most"`

	// worst names at most 5 keys that are not closed, those not closed in the most pods
	// first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:MaxLength=253
	Worst []string `json:"worst,omitempty"`
}

// NodeCandidateSummary adds up the candidate judgements of a node's pods that run the
// entry's configGeneration.
//
// +kubebuilder:validation:XValidation:rule="self.open + self.halfOpen <= self.pods",message="open and halfOpen together must be at most pods"
type NodeCandidateSummary struct {
	// pods is how many pods judge the candidate; open and halfOpen how many of them hold
	// it open or half-open.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Pods int32 `json:"pods"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Open int32 `json:"open"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	HalfOpen int32 `json:"halfOpen"`

	// opens and wouldRefuse, and the enforced policy's opens and refused, are the pods'
	// counts added up, each pod's at most four times the node's median pod's.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Opens int64 `json:"opens"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	WouldRefuse int64 `json:"wouldRefuse"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	EnforcedOpens int64 `json:"enforcedOpens"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024000000000000
	Refused int64 `json:"refused"`

	// timeOpen, enforcedTimeOpen and startTime are the node's median pod's.
	// +optional
	// +kubebuilder:validation:Type=string
	TimeOpen *metav1.Duration `json:"timeOpen,omitempty"`
	// +optional
	// +kubebuilder:validation:Type=string
	EnforcedTimeOpen *metav1.Duration `json:"enforcedTimeOpen,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	StartTime *metav1.Time `json:"startTime,omitempty"`
}

// NotablePod is one pod a node entry names: the pod, from its token, and its circuit.
type NotablePod struct {
	// name is the pod's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid is the pod's UID. The operator drops a notable pod that its own cache does not
	// have bound to the report's node.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid"`

	// The pod's circuit, as the pod reported it (its configError left out: the entry
	// quotes one).
	PodCircuit `json:",inline"`

	// reason is how the pod's circuit reached its state.
	// +required
	// +kubebuilder:validation:Enum=Started;Tripped;Manual;ProbeFailed;ProbesSucceeded;TimedOut;Adopted;Forced
	Reason string `json:"reason"`
}

// NodeBreakerReport is one node's report of the breakers of its pods in one namespace:
// per breaker and revision, what the pods add up to. The node agent (fuseboxd node)
// writes one per namespace it has reporting pods in, named after its node and owned by
// its Node, so that report writes and watches grow with nodes, not pods, and each write
// costs the API server what a few breakers weigh, not what every pod does
// (docs/design.md §9). An admission policy lets only the agent of that node write it;
// the operator counts an entry for no more pods than its own cache has bound to the node.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=nbrep,categories=fusebox
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.nodeName",message="metadata.name must be the nodeName: a node has one report per namespace, named after it"
type NodeBreakerReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// nodeName is the node whose agent writes this report, the report's name too. It
	// cannot change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// breakers holds one entry per breaker and revision the node's pods in this namespace
	// run (the operator counts the first entry of a pair). The agent writes the whole list
	// every time, so it is atomic: the API server then validates and tracks it as one
	// value, not item by item, which halves what a write costs it (docs/benchmarks.md).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Breakers []NodeBreakerEntry `json:"breakers,omitempty"`
}

// NodeBreakerReportList is a list of NodeBreakerReports.
//
// +kubebuilder:object:root=true
type NodeBreakerReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeBreakerReport `json:"items"`
}
