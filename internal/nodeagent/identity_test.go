package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestIdentity: the agent of node A believes only the projected token of a pod bound to
// node A. No token, garbage, another audience's token or an expired one get 401; the
// valid token of a pod on node B, of a token bound to no pod, or of a pod that has
// finished get 403; each says why, on both paths, and nothing is recorded. The pod of A
// with its own token is heard, and its token is checked once however often it is used.
func TestIdentity(t *testing.T) {
	t.Parallel()
	nodeA, nodeB := newNode(t), newNode(t)
	ns := newNamespace(t)
	podA := newPod(t, ns, "checkout-a", nodeA.Name)
	podB := newPod(t, ns, "checkout-b", nodeB.Name)
	done := newPod(t, ns, "batch-done", nodeA.Name)
	done.Status.Phase = corev1.PodSucceeded
	must(t, k8sClient.Status().Update(context.Background(), done))
	agent := startAgent(t, nodeA, agentOptions{})

	tokenA := podToken(t, podA, breakerconfig.NodeAgentAudience)
	unbound, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "app", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{breakerconfig.NodeAgentAudience}, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	must(t, err)

	for _, tc := range []struct {
		name   string
		token  string
		status int
		says   string
	}{
		{"no token", "", http.StatusUnauthorized, "no bearer token"},
		{"garbage", "garbage", http.StatusUnauthorized, "not a JWT"},
		{"a token for the API server", podToken(t, podA, "https://kubernetes.default.svc"), http.StatusUnauthorized, "not for audience fusebox.dev/node-agent"},
		{"a token signed by someone else", resign(t, tokenA, nil, false), http.StatusUnauthorized, "does not vouch for the token"},
		{"an expired token", resign(t, tokenA, func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
		}, true), http.StatusUnauthorized, "the token expired"},
		{"a pod's token from another node", podToken(t, podB, breakerconfig.NodeAgentAudience), http.StatusForbidden, "on node " + nodeB.Name + ": this agent serves node " + nodeA.Name + " only"},
		{"a token bound to no pod", unbound.Status.Token, http.StatusForbidden, "bound to no pod"},
		{"a pod that has finished", podToken(t, done, breakerconfig.NodeAgentAudience), http.StatusForbidden, "has finished (phase Succeeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := putReport(t, agent, tc.token, tripped)
			if status != tc.status || !strings.Contains(string(body), tc.says) {
				t.Errorf("PUT report: %d %s, want %d saying %q", status, body, tc.status, tc.says)
			}
			var e breakerconfig.AgentError
			if json.Unmarshal(body, &e) != nil || e.Error == "" {
				t.Errorf("the refusal is not an AgentError: %s", body)
			}
			status, body = call(t, http.MethodGet, agent.url+breakerconfig.AgentConfigPath+"?watch=true", tc.token, nil)
			if status != tc.status || !strings.Contains(string(body), tc.says) {
				t.Errorf("GET config: %d %s, want %d saying %q", status, body, tc.status, tc.says)
			}
		})
	}
	if r := nodeReport(t, ns, nodeA.Name); r != nil {
		t.Errorf("refused requests recorded: %+v", r.Breakers)
	}
	if s := agent.Stats(); s.ConfigWatchesStarted != 0 {
		t.Errorf("refused streams started %d ConfigMap watches", s.ConfigWatchesStarted)
	}

	// The pod of node A is heard; its report lands in the node's object, owned by node A.
	checks := func() int64 { s := agent.Stats(); return s.TokenReviews + s.TokensVerified }
	before := checks()
	for range 5 {
		if status, body := putReport(t, agent, tokenA, tripped); status != http.StatusOK {
			t.Fatalf("PUT as a pod of the node: %d %s", status, body)
		}
	}
	if n := checks() - before; n != 1 {
		t.Errorf("five reports with one token were checked %d times (against the issuer's keys or by TokenReview), want once", n)
	}
	eventually(t, "the pod's report in the node's object", func() error {
		r := nodeReport(t, ns, nodeA.Name)
		e := entryOf(r, "payments", "")
		if e == nil || e.Pods != 1 || e.EarnedOpen != 1 || len(e.Notable) != 1 {
			return fmt.Errorf("report %+v", r)
		}
		if r.NodeName != nodeA.Name || len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != nodeA.UID || r.OwnerReferences[0].Kind != "Node" {
			return fmt.Errorf("object of node %s owned by %+v, want node %s (%s)", r.NodeName, r.OwnerReferences, nodeA.Name, nodeA.UID)
		}
		if n := e.Notable[0]; n.Name != podA.Name || n.UID != podA.UID || n.State != resiliencev1alpha1.StateOpen {
			return fmt.Errorf("the entry names %s (uid %s, %s), want the pod's own name and uid %s, open", n.Name, n.UID, n.State, podA.UID)
		}
		return nil
	})
}

// resign returns token with its claims changed by modify, signed again: with the API
// server's own service-account key when issuer is true (a token the issuer could have
// minted), else with a key of nobody's.
func resign(t *testing.T, token string, modify func(map[string]any), issuer bool) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	must(t, err)
	var claims map[string]any
	must(t, json.Unmarshal(raw, &claims))
	if modify != nil {
		modify(claims)
	}
	payload, err := json.Marshal(claims)
	must(t, err)
	var key *ecdsa.PrivateKey
	if issuer {
		pemKey, err := os.ReadFile(filepath.Join(certDir, "sa-signer.key"))
		must(t, err)
		block, _ := pem.Decode(pemKey)
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		must(t, err)
		key = k.(*ecdsa.PrivateKey)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(t, err)
	}
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	sum := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	must(t, err)
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestLiveLookup: a pod the agent's cache has not seen (its watch event still on its way)
// is read from the API server before it is refused: bound here, it is heard; bound
// elsewhere or gone, refused.
func TestLiveLookup(t *testing.T) {
	t.Parallel()
	nodeA, nodeB := newNode(t), newNode(t)
	ns := newNamespace(t)
	here := newPod(t, ns, "here", nodeA.Name)
	there := newPod(t, ns, "there", nodeB.Name)
	// An index whose informer never runs: every lookup misses the cache.
	idx := newPodIndex(clientset, nodeA.Name, clock.RealClock{}, func(string, types.UID) {}, func(string, types.UID) {})
	ctx := context.Background()
	if err := idx.bound(ctx, identity{namespace: ns, pod: here.Name, podUID: here.UID, node: nodeA.Name}); err != nil {
		t.Errorf("a pod bound here, not yet cached: %v", err)
	}
	for name, id := range map[string]identity{
		"bound to another node": {namespace: ns, pod: there.Name, podUID: there.UID},
		"no such pod":           {namespace: ns, pod: "gone", podUID: "gone-uid"},
		"its name, another uid": {namespace: ns, pod: here.Name, podUID: "old-uid"},
	} {
		var r *refusal
		if err := idx.bound(ctx, id); !errors.As(err, &r) || r.status != http.StatusForbidden {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}
	if n := idx.liveLookups.Load(); n != 4 {
		t.Errorf("%d live lookups, want 4", n)
	}
}

// TestDeletedPodCostsOneReadAMinute: the token of a deleted pod stays valid to the agent
// until it expires (the answer of its first check is kept), so its pod check is what refuses
// it. A pod the cache does not have is read from the API server, and one found missing is
// refused from memory for a minute: however often the token is sent, it costs at most one
// GET a minute. The agent's own clock, a fake one, makes the minute pass.
func TestDeletedPodCostsOneReadAMinute(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	clk := testingclock.NewFakeClock(time.Now())
	agent := startAgent(t, node, agentOptions{clock: clk})
	pod := newPod(t, ns, "checkout", node.Name)
	token := podToken(t, pod, breakerconfig.NodeAgentAudience)
	if status, body := putReport(t, agent, token, started); status != http.StatusOK {
		t.Fatalf("the pod, before it is deleted: %d %s", status, body)
	}
	must(t, k8sClient.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))
	eventually(t, "the deleted pod refused", func() error {
		if status, body := putReport(t, agent, token, started); status != http.StatusForbidden || !strings.Contains(string(body), "there is no such pod") {
			return fmt.Errorf("%d %s", status, body)
		}
		return nil
	})
	reads := func() int { return agent.writes.count("GET pods " + ns) }
	for minute := range 3 {
		before := reads()
		for range 50 {
			if status, body := putReport(t, agent, token, tripped); status != http.StatusForbidden {
				t.Fatalf("minute %d: %d %s, want 403", minute, status, body)
			}
		}
		if n := reads() - before; n > 1 {
			t.Errorf("minute %d: 50 reports of a deleted pod cost %d reads of it, want at most 1", minute, n)
		}
		clk.Step(missingFor)
	}
	// The first refusal's read, then one in each of the next two minutes; and one before,
	// if the pod's first report came before the cache had it.
	if n := reads(); n < 3 || n > 4 {
		t.Errorf("a deleted pod's token sent over three minutes cost %d reads of it, want one a minute (3, or 4 with a read of the pod alive)", n)
	}
	if s := agent.Stats(); s.TokenReviews+s.TokensVerified != 1 {
		t.Errorf("one token checked %d times (%d against the issuer's keys, %d by TokenReview), want once: the answer is kept", s.TokenReviews+s.TokensVerified, s.TokensVerified, s.TokenReviews)
	}
}
