package plugin

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Breaker is what the plugin shows of one CircuitBreaker, in the table, the
// watch view and, as JSON, the dashboard.
type Breaker struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// State is status.state; "" until a pod reports.
	State string `json:"state"`
	// Mode is the mode in force: the override's while one is, else spec.mode.
	Mode     string `json:"mode"`
	SpecMode string `json:"specMode"`
	Scope    string `json:"scope"`
	// QuorumPercent is spec.fleetQuorumPercent; it means something with scope Fleet only.
	QuorumPercent    int32     `json:"quorumPercent"`
	Pods             Pods      `json:"pods"`
	Override         *Override `json:"override,omitempty"`
	ConsecutiveOpens int32     `json:"consecutiveOpens,omitempty"`
	OpenTimeout      string    `json:"openTimeout,omitempty"`
	// Traffic is the fleet's traffic, for a breaker with a retry budget or throttling.
	Traffic *Traffic `json:"traffic,omitempty"`
	// Concurrency is status.concurrency, for a breaker with spec.concurrency: the fleet's
	// limit, each pod's share, and the pods' peaks and refusals; maxInFlight alone until
	// the operator has divided it.
	Concurrency *resiliencev1alpha1.FleetConcurrency `json:"concurrency,omitempty"`
	// Why is the Open condition's message while the circuit is not closed: who opened it
	// and on what evidence, or why a Fleet breaker is half-open with no pod probing (its
	// openers are short of the quorum, or its pods follow the probes that closed it).
	Why string `json:"why,omitempty"`
	// Members are status.members: the most relevant pods and each one's state.
	Members []Member `json:"members,omitempty"`
	// Candidate is status.candidate, for a breaker with spec.candidate.
	Candidate *Candidate `json:"candidate,omitempty"`
	Created   time.Time  `json:"created"`
}

// Candidate is what the candidate policy did in shadow across the pods, beside what the
// enforced policy did over the same span (status.candidate).
type Candidate struct {
	// State is status.candidate.state; "" until a pod reports it.
	State       string `json:"state"`
	Pods        int32  `json:"pods"`
	Opens       int64  `json:"opens"`
	WouldRefuse int64  `json:"wouldRefuse"`
	// EnforcedOpens and Refused are the enforced policy's over the same span.
	EnforcedOpens int64 `json:"enforcedOpens"`
	Refused       int64 `json:"refused"`
}

// Member is one pod of status.members.
type Member struct {
	Pod   string `json:"pod"`
	State string `json:"state"`
}

// Traffic is status.traffic and the policies it is measured against: the fleet's retry
// ratio (retries in percent of first attempts) and throttle rejection ratio (throttled in
// percent of requests), each nil until there is traffic to measure.
type Traffic struct {
	// RetryBudget is spec.retryBudget in words ("20% + 10/s"), or "" without one.
	RetryBudget string `json:"retryBudget,omitempty"`
	// ThrottleK is spec.throttle.k, or 0 without throttling.
	ThrottleK float64 `json:"throttleK,omitempty"`
	// The counts and ratios of status.traffic, inline; zero until the operator has
	// written them.
	resiliencev1alpha1.FleetTraffic
}

// Pods counts the reporting pods by state.
type Pods struct {
	Reporting      int32 `json:"reporting"`
	Open           int32 `json:"open"`
	HalfOpen       int32 `json:"halfOpen"`
	Closed         int32 `json:"closed"`
	OnLatestConfig int32 `json:"onLatestConfig"`
}

// Override is spec.override, with who set it and whether it is still in force.
type Override struct {
	Mode   string    `json:"mode"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
	By     string    `json:"by,omitempty"`
	Active bool      `json:"active"`
}

// breakerView is what the plugin shows of cb at now.
func breakerView(cb *resiliencev1alpha1.CircuitBreaker, now time.Time) Breaker {
	b := Breaker{
		Namespace:        cb.Namespace,
		Name:             cb.Name,
		State:            string(cb.Status.State),
		SpecMode:         string(cb.Spec.Mode),
		Scope:            string(cb.Spec.Scope),
		ConsecutiveOpens: cb.Status.ConsecutiveOpens,
		Created:          cb.CreationTimestamp.UTC(),
	}
	if b.SpecMode == "" {
		b.SpecMode = string(resiliencev1alpha1.ModeEnforce)
	}
	if b.Scope == "" {
		b.Scope = string(resiliencev1alpha1.ScopePod)
	}
	b.Mode = b.SpecMode
	if q := cb.Spec.FleetQuorumPercent; q != nil {
		b.QuorumPercent = *q
	}
	if t := cb.Status.OpenTimeout; t != nil {
		b.OpenTimeout = t.Duration.String()
	}
	if c := cb.Status.MemberCounts; c != nil {
		b.Pods = Pods{Reporting: c.Reporting, Open: c.Open, HalfOpen: c.HalfOpen, Closed: c.Closed, OnLatestConfig: c.OnLatestConfig}
	}
	b.Traffic = trafficView(cb)
	if c := cb.Spec.Concurrency; c != nil {
		b.Concurrency = &resiliencev1alpha1.FleetConcurrency{MaxInFlight: c.MaxInFlight}
		if s := cb.Status.Concurrency; s != nil {
			b.Concurrency = s.DeepCopy()
		}
	}
	if c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOpen); c != nil &&
		c.Status != metav1.ConditionUnknown && cb.Status.State != "" && cb.Status.State != resiliencev1alpha1.StateClosed {
		b.Why = c.Message
	}
	for _, m := range cb.Status.Members {
		b.Members = append(b.Members, Member{Pod: m.Pod, State: string(m.State)})
	}
	b.Candidate = candidateView(cb)
	if o := cb.Spec.Override; o != nil {
		b.Override = &Override{
			Mode:   string(o.Mode),
			Until:  o.Until.UTC(),
			Reason: o.Reason,
			By:     cb.Annotations[resiliencev1alpha1.AnnotationOverriddenBy],
			Active: o.Until.After(now),
		}
		if b.Override.Active {
			b.Mode = b.Override.Mode
		}
	}
	return b
}

// trafficView is what the plugin shows of cb's fleet traffic; nil for a breaker with
// neither a retry budget nor throttling.
func trafficView(cb *resiliencev1alpha1.CircuitBreaker) *Traffic {
	rb, th := cb.Spec.RetryBudget, cb.Spec.Throttle
	if rb == nil && th == nil {
		return nil
	}
	t := &Traffic{}
	if rb != nil {
		t.RetryBudget = fmt.Sprintf("%d%% + %d/s",
			ptrOr(rb.Percent, resiliencev1alpha1.DefaultRetryBudgetPercent), ptrOr(rb.MinPerSecond, resiliencev1alpha1.DefaultRetryMinPerSecond))
	}
	if th != nil {
		t.ThrottleK = ptrOr(th.K, resiliencev1alpha1.DefaultThrottleK)
	}
	if s := cb.Status.Traffic; s != nil {
		t.FleetTraffic = *s
	}
	return t
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// retriesText is the fleet's retry ratio for a table: "-" without a budget or traffic.
func (b Breaker) retriesText() string {
	if b.Traffic == nil || b.Traffic.RetryBudget == "" {
		return "-"
	}
	return percentText(b.Traffic.RetryPercent)
}

// throttledText is the fleet's throttle rejection ratio: "-" without throttling or traffic.
func (b Breaker) throttledText() string {
	if b.Traffic == nil || b.Traffic.ThrottleK == 0 {
		return "-"
	}
	return percentText(b.Traffic.ThrottledPercent)
}

func percentText(p *int32) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p)) + "%"
}

// stateText is a state for a table: "-" until a pod reports.
func stateText(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// modeText is the mode in force, marked when an override holds it.
func (b Breaker) modeText() string {
	if b.Override != nil && b.Override.Active {
		return b.Mode + " (override)"
	}
	return b.Mode
}

// overrideText is how long the override has left: "-" without one.
func (b Breaker) overrideText(now time.Time) string {
	switch {
	case b.Override == nil:
		return "-"
	case !b.Override.Active:
		return "expired"
	}
	return duration.HumanDuration(b.Override.Until.Sub(now)) + " left"
}

// quorumText is the fleet quorum: "-" with scope Pod, where there is none.
func (b Breaker) quorumText() string {
	if b.Scope != string(resiliencev1alpha1.ScopeFleet) {
		return "-"
	}
	if b.QuorumPercent == 0 {
		return "1 pod"
	}
	return strconv.Itoa(int(b.QuorumPercent)) + "%"
}

// podsText is open/half-open/closed.
func (b Breaker) podsText() string {
	return fmt.Sprintf("%d/%d/%d", b.Pods.Open, b.Pods.HalfOpen, b.Pods.Closed)
}

// age is kubectl's spelling of how long ago t was.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
