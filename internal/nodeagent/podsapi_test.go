package nodeagent

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestPodsEndpoint: GET /v1/pods lists the node's pods that report in a namespace, in name
// order, each with its revision (from the pod's labels) and whole report, for the readers
// of the agent's own namespace alone, whose token comes in Authorization or, through the
// API server's pods/proxy, in AgentTokenHeader. A pod's token gets 403, another service
// account's 403, no token 401, no namespace 400 naming the parameter; past
// MaxAgentPodsRequests at once, 503.
func TestPodsEndpoint(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns, other := newNamespace(t), newNamespace(t)
	agent := startAgent(t, node, agentOptions{})
	search := entry("search", breakerconfig.StateClosed, breakerconfig.ReasonStarted)
	var tokens []string
	for _, p := range []struct {
		ns, name string
		entries  []breakerconfig.ReportEntry
	}{
		{ns, "web-b", []breakerconfig.ReportEntry{tripped, search}},
		{ns, "web-a", []breakerconfig.ReportEntry{started}},
		{ns, "web-c", []breakerconfig.ReportEntry{search}},
		{other, "blog", []breakerconfig.ReportEntry{started}},
	} {
		pod := newPod(t, p.ns, p.name, node.Name, "pod-template-hash", "7d9f8c6b5")
		tok := podToken(t, pod, breakerconfig.NodeAgentAudience)
		tokens = append(tokens, tok)
		if status, body := putReport(t, agent, tok, p.entries...); status != http.StatusOK {
			t.Fatalf("%s: %d %s", p.name, status, body)
		}
	}

	all := podsOf(t, agent, ns, "")
	if names := podNames(all); !slices.Equal(names, []string{"web-a", "web-b", "web-c"}) {
		t.Errorf("the namespace's pods: %v, want web-a, web-b, web-c", names)
	}
	for _, p := range all {
		if p.Namespace != ns || p.Revision != "7d9f8c6b5" || p.UID == "" {
			t.Errorf("pod %+v, want namespace %s, revision 7d9f8c6b5 and its uid", p, ns)
		}
		if p.Name == "web-b" && (len(p.Breakers) != 2 || p.Breakers[0].State != breakerconfig.StateOpen || p.Breakers[1].Name != "search") {
			t.Errorf("web-b's report %+v, want the whole of it", p.Breakers)
		}
	}
	if names := podNames(podsOf(t, agent, ns, "payments")); !slices.Equal(names, []string{"web-a", "web-b"}) {
		t.Errorf("the pods reporting payments: %v, want web-a, web-b", names)
	}

	url := agent.url + breakerconfig.AgentPodsPath + "?namespace=" + ns
	// Through pods/proxy: the API server kept Authorization; the token is in the header.
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must(t, err)
	req.Header.Set(breakerconfig.AgentTokenHeader, readerToken(t))
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	var listed breakerconfig.AgentPods
	err = json.NewDecoder(resp.Body).Decode(&listed)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(listed.Pods) != 3 || listed.Node != node.Name || listed.Agent != agent.ID() {
		t.Errorf("with the token in %s: %s %+v %v", breakerconfig.AgentTokenHeader, resp.Status, listed, err)
	}

	for _, tc := range []struct {
		name, url, token string
		status           int
		says             string
	}{
		{"no token", url, "", http.StatusUnauthorized, "no bearer token"},
		{"a pod's token", url, tokens[0], http.StatusForbidden, "the pods endpoint is not for pods"},
		{"the agent's own service account", url, accountToken(t, agentNamespace, agentAccount), http.StatusForbidden, "may not list the pods"},
		{"a namespace's service account", url, accountToken(t, ns, "app"), http.StatusForbidden, "may not list the pods"},
		{"no namespace", agent.url + breakerconfig.AgentPodsPath, readerToken(t), http.StatusBadRequest, `namespace\" is required`},
	} {
		if status, body := call(t, http.MethodGet, tc.url, tc.token, nil); status != tc.status || !strings.Contains(string(body), tc.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tc.name, status, body, tc.status, tc.says)
		}
	}

	// Every place taken: the next listing waits for none.
	for range breakerconfig.MaxAgentPodsRequests {
		agent.readers <- struct{}{}
	}
	status, body := call(t, http.MethodGet, url, readerToken(t), nil)
	for range breakerconfig.MaxAgentPodsRequests {
		<-agent.readers
	}
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "pod listings at once") {
		t.Errorf("past %d listings at once: %d %s, want 503", breakerconfig.MaxAgentPodsRequests, status, body)
	}
}

// readerToken is a token of the reader service account of the agent's namespace, for the
// agent's audience: what `kubectl fusebox pods` requests (breakerconfig.NodeAgentReaderName).
func readerToken(t testing.TB) string {
	t.Helper()
	return accountToken(t, agentNamespace, breakerconfig.NodeAgentReaderName)
}

// accountToken is a token of service account ns/name for the agent's audience, bound to
// no pod.
func accountToken(t testing.TB, ns, name string) string {
	t.Helper()
	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{breakerconfig.NodeAgentAudience}, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// podsOf returns the pods the agent holds a line of in ns (reporting breaker, unless ""),
// as GET /v1/pods answers a reader.
func podsOf(t testing.TB, a *runningAgent, ns, breaker string) []breakerconfig.AgentPod {
	t.Helper()
	url := a.url + breakerconfig.AgentPodsPath + "?" + breakerconfig.AgentPodsNamespace + "=" + ns
	if breaker != "" {
		url += "&" + breakerconfig.AgentPodsBreaker + "=" + breaker
	}
	status, body := call(t, http.MethodGet, url, readerToken(t), nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	var out breakerconfig.AgentPods
	must(t, json.Unmarshal(body, &out))
	return out.Pods
}

// podState returns the state and reason of breaker on pod's own line, as the agent holds
// it ("" if it holds none).
func podState(t testing.TB, a *runningAgent, ns, pod, breaker string) (string, string) {
	t.Helper()
	for _, p := range podsOf(t, a, ns, breaker) {
		if p.Name != pod {
			continue
		}
		for _, e := range p.Breakers {
			if e.Name == breaker {
				return e.State, e.Reason
			}
		}
	}
	return "", ""
}
