package counting

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// The attacks of issue 29 made by one pod under its own identity (docs/rbac.md lists
// them), against the figures the operator derives from the reports and the text it copies
// from them: the counting half of what internal/controller's envtest specs prove through
// the API server.
func TestWhatOnePodsTrafficAndTextCannotDo(t *testing.T) {
	// Nine honest pods of 1,000 requests each, whose dependency accepts 25 % to 45 % of
	// them: at k = 2 their own rejection probabilities span about 0.10 to 0.50.
	const honest = 9
	honestAccepts := func(i int) int64 { return 250 + 25*int64(i) }
	lo, hi := 1.0, 0.0
	for i := range honest {
		p := Rejection(Window{Requests: 1000, Accepts: honestAccepts(i)}, 2)
		lo, hi = min(lo, p), max(hi, p)
	}
	cb := throttled(2)
	cb.Spec.RetryBudget = &resiliencev1alpha1.RetryBudget{}
	cb.Spec.MinimumThroughput = ptr.To[int32](100)
	fleetOfTen := func(rogue member) []Entry {
		ms := []member{rogue}
		for i := range honest {
			ms = append(ms, trafficMember(fmt.Sprintf("honest-%d", i), ptr.To[int64](1000), ptr.To(honestAccepts(i)), ptr.To[int64](50), ptr.To[int64](0)))
		}
		return entriesOf(ms...)
	}
	holdsTheHonestRange := func(t *testing.T, got FleetTraffic) {
		t.Helper()
		if got.Pods != 10 {
			t.Errorf("pods %d, want 10", got.Pods)
		}
		if p := Rejection(got.Median, 2); p < lo || p > hi {
			t.Errorf("published %+v: p %v, outside the honest pods' [%v, %v]", got.Median, p, lo, hi)
		}
	}

	t.Run("requests 10^12 and no accepts make no quiet pod refuse everything", func(t *testing.T) {
		const most = resiliencev1alpha1.MaxTrafficCount
		got := TrafficOf(cb, fleetOfTen(trafficMember("rogue", ptr.To[int64](most), ptr.To[int64](0), ptr.To[int64](0), ptr.To[int64](0))))
		holdsTheHonestRange(t, got)
		// status.traffic counts the rogue for at most four honest pods' requests.
		st := StatusTraffic(got)
		if st.Requests != honest*1000+maxShareOfMedian*1000 || *st.RetryPercent < 0 || *st.RetryPercent > 100 || *st.ThrottledPercent < 0 || *st.ThrottledPercent > 100 {
			t.Errorf("status.traffic %+v", st)
		}
	})

	t.Run("every one of 10^12 requests accepted switches no throttling off", func(t *testing.T) {
		const most = resiliencev1alpha1.MaxTrafficCount
		holdsTheHonestRange(t, TrafficOf(cb, fleetOfTen(trafficMember("rogue", ptr.To[int64](most), ptr.To[int64](most), ptr.To[int64](0), ptr.To[int64](0)))))
		// Nor do accepts far above its requests, from a report stored before the schema
		// refused them.
		holdsTheHonestRange(t, TrafficOf(cb, fleetOfTen(trafficMember("rogue", ptr.To[int64](10), ptr.To[int64](most), ptr.To[int64](0), ptr.To[int64](0)))))
	})

	t.Run("requests and retries near 10^12 keep retryPercent at 100", func(t *testing.T) {
		const most = resiliencev1alpha1.MaxTrafficCount
		st := StatusTraffic(TrafficOf(cb, entriesOf(trafficMember("rogue", ptr.To[int64](most), ptr.To[int64](0), ptr.To[int64](most-1), nil))))
		if st.Requests != most || st.RetryPercent == nil || *st.RetryPercent != 100 {
			t.Errorf("status.traffic %+v", st)
		}
	})

	t.Run("terminal escape sequences reach no status text", func(t *testing.T) {
		refusal := at("rogue", closed, started, 0)
		refusal.entry.ConfigError = "\x1b]0;owned\x07\x1b[2J\x1b[Hbad\tconfig\x1b[31m: " + strings.Repeat("x", 900) + "\x1b[0m"
		v := Aggregate(podBreaker(1), entriesOf(refusal))
		if len(v.Rejected) != 1 || !strings.HasPrefix(v.Rejected[0], "rogue: bad config: xxx") || !strings.HasSuffix(v.Rejected[0], truncated) {
			t.Errorf("rejected %q", v.Rejected)
		}
		if len(v.Members) != 1 || utf8.RuneCountInString(v.Members[0].ConfigError) != MaxConfigErrorText {
			t.Fatalf("members %+v, want the refusal cut to %d characters", v.Members, MaxConfigErrorText)
		}
		for _, s := range []string{v.Rejected[0], v.Members[0].ConfigError} {
			assertPrintable(t, s)
		}

		group := at("rogue", open, tripped, time.Second)
		group.entry.Keys = &resiliencev1alpha1.KeySummary{Keys: 3, Open: 3, Worst: []string{"\x1b[1Ahost-a", "host-b\u202e", "\u009b2Jhost-c"}}
		cb := podBreaker(1)
		v = Aggregate(cb, entriesOf(group))
		if v.Keys == nil || strings.Join(v.Keys.Worst, ",") != "host-a,host-b,host-c" {
			t.Errorf("keys %+v, want the names without their escapes", v.Keys)
		}
		assertPrintable(t, v.OpenedMessage(cb))
	})
}

// assertPrintable fails unless s is printable text with no remnant of an escape sequence.
func assertPrintable(t *testing.T, s string) {
	t.Helper()
	for _, r := range s {
		if !unicode.IsPrint(r) {
			t.Errorf("%q holds %U", s, r)
			return
		}
	}
	if strings.Contains(s, "[2J") {
		t.Errorf("%q holds an escape's remnant", s)
	}
}
