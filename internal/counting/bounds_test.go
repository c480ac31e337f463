package counting

import (
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// What one pod's report says is bounded by what the operator saw and what the spec allows
// (docs/design.md §5.12).

func TestSpecOpenPeriod(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	s, m := time.Second, time.Minute
	for _, tc := range []struct {
		name          string
		openTimeout   *metav1.Duration
		maxOpen       *metav1.Duration
		k             int32
		wantK         int32
		wantPeriod    time.Duration
		wantReachable time.Duration // the period of k = MaxInt32
	}{
		{"defaults: 30s, no backoff", nil, nil, 7, 1, 30 * s, 30 * s},
		{"no backoff: the count is 1", d(s), nil, 5, 1, s, s},
		{"a count of 0 is the first open", d(s), d(m), 0, 1, s, m},
		{"a negative count is the first open", d(s), d(m), -3, 1, s, m},
		{"the 3rd open doubles twice", d(s), d(m), 3, 3, 4 * s, m},
		{"maxOpenTimeout caps the period", d(s), d(10 * s), 5, 5, 10 * s, 10 * s},
		{"a count past the cap stops at the first k that reaches it", d(s), d(10 * s), 40, 5, 10 * s, 10 * s},
		{"a count of 2^31-1 cannot overflow", d(time.Millisecond), d(7 * 24 * time.Hour), math.MaxInt32, 31, 7 * 24 * time.Hour, 7 * 24 * time.Hour},
		{"maxOpenTimeout below openTimeout is no backoff", d(m), d(s), 3, 1, m, m},
		{"an openTimeout of 0 counts as the default", d(0), nil, 1, 1, 30 * s, 30 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := fleetBreaker(0)
			cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = tc.openTimeout, tc.maxOpen
			if k, p := SpecOpenPeriod(cb, tc.k); k != tc.wantK || p != tc.wantPeriod {
				t.Errorf("k=%d: got k=%d %s, want k=%d %s", tc.k, k, p, tc.wantK, tc.wantPeriod)
			}
			if _, p := SpecOpenPeriod(cb, math.MaxInt32); p != tc.wantReachable {
				t.Errorf("longest period %s, want %s", p, tc.wantReachable)
			}
		})
	}
}

// A century-long Open from one pod: the verdict's open period is the spec's, whatever
// period and count the report that started it carries.
func TestDecideFleetTakesTheOpenPeriodFromTheSpecNotTheReport(t *testing.T) {
	cb := fleetBreaker(0)
	cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: 10 * time.Second}, &metav1.Duration{Duration: time.Minute}
	for _, tc := range []struct {
		name       string
		k          int32
		period     time.Duration
		wantK      int
		wantPeriod time.Duration
	}{
		{"876000h on a first open", 1, 876000 * time.Hour, 1, 10 * time.Second},
		{"876000h on a 3rd open", 3, 876000 * time.Hour, 3, 40 * time.Second},
		{"a count of 2^31-1", math.MaxInt32, time.Minute, MaxCountedOpens, time.Minute},
		{"a count past where the period stops growing is still counted", 7, time.Minute, 7, time.Minute},
		{"a shorter period than the spec's", 2, time.Millisecond, 2, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideFleet(cb, entriesOf(openedK("x", tripped, 5*time.Second, tc.k, tc.period), at("y", closed, started, 0)))
			v := d.Verdict
			if !d.Open || v == nil || v.ConsecutiveOpens != tc.wantK || time.Duration(v.OpenTimeout) != tc.wantPeriod {
				t.Fatalf("verdict %+v, want Open k=%d for %s", v, tc.wantK, tc.wantPeriod)
			}
			// What the status shows is the verdict's.
			st := Aggregate(cb, entriesOf(openedK("x", tripped, 5*time.Second, tc.k, tc.period)))
			if st.OpenTimeout == nil || st.OpenTimeout.Duration != tc.wantPeriod || st.ConsecutiveOpens != int32(tc.wantK) {
				t.Errorf("status shows k=%d %v, want k=%d %s", st.ConsecutiveOpens, st.OpenTimeout, tc.wantK, tc.wantPeriod)
			}
		})
	}
	// Scope Pod obeys no verdict, but shows no longer a period than the spec's longest.
	pod := cb.DeepCopy()
	pod.Spec.Scope = resiliencev1alpha1.ScopePod
	if v := Aggregate(pod, entriesOf(openedK("x", tripped, 5*time.Second, 1, 876000*time.Hour))); v.OpenTimeout.Duration != time.Minute {
		t.Errorf("Pod scope shows %s, want at most maxOpenTimeout", v.OpenTimeout.Duration)
	}
}

// One pod outvotes nine: an earned Closed dated before the fleet's open period could have
// ended (start + period − skew) counts for nothing.
func TestDecideFleetIgnoresAClosedNoProbeCouldHaveEarned(t *testing.T) {
	s := time.Second
	cb := fleetBreaker(50)
	cb.Spec.OpenTimeout = &metav1.Duration{Duration: 30 * s}
	nine := make([]member, 0, 10)
	for i := range 9 {
		nine = append(nine, at(string(rune('a'+i)), open, tripped, time.Duration(i)*time.Millisecond))
	}
	// The quorum (5 of 10) was complete at the 5th most recent Open: t0+4ms.
	start := t0.Add(4 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		closedAt time.Duration // after start
		wantOpen bool
	}{
		{"inside the skew window after the open", 1900 * time.Millisecond, true},
		{"halfway through the open period", 15 * s, true},
		{"just before period − skew", 28*s - time.Millisecond, true},
		{"at period − skew: a pod whose clock lags by the skew", 28 * s, false},
		{"after the period", 31 * s, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closer := member{pod: "z", since: start.Add(tc.closedAt), entry: resiliencev1alpha1.BreakerReportEntry{
				Name: "b", PodCircuit: resiliencev1alpha1.PodCircuit{State: closed, Since: metav1.NewTime(start.Add(tc.closedAt)), ConfigGeneration: 1}, Reason: succeeded}}
			d := DecideFleet(cb, entriesOf(append(append([]member{}, nine...), closer)...))
			if d.Open != tc.wantOpen {
				t.Errorf("open %v, want %v (verdict %+v)", d.Open, tc.wantOpen, d.Verdict)
			}
			if !tc.wantOpen && (d.Verdict == nil || d.Verdict.State != breakerconfig.StateClosed) {
				t.Errorf("verdict %+v, want Closed", d.Verdict)
			}
		})
	}
	// The backed-off period counts: the 3rd open of a 1s openTimeout lasts 4s.
	cb.Spec.OpenTimeout, cb.Spec.MaxOpenTimeout = &metav1.Duration{Duration: s}, &metav1.Duration{Duration: time.Minute}
	opener := openedK("x", failed, 0, 3, 4*s)
	early := at("y", closed, succeeded, 1500*time.Millisecond)
	if d := DecideFleet(cb, entriesOf(opener, early)); !d.Open {
		t.Error("a Closed 1.5s into a 4s open period closed the fleet")
	}
	if d := DecideFleet(cb, entriesOf(opener, at("y", closed, succeeded, 2*s))); d.Open {
		t.Error("a Closed at period − skew did not close the fleet")
	}
}

func TestAttested(t *testing.T) {
	seen := t0
	for _, tc := range []struct {
		name  string
		since time.Time
		seen  time.Time
		want  time.Time
	}{
		{"before first sight: the pod's", seen.Add(-time.Hour), seen, seen.Add(-time.Hour)},
		{"at first sight", seen, seen, seen},
		{"within the skew", seen.Add(2 * time.Second), seen, seen.Add(2 * time.Second)},
		{"just past the skew: first sight + skew", seen.Add(2*time.Second + time.Millisecond), seen, seen.Add(2 * time.Second)},
		{"a century ahead: first sight + skew", seen.AddDate(100, 0, 0), seen, seen.Add(2 * time.Second)},
		{"never seen: bounds nothing", seen.AddDate(100, 0, 0), time.Time{}, seen.AddDate(100, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Attested(tc.since, tc.seen); !got.Equal(tc.want) {
				t.Errorf("Attested %s, want %s", got, tc.want)
			}
		})
	}
}

// A clock an hour ahead cannot hold the fleet open past a Closed earned after the
// report was written: its Open counts as dated at first sight + skew.
func TestAFutureOpenDoesNotPinTheFleet(t *testing.T) {
	skewed := at("skewed", open, tripped, time.Hour)
	skewed.since = Attested(skewed.entry.Since.Time, t0)
	d := DecideFleet(fleetBreaker(0), entriesOf(skewed, at("prober", closed, succeeded, 10*time.Second)))
	if d.Open || d.Verdict == nil || d.Verdict.State != "Closed" {
		t.Errorf("decision open=%v verdict=%+v, want closed by the later probes", d.Open, d.Verdict)
	}
}
