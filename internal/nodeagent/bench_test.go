package nodeagent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The agent's cost per request, and the three ways it could check a token, measured side
// by side in one run (docs/benchmarks.md, "Node agent"):
//
//	KUBEBUILDER_ASSETS="$(hack/envtest.sh)" go test -run '^$' -bench . -benchmem -count 5 ./internal/nodeagent

// benchAgent is one agent with one pod of its node, whose token it already knows.
func benchAgent(b *testing.B) (*runningAgent, string) {
	b.Helper()
	node := newNode(b)
	ns := newNamespace(b)
	a := startAgent(b, node, agentOptions{})
	pod := newPod(b, ns, "bench", node.Name)
	token := podToken(b, pod, breakerconfig.NodeAgentAudience)
	if status, body := putReport(b, a, token, started); status != http.StatusOK {
		b.Fatalf("%d %s", status, body)
	}
	return a, token
}

// BenchmarkReportPUT: one PUT /v1/report of a pod whose token the agent knows (the cached
// check, the pod looked up in the cache, the body read and checked, the line compared):
// over loopback HTTP with keep-alive as a pod sends it, and at the handler alone. The
// report is the same each time (a resend, which writes nothing) or changes each time
// (each change is written later, on the writer's pace: not on the request's path).
func BenchmarkReportPUT(b *testing.B) {
	a, token := benchAgent(b)
	one, _ := json.Marshal(breakerconfig.AgentReport{Breakers: []breakerconfig.ReportEntry{started}})
	other, _ := json.Marshal(breakerconfig.AgentReport{Breakers: []breakerconfig.ReportEntry{tripped}})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	overHTTP := func(b *testing.B, bodies ...[]byte) {
		for i := 0; b.Loop(); i++ {
			req, _ := http.NewRequest(http.MethodPut, a.url+breakerconfig.AgentReportPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	h := a.handler()
	atHandler := func(b *testing.B, bodies ...[]byte) {
		for i := 0; b.Loop(); i++ {
			req := httptest.NewRequest(http.MethodPut, breakerconfig.AgentReportPath, bytes.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.Run("http/resend", func(b *testing.B) { overHTTP(b, one) })
	b.Run("http/change", func(b *testing.B) { overHTTP(b, one, other) })
	b.Run("handler/resend", func(b *testing.B) { atHandler(b, one) })
	b.Run("handler/change", func(b *testing.B) { atHandler(b, one, other) })
}

// BenchmarkTokenCheck: what believing a pod's token costs the agent: the answer kept
// from an earlier TokenReview (what the agent does), a TokenReview round trip to the API
// server (envtest's, on loopback: a real cluster's is further away, and each one is API
// server work), and checking the token's signature locally against the issuer's keys
// (ES256 here, from /openid/v1/jwks), with its expiry and audience.
func BenchmarkTokenCheck(b *testing.B) {
	a, token := benchAgent(b)
	ctx := context.Background()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.auth.authenticate(ctx, "Bearer "+token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tokenreview", func(b *testing.B) {
		for b.Loop() {
			r, err := a.auth.client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
				Token: token, Audiences: []string{breakerconfig.NodeAgentAudience},
			}}, metav1.CreateOptions{})
			if err != nil || !r.Status.Authenticated {
				b.Fatalf("%v %+v", err, r)
			}
		}
	})
	b.Run("jwt-verify", func(b *testing.B) {
		keys := issuerKeys(b)
		for b.Loop() {
			if err := verifyLocally(token, keys, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// issuerKeys fetches the API server's service-account signing keys (P-256) from its
// OpenID discovery document's JWKS.
func issuerKeys(b *testing.B) []*ecdsa.PublicKey {
	b.Helper()
	raw, err := clientset.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(context.Background())
	must(b, err)
	var jwks struct {
		Keys []struct{ Kty, Crv, X, Y string } `json:"keys"`
	}
	must(b, json.Unmarshal(raw, &jwks))
	var keys []*ecdsa.PublicKey
	for _, k := range jwks.Keys {
		if k.Kty != "EC" || k.Crv != "P-256" {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		must(b, err)
		y, err := base64.RawURLEncoding.DecodeString(k.Y)
		must(b, err)
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		must(b, err)
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		b.Fatalf("no P-256 key in %s", raw)
	}
	return keys
}

// verifyLocally checks an ES256 token's signature against keys, and its expiry and
// audience, as an agent verifying tokens itself would.
func verifyLocally(token string, keys []*ecdsa.PublicKey, now time.Time) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return errors.New("bad signature encoding")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !slices.ContainsFunc(keys, func(k *ecdsa.PublicKey) bool { return ecdsa.Verify(k, sum[:], r, s) }) {
		return errors.New("signature does not verify")
	}
	c, err := readClaims(token)
	if err != nil {
		return err
	}
	if !now.Before(c.expires) || !slices.Contains(c.audiences, breakerconfig.NodeAgentAudience) {
		return fmt.Errorf("claims %+v", c)
	}
	return nil
}
