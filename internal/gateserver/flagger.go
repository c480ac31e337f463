package gateserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
)

// flaggerPayload is the body of a Flagger webhook call: the Canary's name and namespace,
// its phase, a checksum of its spec, and the webhook's metadata, all strings. Only the
// metadata is read; the rest is logged. Fields Flagger adds later are ignored.
type flaggerPayload struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Phase     string            `json:"phase"`
	Checksum  string            `json:"checksum,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
}

// The metadata keys a Flagger webhook of the gate sets (docs/rollouts.md, "Flagger").
const (
	// metaToken is the caller's bearer token: Flagger sends no headers.
	metaToken = "token"
	// metaRevision and metaBaseline name the revisions, as the query's revision and
	// baseline do (the query wins).
	metaRevision = "revision"
	metaBaseline = "baseline"
	// metaSelector selects the canary's pods when no revision is named: Flagger cannot
	// put the new revision's hash in a webhook it reads from the Canary's spec, but its
	// canary pods carry their Deployment's labels (app=podinfo) and the primary's carry
	// others (app=podinfo-primary).
	metaSelector = "selector"
)

// servePost answers a Flagger webhook: 200 with the judgement only when it is
// Successful, and 412 with it otherwise, which Flagger counts as a failed check (it has
// no inconclusive: an Inconclusive judgement halts the canary's advance as a failure
// does, and the analysis' threshold says how many it takes to roll back).
func (s *Server) servePost(w http.ResponseWriter, r *http.Request) {
	p, err := readPayload(w, r)
	if err != nil {
		code := http.StatusBadRequest
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		writeError(w, code, "%s", err.Error())
		return
	}
	u, ok := s.authenticated(w, r, p.Metadata[metaToken])
	if !ok {
		return
	}
	q := r.URL.Query()
	ask := question{revision: q.Get("revision"), baseline: q.Get("baseline"), selector: p.Metadata[metaSelector]}
	if ask.revision == "" {
		ask.revision = p.Metadata[metaRevision]
	}
	if ask.baseline == "" {
		ask.baseline = p.Metadata[metaBaseline]
	}
	if ask.revision == "" && ask.selector == "" {
		writeError(w, http.StatusBadRequest, "name the revision to judge: ?revision=R, or metadata.revision, or metadata.selector, a label selector of the canary's pods")
		return
	}
	j, code, err := s.judge(r.Context(), u, r.PathValue("namespace"), r.PathValue("name"), ask)
	if err != nil {
		writeError(w, code, "%s", err.Error())
		return
	}
	s.log.V(1).Info("Flagger webhook judged", "canary", p.Namespace+"/"+p.Name, "canaryPhase", p.Phase, "phase", j.Phase)
	if j.Phase != gate.PhaseSuccessful {
		writeJSON(w, http.StatusPreconditionFailed, j)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// readPayload reads and decodes a POST's body, at most maxBodySize bytes. An empty body
// is an empty payload: the question can be asked in the query alone.
func readPayload(w http.ResponseWriter, r *http.Request) (flaggerPayload, error) {
	var p flaggerPayload
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodySize))
	if err != nil {
		return p, fmt.Errorf("body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return p, fmt.Errorf("body: not a Flagger webhook payload (a JSON object with name, namespace, phase and metadata strings): %w", err)
	}
	return p, nil
}

// revisionOf is the revision most running pods of namespace that match selector carry;
// "" when none carries one.
func (s *Server) revisionOf(ctx context.Context, namespace, selector string) (string, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return "", fmt.Errorf("metadata.selector %q: %w", selector, err)
	}
	if sel.Empty() {
		return "", fmt.Errorf("metadata.selector %q selects every pod: select the canary's", selector)
	}
	var pods corev1.PodList
	if err := s.reader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "", fmt.Errorf("list the pods of metadata.selector %q: %w", selector, err)
	}
	count := map[string]int{}
	best := ""
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		rev := resiliencev1alpha1.RevisionOf(p.Labels)
		if rev == "" {
			continue
		}
		count[rev]++
		if best == "" || count[rev] > count[best] || (count[rev] == count[best] && rev < best) {
			best = rev
		}
	}
	return best, nil
}
