package circuitbreaker

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func dur(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &metav1.Duration{Duration: d}
}

func TestDefaultFillsEveryUnsetField(t *testing.T) {
	cb := &resiliencev1alpha1.CircuitBreaker{}
	if err := (Defaulter{}).Default(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	s := cb.Spec
	if s.OpenTimeout.Duration != 30*time.Second || s.Window.Duration != 10*time.Second ||
		*s.FailureRatePercent != 50 || *s.MinimumThroughput != 20 || *s.SuccessThreshold != 2 ||
		*s.HalfOpenPermittedCalls != 1 || s.Mode != resiliencev1alpha1.ModeEnforce || s.Scope != resiliencev1alpha1.ScopePod ||
		*s.SlowCallRatePercent != 100 || s.SlowCallDuration != nil || s.MaxOpenTimeout != nil {
		t.Errorf("defaults: %+v", s)
	}
}

func TestDefaultKeepsWhatIsSet(t *testing.T) {
	set := resiliencev1alpha1.CircuitBreakerSpec{
		OpenTimeout: dur("1m"), Window: dur("5s"), FailureRatePercent: ptr.To[int32](10),
		MinimumThroughput: ptr.To[int32](100), SuccessThreshold: ptr.To[int32](5),
		HalfOpenPermittedCalls: ptr.To[int32](3), Mode: resiliencev1alpha1.ModeMetricsOnly, Scope: resiliencev1alpha1.ScopeFleet,
	}
	cb := &resiliencev1alpha1.CircuitBreaker{Spec: *set.DeepCopy()}
	if err := (Defaulter{}).Default(context.Background(), cb); err != nil {
		t.Fatal(err)
	}
	if cb.Spec.OpenTimeout.Duration != time.Minute || *cb.Spec.MinimumThroughput != 100 || cb.Spec.Mode != resiliencev1alpha1.ModeMetricsOnly || cb.Spec.Scope != resiliencev1alpha1.ScopeFleet {
		t.Errorf("defaulting changed set fields: %+v", cb.Spec)
	}
}

// causes returns "field: detail" for each cause of an Invalid error.
func causes(t *testing.T, err error) []string {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid API error, got %v", err)
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field)
	}
	return out
}

func TestValidateCreateRefuses(t *testing.T) {
	long := strings.Repeat("a", MaxNameLength+1)
	for _, tc := range []struct {
		name   string
		cb     resiliencev1alpha1.CircuitBreaker
		fields []string
	}{
		{"name too long for its ConfigMap key", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: long}}, []string{"metadata.name"}},
		{"openTimeout below a millisecond", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("1.0000001s")}}, []string{"spec.openTimeout"}},
		{"both durations", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("2s500us"), Window: dur("10s1ns")}}, []string{"spec.openTimeout", "spec.window"}},
		{"slowCallDuration below a millisecond", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("1.5ms")}}, []string{"spec.slowCallDuration"}},
		{"maxOpenTimeout below a millisecond", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("1m0.0001s")}}, []string{"spec.maxOpenTimeout"}},
		{"negative retry percent", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](-5)}}},
			[]string{"spec.retryBudget.percent"}},
		{"retry floor beyond its bound", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](101), MinPerSecond: ptr.To[int32](10001)}}},
			[]string{"spec.retryBudget.percent", "spec.retryBudget.minPerSecond"}},
		{"throttle k below 1", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(0.5)}}}, []string{"spec.throttle.k"}},
		{"throttle k NaN", resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"},
			Spec: resiliencev1alpha1.CircuitBreakerSpec{Throttle: &resiliencev1alpha1.Throttle{K: ptr.To(math.NaN())}}}, []string{"spec.throttle.k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (Validator{}).ValidateCreate(context.Background(), &tc.cb)
			got := causes(t, err)
			if strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("fields %v, want %v (%v)", got, tc.fields, err)
			}
		})
	}
}

func TestValidateCreateAccepts(t *testing.T) {
	for _, cb := range []resiliencev1alpha1.CircuitBreaker{
		{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", MaxNameLength)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("1.5s"), Window: dur("1m0.001s")}},
		{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("1ms"), MaxOpenTimeout: dur("1h0.001s")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
			RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](1), MinPerSecond: ptr.To[int32](0)},
			Throttle:    &resiliencev1alpha1.Throttle{K: ptr.To(1.0)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
			RetryBudget: &resiliencev1alpha1.RetryBudget{Percent: ptr.To[int32](100), MinPerSecond: ptr.To[int32](10000)},
			Throttle:    &resiliencev1alpha1.Throttle{K: ptr.To(10.0)}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{
			RetryBudget: &resiliencev1alpha1.RetryBudget{}, Throttle: &resiliencev1alpha1.Throttle{}}},
	} {
		if _, err := (Validator{}).ValidateCreate(context.Background(), &cb); err != nil {
			t.Errorf("%s: %v", cb.Name, err)
		}
	}
}

// An object stored before a rule existed stays updatable: only changed fields
// are judged, and nothing is judged on the way out.
func TestValidateUpdateRatchets(t *testing.T) {
	old := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 250)},
		Spec: resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("1.0000001s")}}
	unchanged := old.DeepCopy()
	unchanged.Labels = map[string]string{"team": "payments"}
	if _, err := (Validator{}).ValidateUpdate(context.Background(), old, unchanged); err != nil {
		t.Errorf("update that keeps the offending values: %v", err)
	}
	changed := old.DeepCopy()
	changed.Spec.OpenTimeout = dur("2.0000001s")
	if got := causes(t, func() error { _, err := (Validator{}).ValidateUpdate(context.Background(), old, changed); return err }()); len(got) != 1 || got[0] != "spec.openTimeout" {
		t.Errorf("changed field: %v", got)
	}
	deleting := changed.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if w, err := (Validator{}).ValidateUpdate(context.Background(), old, deleting); err != nil || w != nil {
		t.Errorf("update of an object being deleted: %v %v", w, err)
	}
}

func TestWarnings(t *testing.T) {
	const (
		thin1   = "spec.minimumThroughput is 1: the failure rate is judged on as few as 1 call, so a single failure can open the circuit; 5 or more is recommended"
		thin4   = "spec.minimumThroughput is 4: the failure rate is judged on as few as 4 calls, so 2 failures can open the circuit; 5 or more is recommended"
		rest    = "spec.openTimeout (5s) is shorter than spec.window (10s): the circuit rests for less time than it takes to measure a failure rate, so a struggling dependency gets little relief between probes"
		probes  = "spec.halfOpenPermittedCalls (30) is above spec.minimumThroughput (20): a half-open circuit lets more probe calls at a time reach a dependency that just failed than a closed circuit needs to judge it"
		openBy  = "spec.mode is ForcedOpen but the annotations fusebox.dev/forced-by and fusebox.dev/forced-reason are not set: record who forced the circuit and why, so that it is not left open after the incident"
		openWhy = "spec.mode is ForcedOpen but the annotation fusebox.dev/forced-reason is not set: record who forced the circuit and why, so that it is not left open after the incident"
		closed  = "spec.mode is ForcedClosed but the annotation fusebox.dev/forced-by is not set: record who forced the circuit and why, so that it is not left closed after the incident"
		short   = "spec.slowCallDuration (4ms) is under 5ms: a scheduling delay or a garbage-collection pause in the calling pod alone takes that long, so healthy calls can count as slow and open the circuit"
		long    = "spec.slowCallDuration (45s) is over 30s: most clients time out before that, and a call cut short by its timeout counts as a failure, not as slow; set it below the callers' timeout"
		noSlow  = "spec.slowCallRatePercent (30) has no effect without spec.slowCallDuration: no call is judged slow until spec.slowCallDuration says how long a slow call takes"
		noBack  = "spec.maxOpenTimeout (30s) equals spec.openTimeout: open periods are not backed off; set it higher to back off a dependency that stays down, or leave it unset"
	)
	for _, tc := range []struct {
		name        string
		spec        resiliencev1alpha1.CircuitBreakerSpec
		annotations map[string]string
		want        []string
	}{
		{"defaults", resiliencev1alpha1.CircuitBreakerSpec{}, nil, nil},
		{"minimumThroughput 5 is fine", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](5)}, nil, nil},
		{"minimumThroughput 1", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](1)}, nil, []string{thin1}},
		{"minimumThroughput 4 at 50%", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](4)}, nil, []string{thin4}},
		{"openTimeout under window", resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("5s")}, nil, []string{rest}},
		{"openTimeout equal to window", resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("10s")}, nil, nil},
		{"more probes than throughput", resiliencev1alpha1.CircuitBreakerSpec{HalfOpenPermittedCalls: ptr.To[int32](30)}, nil, []string{probes}},
		{"ForcedOpen unexplained", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen}, nil, []string{openBy}},
		{"ForcedOpen with a blank reason", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen},
			map[string]string{resiliencev1alpha1.AnnotationForcedBy: "alice", resiliencev1alpha1.AnnotationForcedReason: "  "}, []string{openWhy}},
		{"ForcedOpen explained", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen},
			map[string]string{resiliencev1alpha1.AnnotationForcedBy: "alice", resiliencev1alpha1.AnnotationForcedReason: "INC-1"}, nil},
		{"ForcedClosed without who", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedClosed},
			map[string]string{resiliencev1alpha1.AnnotationForcedReason: "INC-1"}, []string{closed}},
		{"slowCallDuration 5ms is fine", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("5ms")}, nil, nil},
		{"slowCallDuration under 5ms", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("4ms")}, nil, []string{short}},
		{"slowCallDuration 30s is fine", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("30s"), SlowCallRatePercent: ptr.To[int32](30)}, nil, nil},
		{"slowCallDuration over 30s", resiliencev1alpha1.CircuitBreakerSpec{SlowCallDuration: dur("45s")}, nil, []string{long}},
		{"slowCallRatePercent alone", resiliencev1alpha1.CircuitBreakerSpec{SlowCallRatePercent: ptr.To[int32](30)}, nil, []string{noSlow}},
		{"slowCallRatePercent at its default alone", resiliencev1alpha1.CircuitBreakerSpec{SlowCallRatePercent: ptr.To[int32](100)}, nil, nil},
		{"maxOpenTimeout equal to openTimeout", resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("30s")}, nil, []string{noBack}},
		{"maxOpenTimeout above openTimeout", resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("5m")}, nil, nil},
		{"everything at once", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](1), OpenTimeout: dur("5s"),
			HalfOpenPermittedCalls: ptr.To[int32](30), Mode: resiliencev1alpha1.ModeForcedOpen, SlowCallRatePercent: ptr.To[int32](30), MaxOpenTimeout: dur("5s")}, nil,
			[]string{thin1, rest, "spec.halfOpenPermittedCalls (30) is above spec.minimumThroughput (1): a half-open circuit lets more probe calls at a time reach a dependency that just failed than a closed circuit needs to judge it", openBy,
				noSlow, "spec.maxOpenTimeout (5s) equals spec.openTimeout: open periods are not backed off; set it higher to back off a dependency that stays down, or leave it unset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: tc.annotations}, Spec: tc.spec}
			got := Warnings(cb)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("warnings:\n%q\nwant:\n%q", got, tc.want)
			}
			for _, w := range got {
				// The API server may truncate longer ones.
				if len(w) > 256 {
					t.Errorf("warning over 256 characters (%d): %s", len(w), w)
				}
			}
			if _, err := (Validator{}).ValidateCreate(context.Background(), cb); err != nil {
				t.Errorf("risky but legal object refused: %v", err)
			}
		})
	}
}

func TestFailuresToOpen(t *testing.T) {
	for _, tc := range []struct {
		min, rate int32
		want      string
	}{{1, 50, "a single failure"}, {1, 100, "a single failure"}, {2, 50, "a single failure"}, {3, 50, "2 failures"}, {4, 100, "4 failures"}, {4, 1, "a single failure"}} {
		if got := failuresToOpen(tc.min, tc.rate); got != tc.want {
			t.Errorf("failuresToOpen(%d, %d) = %q, want %q", tc.min, tc.rate, got, tc.want)
		}
	}
}

// The webhook judges spec.candidate as the schema does: whole milliseconds, and the open
// period the candidate ends up with, naming the candidate's field; ratcheted like the spec.
func TestValidateCandidate(t *testing.T) {
	with := func(spec resiliencev1alpha1.CircuitBreakerSpec, c resiliencev1alpha1.CandidatePolicy) *resiliencev1alpha1.CircuitBreaker {
		spec.Candidate = &c
		return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: spec}
	}
	none := resiliencev1alpha1.CircuitBreakerSpec{}
	for _, tc := range []struct {
		name   string
		cb     *resiliencev1alpha1.CircuitBreaker
		fields []string
	}{
		{"openTimeout below a millisecond", with(none, resiliencev1alpha1.CandidatePolicy{OpenTimeout: dur("1.0000001s")}), []string{"spec.candidate.openTimeout"}},
		{"window and slowCallDuration below a millisecond", with(none, resiliencev1alpha1.CandidatePolicy{Window: dur("10s1ns"), SlowCallDuration: dur("1ms1ns")}),
			[]string{"spec.candidate.window", "spec.candidate.slowCallDuration"}},
		{"maxOpenTimeout below its own openTimeout", with(none, resiliencev1alpha1.CandidatePolicy{OpenTimeout: dur("2m"), MaxOpenTimeout: dur("1m")}), []string{"spec.candidate.maxOpenTimeout"}},
		{"maxOpenTimeout below the spec's openTimeout", with(resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("2m")}, resiliencev1alpha1.CandidatePolicy{MaxOpenTimeout: dur("1m")}),
			[]string{"spec.candidate.maxOpenTimeout"}},
		{"maxOpenTimeout below the default openTimeout", with(none, resiliencev1alpha1.CandidatePolicy{MaxOpenTimeout: dur("10s")}), []string{"spec.candidate.maxOpenTimeout"}},
		{"openTimeout above the spec's maxOpenTimeout", with(resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("1m")}, resiliencev1alpha1.CandidatePolicy{OpenTimeout: dur("2m")}),
			[]string{"spec.candidate.openTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (Validator{}).ValidateCreate(context.Background(), tc.cb)
			if got := causes(t, err); strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("fields %v, want %v (%v)", got, tc.fields, err)
			}
		})
	}
	for _, cb := range []*resiliencev1alpha1.CircuitBreaker{
		with(none, resiliencev1alpha1.CandidatePolicy{}),
		with(resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("1m")}, resiliencev1alpha1.CandidatePolicy{OpenTimeout: dur("2m"), MaxOpenTimeout: dur("2m")}),
		with(resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: dur("1m")}, resiliencev1alpha1.CandidatePolicy{MaxOpenTimeout: dur("1m")}),
		with(none, resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](20), Window: dur("1.5s")}),
	} {
		if _, err := (Validator{}).ValidateCreate(context.Background(), cb); err != nil {
			t.Errorf("candidate %+v refused: %v", cb.Spec.Candidate, err)
		}
	}

	// Stored before the rule, kept as it was: the update is let through.
	old := with(resiliencev1alpha1.CircuitBreakerSpec{MaxOpenTimeout: dur("1m")}, resiliencev1alpha1.CandidatePolicy{OpenTimeout: dur("2m"), Window: dur("10s1ns")})
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"team": "payments"}
	if _, err := (Validator{}).ValidateUpdate(context.Background(), old, relabelled); err != nil {
		t.Errorf("an update that keeps the candidate as stored: %v", err)
	}
	lowered := old.DeepCopy()
	lowered.Spec.MaxOpenTimeout = dur("90s")
	if got := causes(t, func() error { _, err := (Validator{}).ValidateUpdate(context.Background(), old, lowered); return err }()); strings.Join(got, ",") != "spec.candidate.openTimeout" {
		t.Errorf("an update that changes the pair: %v", got)
	}
}

func TestCandidateWarnings(t *testing.T) {
	const (
		same   = "spec.candidate sets nothing the spec does not already: it judges every call exactly as the enforced policy does, so it can tell you nothing; set the fields you want to try"
		forced = "spec.candidate is judged on the calls that run, and spec.mode ForcedOpen runs none: it will show nothing until the mode lets calls through"
	)
	for _, tc := range []struct {
		name string
		spec resiliencev1alpha1.CircuitBreakerSpec
		want []string
	}{
		{"a candidate that changes something", resiliencev1alpha1.CircuitBreakerSpec{Candidate: &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](20)}}, nil},
		{"an empty candidate", resiliencev1alpha1.CircuitBreakerSpec{Candidate: &resiliencev1alpha1.CandidatePolicy{}}, []string{same}},
		{"a candidate that repeats the defaults", resiliencev1alpha1.CircuitBreakerSpec{Candidate: &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](50), Window: dur("10s")}}, []string{same}},
		{"a candidate under ForcedOpen", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen,
			Candidate: &resiliencev1alpha1.CandidatePolicy{FailureRatePercent: ptr.To[int32](20)}}, []string{forced}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{resiliencev1alpha1.AnnotationForcedBy: "alice", resiliencev1alpha1.AnnotationForcedReason: "INC-1"}
			cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: ann}, Spec: tc.spec}
			got := Warnings(cb)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("warnings:\n%q\nwant:\n%q", got, tc.want)
			}
			for _, w := range got {
				if len(w) > 256 {
					t.Errorf("warning over 256 characters (%d): %s", len(w), w)
				}
			}
		})
	}
}
