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
