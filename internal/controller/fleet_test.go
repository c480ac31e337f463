package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// fleetVerdict is the verdict published for a breaker: its state ("" for none) and since.
func fleetVerdict(g Gomega, ctx context.Context, ns, name string) (string, time.Time) {
	v, ok := published(g, ctx, ns, name)["verdict"].(map[string]any)
	if !ok {
		return "", time.Time{}
	}
	since, err := time.Parse(time.RFC3339Nano, v["since"].(string))
	g.Expect(err).NotTo(HaveOccurred())
	return v["state"].(string), since
}

// ms is t as a report carries it.
func ms(t time.Time) time.Time { return breakerconfig.NewTime(t).Time }

// fleet makes a breaker's scope Fleet with that quorum and an open period of 1s, shorter
// than the skew: a Closed earned any time after the fleet's open counts (decideFleet).
// A spec that needs a longer one sets it after.
func fleet(quorum int32) func(*resiliencev1alpha1.CircuitBreakerSpec) {
	return func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Scope = resiliencev1alpha1.ScopeFleet
		s.FleetQuorumPercent = ptr.To(quorum)
		s.OpenTimeout = &metav1.Duration{Duration: time.Second}
	}
}

var _ = Describe("Fleet verdicts from BreakerReports", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	expectOpen := func(ctx context.Context, name string, status metav1.ConditionStatus) func(g Gomega) {
		return func(g Gomega) {
			g.Expect(condition(getBreaker(g, ctx, ns, name), "Open").Status).To(Equal(status))
		}
	}

	It("publishes the open period of the Open that started the fleet's, shows it and says so on a re-open", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "backoff", fleet(0), func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.OpenTimeout, s.MaxOpenTimeout = &metav1.Duration{Duration: time.Second}, &metav1.Duration{Duration: time.Minute}
			s.SlowCallDuration = &metav1.Duration{Duration: 2 * time.Second}
		}))).To(Succeed())
		withPeriod := func(e breakerconfig.ReportEntry, k int32, d time.Duration, trigger string) breakerconfig.ReportEntry {
			period := breakerconfig.Duration(d)
			e.ConsecutiveOpens, e.OpenTimeout, e.Trigger = k, &period, trigger
			return e
		}
		first := withPeriod(entry("backoff", "Open", "Tripped", time.Now(), 1), 1, time.Second, breakerconfig.TriggerSlowCallRate)
		first.Calls, first.FailureRatePercent, first.SlowCallRatePercent = ptr.To[int64](20), ptr.To[int32](0), ptr.To[int32](85)
		reports(ctx, ns, "p0", first)
		reports(ctx, ns, "p1", entry("backoff", "Closed", "Started", time.Now(), 1))
		Eventually(func(g Gomega) {
			v, ok := published(g, ctx, ns, "backoff")["verdict"].(map[string]any)
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(HaveKeyWithValue("consecutiveOpens", BeEquivalentTo(1)))
			g.Expect(v).To(HaveKeyWithValue("openTimeout", "1s"))
			cb := getBreaker(g, ctx, ns, "backoff")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(cb.Status.ConsecutiveOpens).To(BeEquivalentTo(1))
			g.Expect(cb.Status.OpenTimeout).To(Equal(&metav1.Duration{Duration: time.Second}))
			g.Expect(condition(cb, "Open").Message).To(ContainSubstring("p0: slow-call rate 85% of 20 calls (slow: 2s or longer)"))
			g.Expect(listedPods(cb)).To(HaveExactElements("p0", "p1"))
			g.Expect(cb.Status.Members[0].Trigger).To(Equal("SlowCallRate"))
			g.Expect(cb.Status.Members[0].SlowCallRatePercent).To(Equal(ptr.To[int32](85)))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "backoff", "CircuitOpened") }).Should(
			ConsistOf(ContainSubstring("p0: slow-call rate 85% of 20 calls")))

		By("p1's probe, after the period, failed: the fleet's second consecutive open")
		reports(ctx, ns, "p0", withPeriod(entry("backoff", "HalfOpen", "TimedOut", time.Now(), 1), 1, time.Second, ""))
		reports(ctx, ns, "p1", withPeriod(entry("backoff", "Open", "ProbeFailed", time.Now(), 1), 2, 2*time.Second, breakerconfig.TriggerSlowProbe))
		Eventually(func(g Gomega) {
			v, ok := published(g, ctx, ns, "backoff")["verdict"].(map[string]any)
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(HaveKeyWithValue("consecutiveOpens", BeEquivalentTo(2)))
			g.Expect(v).To(HaveKeyWithValue("openTimeout", "2s"))
			cb := getBreaker(g, ctx, ns, "backoff")
			g.Expect(cb.Status.ConsecutiveOpens).To(BeEquivalentTo(2))
			g.Expect(cb.Status.OpenTimeout).To(Equal(&metav1.Duration{Duration: 2 * time.Second}))
			g.Expect(condition(cb, "Open").Message).To(HaveSuffix("p1: a probe was slow (slow: 2s or longer). Open for 2s, the 2nd consecutive open"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "backoff", "CircuitOpened") }).Should(ConsistOf(
			ContainSubstring("p0: slow-call rate 85% of 20 calls"),
			ContainSubstring("Open for 2s, the 2nd consecutive open")))
	})

	It("is moved only by what pods earned: not by fresh pods, only by probes after the open", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "fleet", fleet(0)))).To(Succeed())
		for _, p := range []string{"p0", "p1", "p2"} {
			reports(ctx, ns, p, entry("fleet", "Closed", "Started", time.Now(), 1))
		}
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "fleet").Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(3)))
		}).Should(Succeed())
		Consistently(func(g Gomega) string { s, _ := fleetVerdict(g, ctx, ns, "fleet"); return s }, "1s").Should(BeEmpty())

		probedEarly := time.Now()
		time.Sleep(50 * time.Millisecond)
		openedAt := time.Now()
		reports(ctx, ns, "p1", entry("fleet", "Open", "Tripped", openedAt, 1))
		Eventually(func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "fleet")
			g.Expect(state).To(Equal("Open"))
			g.Expect(since).To(BeTemporally("==", ms(openedAt)))
			cb := getBreaker(g, ctx, ns, "fleet")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateOpen))
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		By("a pod adopting it and two fresh pods starting Closed")
		reports(ctx, ns, "p0", entry("fleet", "Open", "Adopted", openedAt, 1))
		reports(ctx, ns, "fresh-started", entry("fleet", "Closed", "Started", time.Now(), 1))
		reports(ctx, ns, "fresh-adopted", entry("fleet", "Closed", "Adopted", time.Now(), 1))
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "fleet").Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(5)))
		}).Should(Succeed())
		stillOpen := func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "fleet")
			g.Expect(state).To(Equal("Open"))
			g.Expect(since).To(BeTemporally("==", ms(openedAt)))
			expectOpen(ctx, "fleet", metav1.ConditionTrue)(g)
		}
		Consistently(stillOpen, "2s").Should(Succeed())

		By("probes that succeeded before the fleet opened")
		reports(ctx, ns, "p2", entry("fleet", "Closed", "ProbesSucceeded", probedEarly, 1))
		Consistently(stillOpen, "2s").Should(Succeed())

		By("probes that succeed after it opened")
		closedAt := time.Now()
		reports(ctx, ns, "p2", entry("fleet", "Closed", "ProbesSucceeded", closedAt, 1))
		Eventually(func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "fleet")
			g.Expect(state).To(Equal("Closed"))
			g.Expect(since).To(BeTemporally("==", ms(closedAt)))
			cb := getBreaker(g, ctx, ns, "fleet")
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateHalfOpen), "p0 and p1 have not followed yet")
			c := condition(cb, "Open")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(HavePrefix("A pod's probes closed the fleet at "))
		}).Should(Succeed())

		By("every pod following: nothing left to share")
		reports(ctx, ns, "p0", entry("fleet", "Closed", "Adopted", time.Now(), 1))
		reports(ctx, ns, "p1", entry("fleet", "Closed", "Adopted", time.Now(), 1))
		Eventually(func(g Gomega) {
			state, _ := fleetVerdict(g, ctx, ns, "fleet")
			g.Expect(state).To(BeEmpty())
			g.Expect(getBreaker(g, ctx, ns, "fleet").Status.State).To(Equal(resiliencev1alpha1.StateClosed))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "fleet", "CircuitClosed") }).ShouldNot(BeEmpty())
	})

	It("does not let a report dated in the future pin the verdict", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "skew", fleet(0)))).To(Succeed())
		reports(ctx, ns, "prober", entry("skew", "Closed", "Started", time.Now(), 1))
		written := time.Now()
		reports(ctx, ns, "ahead", entry("skew", "Open", "Tripped", written.Add(time.Hour), 1))
		Eventually(func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "skew")
			g.Expect(state).To(Equal("Open"))
			g.Expect(since).To(BeTemporally(">=", written.Add(counting.MaxClockSkew)), "first sight + the skew")
			g.Expect(since).To(BeTemporally("<", written.Add(counting.MaxClockSkew+time.Second)), "first sight + the skew, not the report's since")
			g.Expect(condition(getBreaker(g, ctx, ns, "skew"), "Open").Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		// Probes earned after the fleet's open, as the operator dates it.
		_, openedAt := fleetVerdict(Default, ctx, ns, "skew")
		time.Sleep(time.Until(openedAt.Add(100 * time.Millisecond)))
		closedAt := time.Now()
		reports(ctx, ns, "prober", entry("skew", "Closed", "ProbesSucceeded", closedAt, 1))
		Eventually(func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "skew")
			g.Expect(state).To(Equal("Closed"))
			g.Expect(since).To(BeTemporally("==", ms(closedAt)))
			g.Expect(condition(getBreaker(g, ctx, ns, "skew"), "Open").Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
	})

	It("reads a breaker deleted and created again afresh, ignoring the Open its reports still hold", func(ctx SpecContext) {
		old := newBreaker(ns, "reborn", fleet(0))
		Expect(k8sClient.Create(ctx, old)).To(Succeed())
		openedAt := time.Now()
		reports(ctx, ns, "web", entry("reborn", "Open", "Tripped", openedAt, 1))
		Eventually(expectOpen(ctx, "reborn", metav1.ConditionTrue)).Should(Succeed())

		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "reborn"}, &resiliencev1alpha1.CircuitBreaker{})
		}).Should(Satisfy(apierrors.IsNotFound))
		// creationTimestamp keeps whole seconds: the new breaker must be created in a
		// later second than the Open it must not count.
		time.Sleep(time.Until(openedAt.Add(1100 * time.Millisecond)))
		renewed := newBreaker(ns, "reborn", fleet(0))
		Expect(k8sClient.Create(ctx, renewed)).To(Succeed())
		Expect(renewed.UID).NotTo(Equal(old.UID))

		notOpen := func(g Gomega) {
			doc := published(g, ctx, ns, "reborn")
			g.Expect(doc).To(HaveKeyWithValue("uid", string(renewed.UID)))
			g.Expect(doc).NotTo(HaveKey("verdict"))
			cb := getBreaker(g, ctx, ns, "reborn")
			g.Expect(cb.Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(1)))
			g.Expect(cb.Status.State).To(Equal(resiliencev1alpha1.StateHalfOpen), "the pod is open, the fleet is not")
			g.Expect(condition(cb, "Open").Status).To(Equal(metav1.ConditionFalse))
		}
		Eventually(notOpen).Should(Succeed())
		Consistently(notOpen, "2s").Should(Succeed())

		By("the pod reporting the new breaker afresh")
		reports(ctx, ns, "web", entry("reborn", "Open", "Tripped", time.Now(), 1))
		Eventually(expectOpen(ctx, "reborn", metav1.ConditionTrue)).Should(Succeed())
	})

	It("opens with quorum 0 on the one pod there is", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "solo", fleet(0)))).To(Succeed())
		reports(ctx, ns, "only", entry("solo", "Closed", "Started", time.Now(), 1))
		Eventually(expectOpen(ctx, "solo", metav1.ConditionFalse)).Should(Succeed())
		reports(ctx, ns, "only", entry("solo", "Open", "Tripped", time.Now(), 1))
		Eventually(expectOpen(ctx, "solo", metav1.ConditionTrue)).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "solo", "CircuitOpened") }).Should(
			ConsistOf(ContainSubstring("1 of 1 pods opened on their own evidence (quorum 1 pod): only")))
	})

	It("opens with quorum 30% only once 3 of 10 pods earned an Open, and says how close it is", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "quorum", fleet(30)))).To(Succeed())
		for i := range 10 {
			reports(ctx, ns, fmt.Sprintf("q-%d", i), entry("quorum", "Closed", "Started", time.Now(), 1))
		}
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "quorum").Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(10)))
		}).Should(Succeed())

		firstAt := time.Now()
		reports(ctx, ns, "q-0", entry("quorum", "Open", "Tripped", firstAt, 1))
		reports(ctx, ns, "q-1", entry("quorum", "Open", "Tripped", time.Now(), 1))
		reports(ctx, ns, "q-9", entry("quorum", "Open", "Adopted", time.Now(), 1)) // counts for nothing
		belowQuorum := func(g Gomega) {
			state, _ := fleetVerdict(g, ctx, ns, "quorum")
			g.Expect(state).To(BeEmpty())
			cb := getBreaker(g, ctx, ns, "quorum")
			g.Expect(cb.Status.MemberCounts.Open).To(BeEquivalentTo(3))
			c := condition(cb, "Open")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(Equal("2 of 10 pods open on their own evidence, quorum 30% needs 3"))
		}
		Eventually(belowQuorum).Should(Succeed())
		Consistently(belowQuorum, "2s").Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "quorum", "CircuitHalfOpened") }).Should(
			ConsistOf(ContainSubstring("of 10 pods open on their own evidence, quorum 30% needs 3")))

		reports(ctx, ns, "q-2", entry("quorum", "Open", "Manual", time.Now(), 1))
		Eventually(func(g Gomega) {
			state, since := fleetVerdict(g, ctx, ns, "quorum")
			g.Expect(state).To(Equal("Open"))
			g.Expect(since).To(BeTemporally("==", ms(firstAt)), "the quorum was complete at its third most recent Open")
			c := condition(getBreaker(g, ctx, ns, "quorum"), "Open")
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("3 of 10 pods opened on their own evidence (quorum 30%)"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, "quorum", "CircuitOpened") }).Should(
			ConsistOf(SatisfyAll(ContainSubstring("q-0"), ContainSubstring("q-1"), ContainSubstring("q-2"), Not(ContainSubstring("q-9")))))
	})

	It("opens with quorum 100% only once every pod earned an Open", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "all", fleet(100)))).To(Succeed())
		for _, p := range []string{"a", "b", "c"} {
			reports(ctx, ns, p, entry("all", "Closed", "Started", time.Now(), 1))
		}
		Eventually(func(g Gomega) {
			g.Expect(getBreaker(g, ctx, ns, "all").Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(3)))
		}).Should(Succeed())
		reports(ctx, ns, "a", entry("all", "Open", "Tripped", time.Now(), 1))
		reports(ctx, ns, "b", entry("all", "Open", "ProbeFailed", time.Now(), 1))
		notYet := func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "all")
			g.Expect(cb.Status.MemberCounts).To(HaveField("Reporting", BeEquivalentTo(3)))
			c := condition(cb, "Open")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(Equal("2 of 3 pods open on their own evidence, quorum 100% needs 3"))
		}
		Eventually(notYet).Should(Succeed())
		Consistently(notYet, "1s").Should(Succeed())

		reports(ctx, ns, "c", entry("all", "Open", "Tripped", time.Now(), 1))
		Eventually(expectOpen(ctx, "all", metav1.ConditionTrue)).Should(Succeed())
	})
})

// openedK is a pod's earned Open at t0+offset that was its k-th consecutive open, lasting
// period, as an agent that backs off reports it.
func openedK(pod, reason string, offset time.Duration, k int32, period time.Duration) member {
	m := at(pod, open, reason, offset)
	m.entry.ConsecutiveOpens, m.entry.OpenTimeout = k, &metav1.Duration{Duration: period}
	return m
}

// Reports without an open period (an agent from before backoff) give a verdict without
// one, and the pods keep their own policy's; a Closed verdict never carries one.
// A Closed verdict without an open period renders without one (the decision itself is
// internal/counting's TestDecideFleetWithoutOpenPeriods).
func TestRenderAVerdictWithoutOpenPeriod(t *testing.T) {
	d := decideFleet(fleetBreaker(0), []member{openedK("x", tripped, 5*time.Second, 2, 2*time.Second), at("y", closed, succeeded, 9*time.Second)})
	if v := d.Verdict; v == nil || v.State != breakerconfig.StateClosed || v.ConsecutiveOpens != 0 || v.OpenTimeout != 0 {
		t.Errorf("verdict %+v, want Closed with no period", v)
	}
	c, err := render(fleetBreaker(0), d.Verdict, fleetCounts{})
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := breakerconfig.Marshal(c)
	if back, err := breakerconfig.Parse(doc); err != nil || back.Verdict.ConsecutiveOpens != 0 || back.Verdict.OpenTimeout != 0 {
		t.Errorf("rendered verdict %+v, %v", back.Verdict, err)
	}
}
