package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakertest"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// quietCalls is how many calls quietRejection makes: the share it refuses varies around
// the probability with a standard deviation under 0.008.
const quietCalls = 4000

// quietRejection runs a breaker as a quiet pod of the namespace would (a new replica, a
// restarted pod): on the document published for it, told the fleet it carries, one call a
// second, too few for its own window to count, so that it throttles on the fleet's
// figures. It returns the share of its quietCalls calls throttling refused.
func quietRejection(g Gomega, ctx context.Context, ns, name string) float64 {
	var cm corev1.ConfigMap
	g.Expect(k8sClient.Get(ctx, configMapKey(ns), &cm)).To(Succeed())
	c, err := breakerconfig.Parse([]byte(cm.Data[breakerconfig.Key(name)]))
	g.Expect(err).NotTo(HaveOccurred())
	p, err := kube.PolicyOf(c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Fleet).NotTo(BeNil())
	clk := breakertest.NewClock(time.Unix(1_000_000, 0))
	b, err := breaker.New(name, p, breaker.WithClock(clk))
	g.Expect(err).NotTo(HaveOccurred())
	b.SetFleet(breaker.Fleet{Pods: c.Fleet.Pods, Requests: c.Fleet.Requests, Accepts: c.Fleet.Accepts})
	refused := 0
	for range quietCalls {
		err := b.Execute(ctx, func(context.Context) error { return nil })
		switch {
		case errors.Is(err, breaker.ErrThrottled):
			refused++
		case err != nil:
			g.Expect(err).NotTo(HaveOccurred())
		}
		clk.Advance(time.Second)
	}
	g.Expect(b.Traffic().Requests).To(BeNumerically("<", p.MinimumThroughput), "the pod is quiet")
	return float64(refused) / quietCalls
}

// trafficLine is a report entry with a window's traffic, as a pod's agent writes it.
func trafficLine(breakerName string, requests, accepts, retries int64) resiliencev1alpha1.BreakerReportEntry {
	e := line(breakerName, resiliencev1alpha1.StateClosed, started, time.Now())
	e.Requests, e.Accepts, e.Retries, e.Throttled = &requests, &accepts, &retries, ptr.To[int64](0)
	return e
}

// Each spec is an attack of issue 29 made by one pod under its own identity, against the
// figures the operator derives from the reports and the text it copies from them; each
// held on 2f232d0 (docs/rbac.md lists them).
var _ = Describe("What one pod's traffic and text cannot do to the fleet (issue 29)", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	// Nine honest pods of 1,000 requests each, whose dependency accepts 25 % to 45 % of
	// them: at k = 2 their own rejection probabilities span about 0.10 to 0.50.
	const honest = 9
	honestAccepts := func(i int) int64 { return 250 + 25*int64(i) }
	honestRange := func() (lo, hi float64) {
		lo, hi = 1, 0
		for i := range honest {
			p := counting.Rejection(counting.Window{Requests: 1000, Accepts: honestAccepts(i)}, 2)
			lo, hi = min(lo, p), max(hi, p)
		}
		return lo, hi
	}
	// A fleet of nine honest pods and a rogue, for a throttled breaker whose quiet pods
	// stay quiet: minimumThroughput is above what one call a second fills its window with.
	fleetOfTen := func(ctx context.Context, name string) client.Client {
		Expect(k8sClient.Create(ctx, newBreaker(ns, name, func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.Throttle = &resiliencev1alpha1.Throttle{K: ptr.To(2.0)}
			s.RetryBudget = &resiliencev1alpha1.RetryBudget{}
			s.MinimumThroughput = ptr.To[int32](100)
		}))).To(Succeed())
		now := time.Now()
		for i := range honest {
			reports(ctx, ns, fmt.Sprintf("honest-%d", i), withTraffic(entry(name, "Closed", "Started", now, 1), 1000, honestAccepts(i), 50, 0))
		}
		return asPod(ctx, ns, "rogue")
	}
	// Its quiet pods refuse what the honest pods' windows make them refuse, and no more:
	// the published window's probability exactly, and a real breaker on it within the noise
	// of its draws.
	holdsTheHonestRange := func(ctx context.Context, name string) {
		lo, hi := honestRange()
		Eventually(func(g Gomega) {
			f := publishedFleet(published(g, ctx, ns, name))
			g.Expect(f).To(HaveKeyWithValue("pods", 10.0))
			p := counting.Rejection(counting.Window{Requests: int64(f["requests"].(float64)), Accepts: int64(f["accepts"].(float64))}, 2)
			g.Expect(p).To(And(BeNumerically(">=", lo), BeNumerically("<=", hi)), "published %v", f)
			g.Expect(quietRejection(g, ctx, ns, name)).To(And(BeNumerically(">=", lo-0.04), BeNumerically("<=", hi+0.04)))
		}).Should(Succeed())
	}

	It("cannot make every quiet pod refuse all its calls with requests 10^12 and no accepts", func(ctx SpecContext) {
		rogue := fleetOfTen(ctx, "inflated")
		Eventually(func() error {
			return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", trafficLine("inflated", resiliencev1alpha1.MaxTrafficCount, 0, 0)))
		}).Should(Succeed())
		holdsTheHonestRange(ctx, "inflated")
		// status.traffic counts the rogue for at most four honest pods' requests.
		Eventually(func(g Gomega) {
			st := getBreaker(g, ctx, ns, "inflated").Status.Traffic
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Pods).To(BeEquivalentTo(10))
			g.Expect(st.Requests).To(Equal(int64(honest*1000+4*1000)), "the liar counts for 4 times the median pod")
			g.Expect(*st.RetryPercent).To(And(BeNumerically(">=", 0), BeNumerically("<=", 100)))
			g.Expect(*st.ThrottledPercent).To(And(BeNumerically(">=", 0), BeNumerically("<=", 100)))
		}).Should(Succeed())
	})

	It("cannot switch throttling off for quiet pods with accepts far above its requests", func(ctx SpecContext) {
		rogue := fleetOfTen(ctx, "deflated")
		// Refused by the API server itself, naming the field.
		err := writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", trafficLine("deflated", 10, resiliencev1alpha1.MaxTrafficCount, 0)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("breakers[0].accepts: Invalid value"))
		Expect(err.Error()).To(ContainSubstring("must be at most requests"))
		// The most the schema admits: every one of 10^12 requests accepted.
		Eventually(func() error {
			return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue",
				trafficLine("deflated", resiliencev1alpha1.MaxTrafficCount, resiliencev1alpha1.MaxTrafficCount, 0)))
		}).Should(Succeed())
		holdsTheHonestRange(ctx, "deflated")
	})

	It("cannot push status.traffic.retryPercent past 100 with requests and retries near 10^12", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "retried", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
			s.RetryBudget = &resiliencev1alpha1.RetryBudget{}
		}))).To(Succeed())
		rogue := asPod(ctx, ns, "rogue")
		err := writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", trafficLine("retried", 10, 10, 11)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("breakers[0].retries: Invalid value"))
		Eventually(func() error {
			return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue",
				trafficLine("retried", resiliencev1alpha1.MaxTrafficCount, 0, resiliencev1alpha1.MaxTrafficCount-1)))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			st := getBreaker(g, ctx, ns, "retried").Status.Traffic
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Requests).To(Equal(int64(resiliencev1alpha1.MaxTrafficCount)))
			g.Expect(st.RetryPercent).To(Equal(ptr.To[int32](100)))
		}).Should(Succeed())
	})

	It("cannot write terminal escape sequences into the status, its conditions or its Events", func(ctx SpecContext) {
		Expect(k8sClient.Create(ctx, newBreaker(ns, "plain"))).To(Succeed())
		Expect(k8sClient.Create(ctx, newBreaker(ns, "group"))).To(Succeed())
		rogue := asPod(ctx, ns, "rogue")
		refusal := line("plain", resiliencev1alpha1.StateClosed, started, time.Now())
		refusal.ConfigError = "\x1b]0;owned\x07\x1b[2J\x1b[Hbad\tconfig\x1b[31m: " + strings.Repeat("x", 900) + "\x1b[0m"
		group := line("group", resiliencev1alpha1.StateOpen, tripped, time.Now())
		group.Keys = &resiliencev1alpha1.KeySummary{Keys: 3, Open: 3, Worst: []string{"\x1b[1Ahost-a", "host-b\u202e", "\u009b2Jhost-c"}}
		Eventually(func() error { return writeOwn(ctx, rogue, ownReport(ctx, ns, "rogue", refusal, group)) }).Should(Succeed())

		clean := func(g Gomega, s string) {
			g.Expect(counting.Text(s, len(s))).To(Equal(s), "%q is not plain text", s)
			g.Expect(s).NotTo(ContainSubstring("[2J"))
		}
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "plain")
			c := condition(cb, "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersRejected))
			g.Expect(c.Message).To(ContainSubstring("rogue: bad config: xxx"))
			g.Expect(c.Message).To(HaveSuffix("…"))
			clean(g, c.Message)
			g.Expect(cb.Status.Members).To(HaveLen(1))
			clean(g, cb.Status.Members[0].ConfigError)
			g.Expect(utf8.RuneCountInString(cb.Status.Members[0].ConfigError)).To(Equal(counting.MaxConfigErrorText))

			keys := getBreaker(g, ctx, ns, "group").Status.Keys
			g.Expect(keys).NotTo(BeNil())
			g.Expect(keys.Worst).To(ConsistOf("host-a", "host-b", "host-c"))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			notes := eventNotes(ctx, ns, "plain", resiliencev1alpha1.EventConfigRejected)
			g.Expect(notes).To(HaveLen(1))
			g.Expect(notes[0]).To(ContainSubstring("rogue: bad config"))
			clean(g, notes[0])
			opened := eventNotes(ctx, ns, "group", resiliencev1alpha1.EventCircuitOpened)
			g.Expect(opened).To(HaveLen(1))
			clean(g, opened[0])
		}).Should(Succeed())
		var stored resiliencev1alpha1.BreakerReport
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rogue"}, &stored)).To(Succeed())
		Expect(stored.Breakers).To(ContainElement(HaveField("ConfigError", refusal.ConfigError)), "the report keeps what the pod wrote")
	})
})
