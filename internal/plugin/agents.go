package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The node agents keep their pods' lines on their nodes and serve them on demand
// (docs/design.md §9): the plugin finds the agents' pods, asks the API server for a
// short-lived token of service account fusebox-node-reader, and asks every agent at once
// through the API server's pods/proxy, each for at most agentTimeout. An agent that does
// not answer in time, or answers a refusal, is named with the reason; the others' pods
// are listed all the same.
const (
	// agentTimeout bounds one agent's answer: an agent on a node that is going away must
	// not hold up the listing of every other node.
	agentTimeout = 2 * time.Second
	// agentsInFlight bounds the agents asked at once, so a cluster of a thousand nodes
	// sends the API server's proxy a few dozen requests at a time, not a thousand.
	// An agent's agentTimeout starts when it is asked, not while it waits its turn.
	agentsInFlight = 32
	// readerTokenSeconds is the life of the token the plugin requests: long enough for
	// a dashboard to reuse it, short enough to be worth nothing soon after.
	readerTokenSeconds = 600
	// DefaultFuseboxNamespace is where the chart and config/default install the
	// operator and the node agents.
	DefaultFuseboxNamespace = "fusebox-system"
)

// agentLabels select the node agents' pods, as the DaemonSet labels them.
var agentLabels = client.MatchingLabels{
	resiliencev1alpha1.LabelAppName:      resiliencev1alpha1.AppName,
	resiliencev1alpha1.LabelAppComponent: resiliencev1alpha1.ComponentNodeAgent,
}

// agentFetcher asks one node agent, the pod agent, for GET breakerconfig.AgentPodsPath
// with query, presenting token, and returns the status and body of the agent's answer.
// err is for an answer that never came from the agent: it could not be reached, or the
// API server on the way refused the request itself (an *apierrors.StatusError). It must
// return once ctx ends.
type agentFetcher func(ctx context.Context, agent *corev1.Pod, query url.Values, token string) (status int, body []byte, err error)

// proxyFetcher reaches each agent through the API server's pods/proxy subresource, as
// `kubectl get --raw /api/v1/namespaces/NS/pods/NAME:PORT/proxy/...` does. The API
// server keeps the Authorization header for the user's own credentials, so the reader's
// token travels in breakerconfig.AgentTokenHeader, which the proxy passes on.
func proxyFetcher(cs kubernetes.Interface) agentFetcher {
	return func(ctx context.Context, agent *corev1.Pod, query url.Values, token string) (int, []byte, error) {
		req := cs.CoreV1().RESTClient().Get().
			Namespace(agent.Namespace).Resource("pods").
			Name(utilnet.JoinSchemeNamePort("http", agent.Name, strconv.Itoa(breakerconfig.NodeAgentPort))).
			SubResource("proxy").Suffix(breakerconfig.AgentPodsPath).
			SetHeader(breakerconfig.AgentTokenHeader, token)
		for k, vs := range query {
			for _, v := range vs {
				req = req.Param(k, v)
			}
		}
		res := req.Do(ctx)
		var status int
		res.StatusCode(&status)
		body, err := res.Raw()
		if err != nil && !isAgentRefusal(body) {
			// The API server's own answer (forbidden, no such pod, the pod not
			// reachable), or no answer at all. client-go leaves a Status it reads
			// from a proxy's answer undecoded ("unknown reason"): its message is
			// what to show.
			var st metav1.Status
			if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
				return status, nil, &apierrors.StatusError{ErrStatus: st}
			}
			return status, nil, err
		}
		return status, body, nil
	}
}

// isAgentRefusal says whether body is an agent's refusal (breakerconfig.AgentError)
// rather than the API server's Status.
func isAgentRefusal(body []byte) bool {
	var e breakerconfig.AgentError
	return json.Unmarshal(body, &e) == nil && e.Error != ""
}

// agentAnswer is what one node agent said, or why it said nothing.
type agentAnswer struct {
	agent *corev1.Pod
	pods  *breakerconfig.AgentPods
	// err says why there is no answer; nil with pods set.
	err error
}

// askAgents asks every agent concurrently, agentsInFlight at a time, each for at most
// agentTimeout; it returns an answer per agent, in the agents' order.
func askAgents(ctx context.Context, fetch agentFetcher, agents []corev1.Pod, query url.Values, token string) []agentAnswer {
	answers := make([]agentAnswer, len(agents))
	slots := make(chan struct{}, agentsInFlight)
	var wg sync.WaitGroup
	for i := range agents {
		answers[i].agent = &agents[i]
		if why := notServing(&agents[i]); why != "" {
			answers[i].err = errors.New(why)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				answers[i].err = ctx.Err()
				return
			}
			defer func() { <-slots }()
			answers[i].pods, answers[i].err = askAgent(ctx, fetch, &agents[i], query, token)
		}()
	}
	wg.Wait()
	return answers
}

// notServing says why an agent's pod cannot answer, or "" when it may.
func notServing(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "its pod is being deleted"
	case p.Status.Phase != corev1.PodRunning:
		phase := string(p.Status.Phase)
		if phase == "" {
			phase = "not yet running"
		}
		return "its pod is " + phase
	}
	return ""
}

// askAgent asks one agent, for at most agentTimeout. It returns when the time is up
// whether or not fetch does.
func askAgent(ctx context.Context, fetch agentFetcher, agent *corev1.Pod, query url.Values, token string) (*breakerconfig.AgentPods, error) {
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	type result struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		status, body, err := fetch(ctx, agent, query, token)
		done <- result{status, body, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("did not answer within %s", agentTimeout)
	}
	if r.err == nil && ctx.Err() != nil {
		r.err = ctx.Err()
	}
	switch {
	case r.err != nil:
		if apierrors.IsForbidden(r.err) {
			return nil, fmt.Errorf("the API server refused the request through pods/proxy: %w (%s)", r.err, readerRoleHint(agent.Namespace))
		}
		return nil, r.err
	case r.status != http.StatusOK:
		var refusal breakerconfig.AgentError
		if json.Unmarshal(r.body, &refusal) != nil || refusal.Error == "" {
			return nil, fmt.Errorf("answered %d %s", r.status, http.StatusText(r.status))
		}
		return nil, fmt.Errorf("answered %d %s: %s", r.status, http.StatusText(r.status), refusal.Error)
	}
	var pods breakerconfig.AgentPods
	if err := json.Unmarshal(r.body, &pods); err != nil {
		return nil, fmt.Errorf("answered something other than its pods: %v", err)
	}
	return &pods, nil
}

// findAgents lists the node agents' pods in namespace ns.
func findAgents(ctx context.Context, c client.Client, ns string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(ns), agentLabels); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("cannot list the node agents' pods in namespace %s: %w (%s)", ns, err, readerRoleHint(ns))
		}
		return nil, fmt.Errorf("listing the node agents' pods in namespace %s: %w", ns, err)
	}
	return list.Items, nil
}

// readerToken requests a token of service account fusebox-node-reader in ns for the
// agents' audience, good for readerTokenSeconds; it returns the token and when to stop
// using it.
func readerToken(ctx context.Context, cs kubernetes.Interface, ns string) (string, time.Time, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{breakerconfig.NodeAgentAudience},
		ExpirationSeconds: ptr.To[int64](readerTokenSeconds),
	}}
	got, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, breakerconfig.NodeAgentReaderName, req, metav1.CreateOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return "", time.Time{}, fmt.Errorf("cannot request a token of service account %s in namespace %s: %w (%s)", breakerconfig.NodeAgentReaderName, ns, err, readerRoleHint(ns))
	case apierrors.IsNotFound(err):
		return "", time.Time{}, fmt.Errorf("no service account %s in namespace %s: the node agent's RBAC is not installed there (the chart's nodeAgent.enabled, or config/nodeagent)", breakerconfig.NodeAgentReaderName, ns)
	case err != nil:
		return "", time.Time{}, fmt.Errorf("requesting a token of service account %s in namespace %s: %w", breakerconfig.NodeAgentReaderName, ns, err)
	}
	return got.Status.Token, got.Status.ExpirationTimestamp.Time, nil
}

// readerRoleHint says what a user refused by RBAC needs, and how an admin grants it.
func readerRoleHint(ns string) string {
	return fmt.Sprintf("reading the node agents' pods needs the Role %[1]s in namespace %[2]s bound to you: "+
		"kubectl create rolebinding %[1]s-<you> -n %[2]s --role %[1]s --user <you>", breakerconfig.NodeAgentReaderName, ns)
}

// noAgentsHint is the error, or the warning, when namespace ns has no node agent.
func noAgentsHint(ns string) string {
	return fmt.Sprintf("no node agents in namespace %s: is the chart's nodeAgent.enabled on? (or name the namespace Fusebox runs in with --fusebox-namespace)", ns)
}
