package webhook_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
	"github.com/fusebox-dev/fusebox/pkg/webhook/circuitbreaker"
)

func duration(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	Expect(err).NotTo(HaveOccurred())
	return &metav1.Duration{Duration: d}
}

func newBreaker(ns string, spec resiliencev1alpha1.CircuitBreakerSpec, annotations map[string]string) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cb-", Namespace: ns, Annotations: annotations},
		Spec:       spec,
	}
}

// causeFields returns the field of each cause of an Invalid error.
func causeFields(err error) []string {
	GinkgoHelper()
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	var fields []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	return fields
}

var _ = Describe("CircuitBreaker admission", func() {
	var (
		ctx = context.Background()
		ns  string
	)
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("warns about legal but risky settings, on create and on update",
		func(spec resiliencev1alpha1.CircuitBreakerSpec, annotations map[string]string, want []string) {
			cl, w := warningClient()
			cb := newBreaker(ns, spec, annotations)
			Expect(cl.Create(ctx, cb)).To(Succeed())
			Expect(w.Take()).To(Equal(want))

			// The same warnings on an update that keeps the settings.
			patch := client.MergeFrom(cb.DeepCopy())
			cb.Labels = map[string]string{"touched": "yes"}
			Expect(cl.Patch(ctx, cb, patch)).To(Succeed())
			Expect(w.Take()).To(Equal(want))
		},
		Entry("none for the defaults", resiliencev1alpha1.CircuitBreakerSpec{}, nil, nil),
		Entry("minimumThroughput 2", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](2)}, nil, []string{
			"spec.minimumThroughput is 2: the failure rate is judged on as few as 2 calls, so a single failure can open the circuit; 5 or more is recommended",
		}),
		Entry("openTimeout shorter than window", resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: duration("5s"), Window: duration("1m")}, nil, []string{
			"spec.openTimeout (5s) is shorter than spec.window (1m0s): the circuit rests for less time than it takes to measure a failure rate, so a struggling dependency gets little relief between probes",
		}),
		Entry("halfOpenPermittedCalls above minimumThroughput", resiliencev1alpha1.CircuitBreakerSpec{HalfOpenPermittedCalls: ptr.To[int32](10), MinimumThroughput: ptr.To[int32](8)}, nil, []string{
			"spec.halfOpenPermittedCalls (10) is above spec.minimumThroughput (8): a half-open circuit lets more probe calls at a time reach a dependency that just failed than a closed circuit needs to judge it",
		}),
		Entry("ForcedOpen, nobody said who or why", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen}, nil, []string{
			"spec.mode is ForcedOpen but the annotations fusebox.dev/forced-by and fusebox.dev/forced-reason are not set: record who forced the circuit and why, so that it is not left open after the incident",
		}),
		Entry("ForcedOpen, who but not why", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen},
			map[string]string{resiliencev1alpha1.AnnotationForcedBy: "alice@example.com"}, []string{
				"spec.mode is ForcedOpen but the annotation fusebox.dev/forced-reason is not set: record who forced the circuit and why, so that it is not left open after the incident",
			}),
		Entry("none for ForcedOpen with who and why", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedOpen},
			map[string]string{resiliencev1alpha1.AnnotationForcedBy: "alice@example.com", resiliencev1alpha1.AnnotationForcedReason: "INC-1234: provider outage"}, nil),
		Entry("ForcedClosed, nobody said who", resiliencev1alpha1.CircuitBreakerSpec{Mode: resiliencev1alpha1.ModeForcedClosed},
			map[string]string{resiliencev1alpha1.AnnotationForcedReason: "load test"}, []string{
				"spec.mode is ForcedClosed but the annotation fusebox.dev/forced-by is not set: record who forced the circuit and why, so that it is not left closed after the incident",
			}),
		Entry("several at once, in a fixed order", resiliencev1alpha1.CircuitBreakerSpec{MinimumThroughput: ptr.To[int32](3), OpenTimeout: duration("2s"), HalfOpenPermittedCalls: ptr.To[int32](4)}, nil, []string{
			"spec.minimumThroughput is 3: the failure rate is judged on as few as 3 calls, so 2 failures can open the circuit; 5 or more is recommended",
			"spec.openTimeout (2s) is shorter than spec.window (10s): the circuit rests for less time than it takes to measure a failure rate, so a struggling dependency gets little relief between probes",
			"spec.halfOpenPermittedCalls (4) is above spec.minimumThroughput (3): a half-open circuit lets more probe calls at a time reach a dependency that just failed than a closed circuit needs to judge it",
		}),
	)

	It("warns when an update forces the circuit without saying who and why", func() {
		cl, w := warningClient()
		cb := newBreaker(ns, resiliencev1alpha1.CircuitBreakerSpec{}, nil)
		Expect(cl.Create(ctx, cb)).To(Succeed())
		Expect(w.Take()).To(BeEmpty())
		patch := client.MergeFrom(cb.DeepCopy())
		cb.Spec.Mode = resiliencev1alpha1.ModeForcedOpen
		Expect(cl.Patch(ctx, cb, patch)).To(Succeed())
		Expect(w.Take()).To(ConsistOf(ContainSubstring("spec.mode is ForcedOpen but the annotations")))
	})

	DescribeTable("leaves durations finer than a millisecond to the schema, which names the field",
		func(name string, spec resiliencev1alpha1.CircuitBreakerSpec, fields []string) {
			cb := newBreaker(ns, spec, nil)
			cb.GenerateName, cb.Name = "", name
			err := k8sClient.Create(ctx, cb)
			Expect(err).To(MatchError(ContainSubstring("must be a whole number of milliseconds")))
			Expect(err).NotTo(MatchError(ContainSubstring("admission webhook")))
			// The schema's causes come in no fixed order.
			Expect(causeFields(err)).To(ConsistOf(fields))
		},
		Entry("an openTimeout finer than a millisecond", "sub-ms", resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: duration("1.0000001s")}, []string{"spec.openTimeout"}),
		Entry("both durations", "both", resiliencev1alpha1.CircuitBreakerSpec{OpenTimeout: duration("30s100us"), Window: duration("10s1ns")}, []string{"spec.openTimeout", "spec.window"}),
	)

	// The same inputs api/v1alpha1's suite sends with no webhook installed: the schema
	// refuses each before any validating webhook is asked, with the same message.
	It("refuses what the webhooks refuse in the schema, with the webhooks installed too", func() {
		for _, r := range testenv.Refusals() {
			err := k8sClient.Create(ctx, testenv.Breaker(ns, "refused", r.Spec))
			Expect(testenv.CheckRefusal(r, err)).To(Succeed())
		}
	})

	It("leaves a name too long for a ConfigMap key to the API server's own policy, whose message names the field", func() {
		cb := newBreaker(ns, resiliencev1alpha1.CircuitBreakerSpec{}, nil)
		cb.GenerateName, cb.Name = "", strings.Repeat("n", circuitbreaker.MaxNameLength+1)
		// The policy is enforced a moment after the suite installs it; the webhook says
		// the same until then.
		Eventually(func() error { return k8sClient.Create(ctx, cb.DeepCopy(), client.DryRunAll) }).
			Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy")))
		err := k8sClient.Create(ctx, cb)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("metadata.name must be at most 248 characters"))
		Expect(err.Error()).NotTo(ContainSubstring("admission webhook"))
	})

	It("accepts the longest name whose ConfigMap key is valid", func() {
		cb := newBreaker(ns, resiliencev1alpha1.CircuitBreakerSpec{}, nil)
		cb.GenerateName, cb.Name = "", strings.Repeat("n", circuitbreaker.MaxNameLength)
		Expect(k8sClient.Create(ctx, cb)).To(Succeed())
	})

	It("leaves a malformed duration to the schema, whose message names the field", func() {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resilience.fusebox.dev/v1alpha1",
			"kind":       "CircuitBreaker",
			"metadata":   map[string]any{"name": "no-unit", "namespace": ns},
			"spec":       map[string]any{"openTimeout": "30"},
		}}
		err := k8sClient.Create(ctx, u)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.openTimeout"))
		Expect(err.Error()).NotTo(ContainSubstring("admission webhook"))
	})

	It("stores every default", func() {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resilience.fusebox.dev/v1alpha1",
			"kind":       "CircuitBreaker",
			"metadata":   map[string]any{"name": "bare", "namespace": ns},
		}}
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		var cb resiliencev1alpha1.CircuitBreaker
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), &cb)).To(Succeed())
		want := resiliencev1alpha1.CircuitBreakerSpec{}
		circuitbreaker.SetDefaults(&want)
		Expect(cb.Spec).To(Equal(want))
		Expect(cb.Status).To(Equal(resiliencev1alpha1.CircuitBreakerStatus{}))
	})
})
