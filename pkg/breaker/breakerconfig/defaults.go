package breakerconfig

import "time"

// The policy a breaker runs where nothing says otherwise: what the library's zero Policy
// means (breaker.DefaultPolicy), what the CircuitBreaker's defaulter fills in and what the
// operator renders for a field an older object left unset. They are the operator's and the
// pods' to agree on, so they live with the wire's other shared values, stated once. The
// CRD's +kubebuilder:default markers cannot read a constant: a test of api/v1alpha1 holds
// the generated schema's defaults to these.
const (
	DefaultOpenTimeout            = 30 * time.Second
	DefaultWindow                 = 10 * time.Second
	DefaultFailureRatePercent     = 50
	DefaultMinimumThroughput      = 20
	DefaultSuccessThreshold       = 2
	DefaultHalfOpenPermittedCalls = 1
	// DefaultSlowCallRatePercent is the slow-call rate that opens a circuit once slow calls
	// are judged (slowCallDuration set).
	DefaultSlowCallRatePercent = 100
)

// The fleet limit on calls in flight's (docs/design.md §12), set only with
// spec.concurrency: with no maxWait a call over the pod's limit is refused at once; with
// adaptive, a pod's limiter lowers its limit once recent latency passes the baseline
// times DefaultAdaptiveTolerance, never below DefaultAdaptiveMinLimit.
const (
	DefaultMaxWait           = time.Duration(0)
	DefaultAdaptiveTolerance = 1.5
	DefaultAdaptiveMinLimit  = 1
)
