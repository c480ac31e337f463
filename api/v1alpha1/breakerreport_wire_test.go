package v1alpha1

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestReportEntryIsTheAPIType holds the pod's Go shape of a report entry and the API
// type the operator reads together: every field the pod writes has the same name, and
// reads back the same, in api/v1alpha1.BreakerReportEntry, and the reverse.
func TestReportEntryIsTheAPIType(t *testing.T) {
	since := time.Date(2026, 11, 29, 21, 55, 51, 123_000_000, time.UTC)
	calls, rate := int64(40), int32(60)
	full := breakerconfig.ReportEntry{
		Name: "payments-api", State: breakerconfig.StateOpen, Since: breakerconfig.NewTime(since),
		Reason: breakerconfig.ReasonProbeFailed, Calls: &calls, FailureRatePercent: &rate,
		ConfigGeneration: 3, ConfigError: "openTimeout: must be positive",
		Requests: ptr(int64(900)), Accepts: ptr(int64(400)), Retries: ptr(int64(80)), Throttled: ptr(int64(100)),
		InFlightPeak: ptr(int64(37)), Limited: ptr(int64(12)), Baseline: ptr(breakerconfig.Duration(12500 * time.Microsecond)),
		Candidate: &breakerconfig.CandidateEntry{
			State: breakerconfig.StateHalfOpen, Since: breakerconfig.NewTime(since.Add(-time.Minute)), Opens: 2, WouldRefuse: 310,
			StartTime: ptr(breakerconfig.NewTime(since.Add(-time.Hour))), TimeOpen: ptr(breakerconfig.Duration(75 * time.Second)),
			Enforced: &breakerconfig.CandidateBaseline{Opens: 1, Refused: 12, TimeOpen: ptr(breakerconfig.Duration(30 * time.Second))},
		},
	}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"since":"2026-11-29T21:55:51.123Z"`) {
		t.Errorf("since not written to the millisecond: %s", raw)
	}
	var api BreakerReportEntry
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&api); err != nil {
		t.Fatalf("the API type cannot read what the pod writes: %v\n%s", err, raw)
	}
	if !api.Since.Time.Equal(since) {
		t.Errorf("the API type reads since as %v, want %v", api.Since.Time, since)
	}
	back, err := json.Marshal(api)
	if err != nil {
		t.Fatal(err)
	}
	var again breakerconfig.ReportEntry
	dec = json.NewDecoder(bytes.NewReader(back))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&again); err != nil {
		t.Fatalf("the pod's type cannot read the API type: %v\n%s", err, back)
	}
	// metav1.Time writes whole seconds (the operator reads since, it never writes it);
	// everything else must come back as it went.
	if !again.Since.Equal(since.Truncate(time.Second)) {
		t.Errorf("since through the API type: %v", again.Since)
	}
	again.Since = full.Since
	if c := again.Candidate; c != nil && c.StartTime != nil {
		if !c.Since.Equal(full.Candidate.Since.Truncate(time.Second)) || !c.StartTime.Equal(full.Candidate.StartTime.Truncate(time.Second)) {
			t.Errorf("the candidate's times through the API type: %v, %v", c.Since, c.StartTime)
		}
		c.Since, c.StartTime = full.Candidate.Since, full.Candidate.StartTime
	}
	if !reflect.DeepEqual(again, full) {
		t.Errorf("round trip through the API type:\n got %+v\nwant %+v", again, full)
	}
}

func ptr[T any](v T) *T { return &v }
