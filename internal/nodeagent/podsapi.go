package nodeagent

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// servePods answers GET /v1/pods?namespace=NS[&breaker=NAME]: the node's pods that report
// in NS (those reporting NAME, with breaker), in namespace and name order, each with its
// revision and its whole report, as the agent holds them. A node report carries what its
// pods add up to; their own lines stay here and are read on demand (docs/design.md §9). It
// serves the readers of the agent's own namespace (breakerconfig.NodeAgentReaders) alone,
// at most breakerconfig.MaxAgentPodsRequests at once.
func (a *Agent) servePods(w http.ResponseWriter, r *http.Request) {
	select {
	case a.readers <- struct{}{}:
		defer func() { <-a.readers }()
	default:
		w.Header().Set("Retry-After", "1")
		a.refuse(w, refuse(http.StatusServiceUnavailable, "the node agent serves %d pod listings at once: ask again shortly", breakerconfig.MaxAgentPodsRequests))
		return
	}
	if !a.identifyReader(w, r) {
		return
	}
	q := r.URL.Query()
	ns := q.Get(breakerconfig.AgentPodsNamespace)
	if ns == "" {
		a.refuse(w, refuse(http.StatusBadRequest, "the query parameter %q is required: the namespace whose pods to list", breakerconfig.AgentPodsNamespace))
		return
	}
	writeJSON(w, http.StatusOK, breakerconfig.AgentPods{
		Node: a.node, Agent: a.id, Pods: a.book.podsIn(ns, q.Get(breakerconfig.AgentPodsBreaker)),
	})
}

// identifyReader accepts a request from a reader of the pods endpoint, or answers the
// refusal and returns false: 503 before the agent is ready, 401 without a token the API
// server vouches for, 403 for a pod's token or any service account but the readers of the
// agent's namespace. The token is the Authorization header's or, without one,
// AgentTokenHeader's: the API server's pods/proxy, through which readers reach the agent,
// keeps Authorization for the caller's own authentication and does not pass it on.
func (a *Agent) identifyReader(w http.ResponseWriter, r *http.Request) bool {
	if !a.Ready() {
		w.Header().Set("Retry-After", "1")
		a.refuse(w, refuse(http.StatusServiceUnavailable, "the agent of node %s is starting: ask again shortly", a.node))
		return false
	}
	header := r.Header.Get("Authorization")
	if header == "" {
		if t := strings.TrimSpace(r.Header.Get(breakerconfig.AgentTokenHeader)); t != "" {
			header = "Bearer " + strings.TrimPrefix(t, "Bearer ")
		}
	}
	id, err := a.auth.authenticate(r.Context(), header, false)
	if err != nil {
		a.refuse(w, err)
		return false
	}
	switch {
	case id.pod != "":
		a.refuse(w, refuse(http.StatusForbidden, "the pods endpoint is not for pods: the token is pod %s's", id))
		return false
	case !a.isReader(id):
		a.refuse(w, refuse(http.StatusForbidden, "%s may not list the pods of node %s: only the service accounts %s of namespace %s may", id.username, a.node, strings.Join(breakerconfig.NodeAgentReaders, ", "), a.namespace))
		return false
	}
	return true
}

// isReader reports whether id is one of the readers of the agent's own namespace.
func (a *Agent) isReader(id identity) bool {
	if a.namespace == "" || id.namespace != a.namespace {
		return false
	}
	return slices.ContainsFunc(breakerconfig.NodeAgentReaders, func(name string) bool {
		return id.username == serviceAccountPrefix+a.namespace+":"+name
	})
}

// podsIn returns the lines of the node's pods that report in ns (those reporting breaker,
// unless it is ""), in name order. The entries are shared, not copied: a line's entries
// are never changed once put, only replaced.
func (b *book) podsIn(ns, breaker string) []breakerconfig.AgentPod {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []breakerconfig.AgentPod{}
	r := b.reports[ns]
	if r == nil {
		return out
	}
	for uid, l := range r.lines {
		if len(l.entries) == 0 || breaker != "" && !slices.ContainsFunc(l.entries, func(e breakerconfig.ReportEntry) bool { return e.Name == breaker }) {
			continue
		}
		out = append(out, breakerconfig.AgentPod{Namespace: ns, Name: l.pod, UID: string(uid), Revision: l.revision, Breakers: l.entries})
	}
	slices.SortFunc(out, func(x, y breakerconfig.AgentPod) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name), cmp.Compare(x.UID, y.UID))
	})
	return out
}
