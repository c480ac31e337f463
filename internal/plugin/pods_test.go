package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// runPods runs the plugin with the agents reached through fetch.
func runPods(ctx context.Context, fetch agentFetcher, args ...string) (stdout, stderr string, err error) {
	var out, errOut testutil.SyncBuffer
	err = startWith(ctx, fetch, &out, &errOut, args...)
	return out.String(), errOut.String(), err
}

// podsScene is a breaker whose pods report through two real node agents, one of which
// has stopped answering, and one pod reporting on its own.
type podsScene struct {
	ns         string
	live, hung *testAgent
	// order is the pods `pods payments` must list, in its order.
	order []string
}

// newPodsScene sets the scene: breaker payments at generation 2; on the live agent's
// node pods open (two), half-open, refusing the config, behind it and closed, each since
// another time; on the hung agent's node a pod that tripped, which cannot be listed; a
// pod reporting on its own; and an agent's pod that has not started.
func newPodsScene(t *testing.T) *podsScene {
	t.Helper()
	s := &podsScene{live: startAgent(t, "live"), hung: startAgent(t, "hung")}
	s.ns = newNamespace(t, "")
	createBreaker(t, s.ns, "payments", nil)
	cb := getBreaker(t, s.ns, "payments")
	patch := client.MergeFrom(cb.DeepCopy())
	cb.Spec.FailureRatePercent = ptr.To[int32](60)
	if err := k8sClient.Patch(context.Background(), cb, patch); err != nil {
		t.Fatal(err)
	}
	gen := getBreaker(t, s.ns, "payments").Generation
	now := time.Now()
	line := func(state, reason string, ago time.Duration, edit func(*breakerconfig.ReportEntry)) breakerconfig.ReportEntry {
		e := breakerconfig.ReportEntry{Name: "payments", State: state, Since: breakerconfig.NewTime(now.Add(-ago)), Reason: reason, ConfigGeneration: gen}
		if reason == breakerconfig.ReasonTripped {
			e.Trigger, e.Calls, e.FailureRatePercent = breakerconfig.TriggerFailureRate, ptr.To[int64](40), ptr.To[int32](75)
		}
		if edit != nil {
			edit(&e)
		}
		return e
	}
	older := func(e *breakerconfig.ReportEntry) { e.ConfigGeneration = gen - 1 }
	for _, p := range []struct {
		pod     string
		entries []breakerconfig.ReportEntry
	}{
		{"settled", []breakerconfig.ReportEntry{line(breakerconfig.StateClosed, breakerconfig.ReasonProbesSucceeded, 30*time.Minute, nil)}},
		{"open-old", []breakerconfig.ReportEntry{line(breakerconfig.StateOpen, breakerconfig.ReasonTripped, 10*time.Minute, nil)}},
		{"behind", []breakerconfig.ReportEntry{line(breakerconfig.StateClosed, breakerconfig.ReasonStarted, 2*time.Hour, older)}},
		{"probing", []breakerconfig.ReportEntry{line(breakerconfig.StateHalfOpen, breakerconfig.ReasonTimedOut, time.Minute, nil)}},
		{"refusing", []breakerconfig.ReportEntry{line(breakerconfig.StateClosed, breakerconfig.ReasonStarted, time.Hour, func(e *breakerconfig.ReportEntry) {
			older(e)
			e.ConfigError = "spec.window: must be between 1s and 1h"
		})}},
		// Another breaker of the same pod is not this one's line.
		{"open-new", []breakerconfig.ReportEntry{
			line(breakerconfig.StateOpen, breakerconfig.ReasonTripped, 5*time.Second, nil),
			{Name: "search", State: breakerconfig.StateOpen, Since: breakerconfig.NewTime(now), Reason: breakerconfig.ReasonManual, ConfigGeneration: 1},
		}},
	} {
		s.live.report(t, s.live.appPod(t, s.ns, p.pod, "6d4cf56db6"), p.entries...)
	}
	s.hung.report(t, s.hung.appPod(t, s.ns, "stranded", "6d4cf56db6"), line(breakerconfig.StateOpen, breakerconfig.ReasonTripped, time.Second, nil))
	s.hung.hold()
	// Its own BreakerReport, on generation 1: behind, and more recent than "behind".
	report(t, s.ns, "self-reporting", entry("payments", resiliencev1alpha1.StateClosed, "Started"))
	// An agent's pod the kubelet has not started: nothing to ask.
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: fuseboxNamespace, Name: "fusebox-node-pending", Labels: agentLabels},
		Spec:       corev1.PodSpec{NodeName: "pending-node", Containers: []corev1.Container{{Name: "fuseboxd", Image: "fuseboxd"}}},
	}
	if err := k8sClient.Create(context.Background(), pending); err != nil {
		t.Fatal(err)
	}
	deleteAtEnd(t, pending)
	s.order = []string{"open-new", "open-old", "probing", "refusing", "self-reporting", "behind", "settled"}
	return s
}

// deleteAtEnd deletes the pod when the test ends, at once: the agents' namespace is the
// whole suite's, and the next test must find only its own agents there.
func deleteAtEnd(t *testing.T, p *corev1.Pod) {
	t.Cleanup(func() {
		if err := k8sClient.Delete(context.Background(), p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete pod %s: %v", p.Name, err)
		}
	})
}

// podsListed are the POD cells of a pods table, in order.
func podsListed(t *testing.T, out string) []string {
	t.Helper()
	var pods []string
	for _, line := range strings.Split(out, "\n")[1:] {
		if strings.TrimSpace(line) == "" {
			break
		}
		// NODE is one word, or ends in "(own report)" for a pod reporting on its own.
		f := strings.Fields(line)
		at := 1
		if i := slices.Index(f, "report)"); i >= 0 {
			at = i + 1
		}
		pods = append(pods, f[at])
	}
	return pods
}

// kubectl fusebox pods lists the pods of the agent that answers, open first, beside the
// pods that report on their own, and names the agents that did not answer: the hung one
// (it took the connection and said nothing) and the one whose pod has not started.
func TestPodsListsEveryAnsweringAgentsPodsOpenFirst(t *testing.T) {
	s := newPodsScene(t)
	ctx := context.Background()
	fetch := directFetcher(s.live, s.hung)

	out, errOut, err := runPods(ctx, fetch, "-n", s.ns, "pods", "payments")
	if err != nil {
		t.Fatalf("pods payments: %v\nstderr: %s", err, errOut)
	}
	if got, want := strings.Join(podsListed(t, out), " "), strings.Join(s.order, " "); got != want {
		t.Errorf("pods listed:\n got %s\nwant %s\n%s", got, want, out)
	}
	// SINCE is an age, which moves with the clock: the others are what the pod said.
	openNew := podRow(t, out, "open-new")
	if len(openNew) != 9 || !strings.HasSuffix(openNew[5], "s") {
		t.Errorf("open-new: %q, want 9 cells with SINCE in seconds", openNew)
	} else if got, want := strings.Join(slices.Delete(openNew, 5, 6), " "), s.live.node.Name+" open-new 6d4cf56db6 Open Tripped 40 75% 2"; got != want {
		t.Errorf("open-new but SINCE: got %q, want %q", got, want)
	}
	if got := strings.Join(podRow(t, out, "refusing"), " "); !strings.HasSuffix(got, "refused: spec.window: must be between 1s and 1h") {
		t.Errorf("refusing: %q, want its refusal in CONFIG", got)
	}
	if got := strings.Join(podRow(t, out, "behind"), " "); !strings.HasSuffix(got, "1 (latest 2)") {
		t.Errorf("behind: %q, want 1 (latest 2) in CONFIG", got)
	}
	if own := strings.Join(podRow(t, out, "self-reporting"), " "); !strings.HasPrefix(own, "(own report) self-reporting - Closed Started") {
		t.Errorf("the pod reporting on its own: %q, want it marked (own report)", own)
	}
	if strings.Contains(out, "stranded") {
		t.Errorf("the hung agent's pod is listed:\n%s", out)
	}
	for _, want := range []string{
		"2 of 3 node agents did not answer",
		s.hung.node.Name + " " + s.hung.pod.Name + " did not answer within 2s",
		"pending-node fusebox-node-pending its pod is Pending",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}

	js, _, err := runPods(ctx, fetch, "-n", s.ns, "pods", "payments", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v BreakerPods
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatalf("-o json: %v\n%s", err, js)
	}
	if v.Kind != BreakerPodsKind || v.APIVersion != BreakerPodsAPIVersion || v.Generation != 2 || v.Agents != 3 || len(v.Pods) != len(s.order) || len(v.Unanswered) != 2 {
		t.Fatalf("-o json: %s", js)
	}
	first, own := v.Pods[0], v.Pods[4]
	if first.Pod != "open-new" || first.Via != ViaNodeAgent || first.Agent != s.live.pod.Name || first.Node != s.live.node.Name || first.UID == "" {
		t.Errorf("-o json: the first pod %+v, want open-new through %s", first, s.live.pod.Name)
	}
	if own.Pod != "self-reporting" || own.Via != ViaBreakerReport || own.UID == "" {
		t.Errorf("-o json: %+v, want self-reporting via its BreakerReport", own)
	}
	yml, _, err := runPods(ctx, fetch, "-n", s.ns, "pods", "payments", "-o", "yaml")
	if err != nil || !strings.HasPrefix(yml, "agents: 3\napiVersion: "+BreakerPodsAPIVersion+"\n") || !strings.Contains(yml, "kind: "+BreakerPodsKind+"\n") {
		t.Errorf("-o yaml (%v):\n%s", err, yml)
	}
	jp, _, err := runPods(ctx, fetch, "-n", s.ns, "pods", "payments", "-o", "jsonpath={.pods[0].pod} {.unanswered[*].reason}")
	if err != nil || !strings.HasPrefix(jp, "open-new ") || !strings.Contains(jp, "did not answer within 2s") {
		t.Errorf("-o jsonpath: %q (%v)", jp, err)
	}
	if _, _, err := runPods(ctx, fetch, "-n", s.ns, "pods", "payments", "-o", "name"); err == nil || !strings.Contains(err.Error(), "want json, yaml") {
		t.Errorf("-o name: %v, want an error naming the formats", err)
	}
	if _, _, err := runPods(ctx, fetch, "-n", s.ns, "pods", "nope"); err == nil || !strings.Contains(err.Error(), `circuitbreaker "nope" not found in namespace "`+s.ns+`"`) {
		t.Errorf("an unknown breaker: %v", err)
	}
}

// What a user lacks is named, with what to do: no agents where Fusebox should run, and
// each permission the Role fusebox-node-reader grants.
func TestPodsRefusalsSayWhatToDo(t *testing.T) {
	live := startAgent(t, "rbac")
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", nil)
	live.report(t, live.appPod(t, ns, "app-0", "7f9c8b5d4"), entry("payments", resiliencev1alpha1.StateOpen, "Manual"))
	ctx := context.Background()
	fetch := directFetcher(live)

	empty := newNamespace(t, "")
	_, _, err := runPods(ctx, fetch, "-n", ns, "pods", "payments", "--fusebox-namespace", empty)
	if err == nil || !strings.Contains(err.Error(), "no node agents in namespace "+empty+": is the chart's nodeAgent.enabled on?") {
		t.Errorf("no agents: %v", err)
	}
	// With pods reporting on their own, those are listed, and the missing agents said.
	report(t, ns, "self-reporting", entry("payments", resiliencev1alpha1.StateClosed, "Started"))
	out, errOut, err := runPods(ctx, fetch, "-n", ns, "pods", "payments", "--fusebox-namespace", empty)
	if err != nil || !strings.Contains(out, "self-reporting") || !strings.Contains(errOut, "warning: no node agents in namespace "+empty) {
		t.Errorf("no agents, a pod reporting on its own: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}

	// alice may read the breaker and its namespace, but not the agents.
	user := "alice-" + ns
	grant(t, ns, user, "reads-breakers", []rbacRule{
		{group: resiliencev1alpha1.GroupVersion.Group, resources: []string{"circuitbreakers"}, verbs: []string{"get"}},
		{group: resiliencev1alpha1.GroupVersion.Group, resources: []string{"breakerreports"}, verbs: []string{"list"}},
		{resources: []string{"pods"}, verbs: []string{"list"}},
	})
	as := []string{"--as", user, "-n", ns, "pods", "payments"}
	if _, _, err := runPods(ctx, fetch, as...); err == nil || !strings.Contains(err.Error(), "cannot list the node agents' pods in namespace "+fuseboxNamespace) ||
		!strings.Contains(err.Error(), "Role fusebox-node-reader") || !strings.Contains(err.Error(), "kubectl create rolebinding") {
		t.Errorf("without the Role: %v, want the Role named and how to bind it", err)
	}
	// Finding the agents is not all: the token is what reads them.
	grant(t, fuseboxNamespace, user, "lists-agents-"+ns, []rbacRule{{resources: []string{"pods"}, verbs: []string{"list"}}})
	if _, _, err := runPods(ctx, fetch, as...); err == nil || !strings.Contains(err.Error(), "cannot request a token of service account fusebox-node-reader") ||
		!strings.Contains(err.Error(), "Role fusebox-node-reader") {
		t.Errorf("without the token: %v, want the Role named", err)
	}
	// With the token but not pods/proxy, the API server refuses every agent's request
	// through pods/proxy (nil: the plugin's own fetcher, through the API server).
	grant(t, fuseboxNamespace, user, "token-"+ns, readerRules[:1])
	if _, _, err := runPods(ctx, nil, as...); err == nil || !strings.Contains(err.Error(), "refused the request through pods/proxy") ||
		!strings.Contains(err.Error(), "Role fusebox-node-reader") {
		t.Errorf("without pods/proxy: %v, want the Role named", err)
	}
	// The admin may use pods/proxy, but envtest has no pod network: the API server's own
	// answer names the agent that could not be reached, and the command ends.
	out, errOut, err = runPods(ctx, nil, "-n", ns, "pods", "payments")
	if err != nil || !strings.Contains(out, "1 of 1 node agents did not answer") ||
		!regexp.MustCompile(live.pod.Name+`\s+address not allowed`).MatchString(out) {
		t.Errorf("through pods/proxy in envtest: %v, want the API server's reason\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	// The Role's rules, as config/nodeagent grants them, are enough.
	grant(t, fuseboxNamespace, user, "reader-"+ns, readerRules)
	out, errOut, err = runPods(ctx, fetch, as...)
	if err != nil || podsListed(t, out)[0] != "app-0" {
		t.Errorf("with the Role: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
}

// rbacRule is a PolicyRule, shortly.
type rbacRule struct {
	group         string
	resources     []string
	resourceNames []string
	verbs         []string
}

// readerRules are the Role fusebox-node-reader's: a token of its service account, the
// agents' pods, and pods/proxy to reach them.
var readerRules = []rbacRule{
	{resources: []string{"serviceaccounts/token"}, resourceNames: []string{breakerconfig.NodeAgentReaderName}, verbs: []string{"create"}},
	{resources: []string{"pods"}, verbs: []string{"list"}},
	{resources: []string{"pods/proxy"}, verbs: []string{"get"}},
}

// grant binds user, in ns, to a Role of rules, and waits until the API server's
// authorizer, which works from a cache of its own, allows the first.
func grant(t *testing.T, ns, user, name string, rules []rbacRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, r := range rules {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{r.group}, Resources: r.resources, ResourceNames: r.resourceNames, Verbs: r.verbs})
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	first := rules[0]
	resource, sub, _ := strings.Cut(first.resources[0], "/")
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%s's Role %s/%s in force", user, ns, name), func() error {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Group: first.group, Resource: resource, Subresource: sub, Verb: first.verbs[0], Name: strings.Join(first.resourceNames, ""),
		}}}
		if err := k8sClient.Create(ctx, review); err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("not allowed yet: %s", review.Status.Reason)
		}
		return nil
	})
}
