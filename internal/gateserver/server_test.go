package gateserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
)

// breakerWithRevisions creates a CircuitBreaker and writes status.revisions, as the
// operator would have from its pods' reports.
func breakerWithRevisions(ctx context.Context, namespace, name string, revs ...resiliencev1alpha1.RevisionStatus) {
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	Expect(k8sClient.Create(ctx, cb)).To(Succeed())
	cb.Status.Revisions = revs
	Expect(k8sClient.Status().Update(ctx, cb)).To(Succeed())
}

func revision(name string, pods int32, state resiliencev1alpha1.State, open int32, calls int64) resiliencev1alpha1.RevisionStatus {
	return resiliencev1alpha1.RevisionStatus{Revision: name, Pods: pods, State: state, Open: open, Calls: ptr.To(calls)}
}

// judgement decodes a gate answer.
func judgement(body string) gate.Judgement {
	var j gate.Judgement
	ExpectWithOffset(1, json.Unmarshal([]byte(body), &j)).To(Succeed(), body)
	return j
}

var _ = Describe("The rollout gate", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("answers only callers the API server authenticates and authorizes for get on that CircuitBreaker", func(ctx SpecContext) {
		breakerWithRevisions(ctx, ns, "payments",
			revision("old", 4, resiliencev1alpha1.StateClosed, 0, 400), revision("new", 1, resiliencev1alpha1.StateClosed, 0, 100))
		url := gatePath(ns, "payments", "revision=new")

		By("no token: 401")
		code, body, err := call(http.MethodGet, url, "", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)

		By("a token the API server does not know: 401")
		code, body, err = call(http.MethodGet, url, "not-a-token", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)

		By("a service account without get on the breaker: 403, the same as for a breaker that does not exist")
		stranger := serviceAccountToken(ctx, ns, "stranger")
		code, body, err = call(http.MethodGet, url, stranger, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)
		Expect(body).NotTo(ContainSubstring("phase"))
		code, _, err = call(http.MethodGet, gatePath(ns, "no-such-breaker", "revision=new"), stranger, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden))

		By("a role that may get another breaker only: still 403, since the question is about this resource")
		Expect(k8sClient.Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "search-only"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{resiliencev1alpha1.GroupVersion.Group}, Resources: []string{"circuitbreakers"},
				Verbs: []string{"get"}, ResourceNames: []string{"search"}}},
		})).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger-search-only"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "search-only"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "stranger", Namespace: ns}},
		})).To(Succeed())
		breakerWithRevisions(ctx, ns, "search", revision("new", 1, resiliencev1alpha1.StateClosed, 0, 100))
		// The grant takes effect once RBAC sees it and the refusal the gate kept runs out.
		Eventually(func(g Gomega) {
			code, body, err := call(http.MethodGet, gatePath(ns, "search", "revision=new"), stranger, "")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
		}).Should(Succeed())
		code, body, err = call(http.MethodGet, url, stranger, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)

		By("the gate-reader ClusterRole bound in the namespace: 200 and the judgement")
		reader := serviceAccountToken(ctx, ns, "argo-rollouts")
		bindGateReader(ctx, ns, "argo-rollouts")
		Eventually(func(g Gomega) {
			code, body, err := call(http.MethodGet, url, reader, "")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
			j := judgement(body)
			g.Expect(j.Phase).To(Equal(gate.PhaseSuccessful), j.Reason)
			g.Expect(j.Baseline).NotTo(BeNil())
			g.Expect(j.Baseline.Revision).To(Equal("old"))
		}).Should(Succeed())

		By("a breaker of another namespace: 403, the binding is this namespace's")
		other := newNamespace(ctx)
		breakerWithRevisions(ctx, other, "payments", revision("new", 1, resiliencev1alpha1.StateClosed, 0, 100))
		code, body, err = call(http.MethodGet, gatePath(other, "payments", "revision=new"), reader, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)
	})

	It("judges each phase of the table from status.revisions", func(ctx SpecContext) {
		reader := serviceAccountToken(ctx, ns, "reader")
		bindGateReader(ctx, ns, "reader")
		breakerWithRevisions(ctx, ns, "canary-fails",
			revision("old", 4, resiliencev1alpha1.StateClosed, 0, 400), revision("new", 1, resiliencev1alpha1.StateOpen, 1, 40))
		breakerWithRevisions(ctx, ns, "outage",
			revision("old", 4, resiliencev1alpha1.StateOpen, 4, 400), revision("new", 1, resiliencev1alpha1.StateOpen, 1, 40))
		breakerWithRevisions(ctx, ns, "quiet",
			revision("old", 4, resiliencev1alpha1.StateClosed, 0, 400), revision("new", 1, resiliencev1alpha1.StateClosed, 0, 3))
		breakerWithRevisions(ctx, ns, "healthy",
			revision("old", 4, resiliencev1alpha1.StateClosed, 0, 400), revision("older", 2, resiliencev1alpha1.StateOpen, 2, 100),
			revision("new", 1, resiliencev1alpha1.StateClosed, 0, 100))
		for _, tc := range []struct {
			breaker, query string
			phase          gate.Phase
			baseline       string
		}{
			{"canary-fails", "revision=new", gate.PhaseFailed, "old"},
			{"outage", "revision=new", gate.PhaseInconclusive, "old"},
			{"quiet", "revision=new", gate.PhaseInconclusive, "old"},
			{"healthy", "revision=new", gate.PhaseSuccessful, "old"},
			{"healthy", "revision=new&baseline=older", gate.PhaseSuccessful, "older"},
			{"healthy", "revision=gone", gate.PhaseInconclusive, "old"},
		} {
			Eventually(func(g Gomega) {
				code, body, err := call(http.MethodGet, gatePath(ns, tc.breaker, tc.query), reader, "")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), body)
				j := judgement(body)
				g.Expect(j.Phase).To(Equal(tc.phase), "%s?%s: %s", tc.breaker, tc.query, j.Reason)
				g.Expect(j.Baseline).NotTo(BeNil())
				g.Expect(j.Baseline.Revision).To(Equal(tc.baseline))
			}).Should(Succeed())
		}
	})

	It("refuses malformed questions with an error that names what is wrong", func(ctx SpecContext) {
		reader := serviceAccountToken(ctx, ns, "reader")
		bindGateReader(ctx, ns, "reader")
		breakerWithRevisions(ctx, ns, "payments", revision("new", 1, resiliencev1alpha1.StateClosed, 0, 100))
		Eventually(func() int {
			code, _, _ := call(http.MethodGet, gatePath(ns, "payments", "revision=new"), reader, "")
			return code
		}).Should(Equal(http.StatusOK))
		for _, tc := range []struct {
			method, url, body string
			code              int
			says              string
		}{
			{http.MethodGet, gatePath(ns, "payments", ""), "", http.StatusBadRequest, "revision is required"},
			{http.MethodGet, gatePath(ns, "payments", "revision=new&baseline=new"), "", http.StatusBadRequest, "is the revision judged"},
			{http.MethodGet, gatePath(ns, "payments", "revision=a%20b"), "", http.StatusBadRequest, `revision \"a b\" is not a revision`},
			{http.MethodGet, gatePath(ns, "absent", "revision=new"), "", http.StatusNotFound, `circuitbreaker \"absent\" not found`},
			{http.MethodPut, gatePath(ns, "payments", "revision=new"), "", http.StatusMethodNotAllowed, "the gate answers GET"},
			{http.MethodGet, gateURL + "/v1/namespaces/" + ns + "/circuitbreakers/payments", "", http.StatusNotFound, "no such path"},
			{http.MethodPost, gatePath(ns, "payments", ""), `{"name": "podinfo"`, http.StatusBadRequest, "not a Flagger webhook payload"},
			{http.MethodPost, gatePath(ns, "payments", ""), `{"name": "podinfo", "metadata": {}}`, http.StatusBadRequest, "name the revision to judge"},
			{http.MethodPost, gatePath(ns, "payments", ""), `{"metadata": {"selector": "app in (("}}`, http.StatusBadRequest, "metadata.selector"},
			{http.MethodPost, gatePath(ns, "payments", ""), `{"metadata": {"pad": "` + strings.Repeat("x", maxBodySize) + `"}}`, http.StatusRequestEntityTooLarge, "body"},
		} {
			code, body, err := call(tc.method, tc.url, reader, tc.body)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(tc.code), "%s %s: %s", tc.method, tc.url, body)
			Expect(body).To(ContainSubstring(tc.says), "%s %s", tc.method, tc.url)
			var e errorBody
			Expect(json.Unmarshal([]byte(body), &e)).To(Succeed(), body)
		}
	})

	Describe("as a Flagger webhook", func() {
		// flaggerBody is Flagger's payload, as its webhooks send it.
		flaggerBody := func(metadata map[string]string) string {
			b, err := json.Marshal(map[string]any{"name": "podinfo", "namespace": ns, "phase": "Progressing", "checksum": "6c7b9f", "metadata": metadata})
			Expect(err).NotTo(HaveOccurred())
			return string(b)
		}
		var token string
		BeforeEach(func(ctx SpecContext) {
			token = serviceAccountToken(ctx, ns, "flagger")
			bindGateReader(ctx, ns, "flagger")
		})

		It("takes the token from the metadata, as Flagger sends no headers, and answers 200 only when Successful", func(ctx SpecContext) {
			breakerWithRevisions(ctx, ns, "payments",
				revision("primary", 4, resiliencev1alpha1.StateClosed, 0, 400), revision("canary", 1, resiliencev1alpha1.StateClosed, 0, 100),
				revision("broken", 1, resiliencev1alpha1.StateOpen, 1, 40))
			url := gatePath(ns, "payments", "")

			code, body, err := call(http.MethodPost, url, "", flaggerBody(map[string]string{"revision": "canary"}))
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusUnauthorized), body)

			Eventually(func(g Gomega) {
				code, body, err := call(http.MethodPost, url, "", flaggerBody(map[string]string{"revision": "canary", "token": token}))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), body)
				g.Expect(judgement(body).Phase).To(Equal(gate.PhaseSuccessful))
			}).Should(Succeed())

			By("Failed and Inconclusive are refusals, with the judgement in the body Flagger records")
			code, body, err = call(http.MethodPost, url, "", flaggerBody(map[string]string{"revision": "broken", "token": token}))
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusPreconditionFailed), body)
			Expect(judgement(body).Phase).To(Equal(gate.PhaseFailed))
			code, body, err = call(http.MethodPost, url, "", flaggerBody(map[string]string{"revision": "gone", "token": token}))
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusPreconditionFailed), body)
			Expect(judgement(body).Phase).To(Equal(gate.PhaseInconclusive))

			By("the query names the revision over the metadata, and a header token serves as well")
			code, body, err = call(http.MethodPost, gatePath(ns, "payments", "revision=broken&baseline=canary"), token, flaggerBody(map[string]string{"revision": "canary"}))
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusPreconditionFailed), body)
			j := judgement(body)
			Expect(j.Revision.Revision).To(Equal("broken"))
			Expect(j.Baseline.Revision).To(Equal("canary"))
		})

		It("finds the canary's revision from a selector of its pods", func(ctx SpecContext) {
			breakerWithRevisions(ctx, ns, "payments",
				revision("aaa111", 3, resiliencev1alpha1.StateClosed, 0, 300), revision("bbb222", 2, resiliencev1alpha1.StateOpen, 2, 80))
			// Flagger's canary pods carry the Deployment's labels; the primary's carry
			// app=podinfo-primary.
			runningPod(ctx, ns, "podinfo-primary-1", map[string]string{"app": "podinfo-primary", "pod-template-hash": "aaa111"})
			runningPod(ctx, ns, "podinfo-1", map[string]string{"app": "podinfo", "pod-template-hash": "bbb222"})
			runningPod(ctx, ns, "podinfo-2", map[string]string{"app": "podinfo", "pod-template-hash": "bbb222"})
			url := gatePath(ns, "payments", "")
			Eventually(func(g Gomega) {
				code, body, err := call(http.MethodPost, url, "", flaggerBody(map[string]string{"selector": "app=podinfo", "token": token}))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusPreconditionFailed), body)
				j := judgement(body)
				g.Expect(j.Phase).To(Equal(gate.PhaseFailed), j.Reason)
				g.Expect(j.Revision.Revision).To(Equal("bbb222"))
				g.Expect(j.Baseline.Revision).To(Equal("aaa111"))
			}).Should(Succeed())

			code, body, err := call(http.MethodPost, url, "", flaggerBody(map[string]string{"selector": "app=nothing", "token": token}))
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusPreconditionFailed), body)
			j := judgement(body)
			Expect(j.Phase).To(Equal(gate.PhaseInconclusive))
			Expect(j.Reason).To(ContainSubstring(`matches selector "app=nothing"`))
		})
	})
})

// runningPod creates a pod with labels and marks it Running, as a kubelet would.
func runningPod(ctx context.Context, namespace, name string, labels map[string]string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed(), fmt.Sprintf("pod %s", name))
}
