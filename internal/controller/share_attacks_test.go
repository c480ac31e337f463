package controller

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Each spec is an attack of issue 29 made by one pod under its own identity, against the
// figures the operator derives from the reports and the text it copies from them; each
// held on 2f232d0 (docs/rbac.md lists them).
var _ = Describe("What one pod's traffic and text cannot do to the fleet (issue 29)", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

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
			g.Expect(printable(s)).To(BeTrue(), "%q", s)
			g.Expect(s).NotTo(ContainSubstring("[2J"))
		}
		Eventually(func(g Gomega) {
			cb := getBreaker(g, ctx, ns, "plain")
			c := condition(cb, "ConfigApplied")
			g.Expect(c.Reason).To(Equal(resiliencev1alpha1.ReasonMembersRejected))
			g.Expect(c.Message).To(ContainSubstring("rogue: bad config: xxx"))
			g.Expect(c.Message).To(HaveSuffix(truncated))
			clean(g, c.Message)
			g.Expect(cb.Status.Members).To(HaveLen(1))
			clean(g, cb.Status.Members[0].ConfigError)
			g.Expect(len([]rune(cb.Status.Members[0].ConfigError))).To(Equal(maxConfigErrorText))

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
