package observe

import (
	"fmt"
	"testing"
)

func TestStrings(t *testing.T) {
	checks := map[fmt.Stringer]string{
		OutcomeSuccess: "success", OutcomeFailure: "failure", OutcomeIgnored: "ignored", OutcomeRejected: "rejected",
		RejectNone: "", RejectOpen: "open", RejectHalfOpenSaturated: "half_open_saturated", RejectForcedOpen: "forced_open",
		FallbackOpen: "open", FallbackHalfOpenSaturated: "half_open_saturated", FallbackFailure: "failure",
		CauseCalls: "calls", CauseTimeout: "timeout", CauseTrip: "trip", CauseMode: "mode", CauseAdopted: "adopted",
		TriggerNone: "", TriggerFailureRate: "failure_rate", TriggerSlowCallRate: "slow_call_rate", TriggerFailedProbe: "failed_probe", TriggerSlowProbe: "slow_probe",
		RejectThrottled: "throttled",
		Outcome(9):      "Outcome(9)",
	}
	for v, want := range checks {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}
