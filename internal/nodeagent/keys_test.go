package nodeagent

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestPodTokensVerifiedAgainstTheIssuer: a pod's token is checked against the keys the
// API server publishes for its service-account issuer, once, and costs no TokenReview;
// the keys are read once. What the keys cannot vouch for still goes to the API server,
// which refuses it: a token the issuer's key signed with another issuer's name, one signed
// by a key of nobody's under the issuer's key ID. Made-up key IDs do not make the agent
// read the keys again within keysRefreshEvery.
func TestPodTokensVerifiedAgainstTheIssuer(t *testing.T) {
	t.Parallel()
	node := newNode(t)
	ns := newNamespace(t)
	agent := startAgent(t, node, agentOptions{})
	pod := newPod(t, ns, "checkout", node.Name)
	token := podToken(t, pod, breakerconfig.NodeAgentAudience)

	for range 5 {
		if status, body := putReport(t, agent, token, started); status != http.StatusOK {
			t.Fatalf("PUT as a pod of the node: %d %s", status, body)
		}
	}
	s := agent.Stats()
	if s.TokensVerified != 1 || s.TokenReviews != 0 {
		t.Errorf("five reports with one token: %d verified against the issuer's keys, %d TokenReviews; want 1 and 0", s.TokensVerified, s.TokenReviews)
	}
	if n := agent.writes.count("GET jwks"); n != 1 {
		t.Errorf("the issuer's keys read %d times, want once", n)
	}

	for _, tc := range []struct {
		name  string
		token string
	}{
		{"the issuer's key, another issuer's name", resign(t, token, func(c map[string]any) { c["iss"] = "https://elsewhere.example" }, true)},
		{"nobody's key under the issuer's key ID", resign(t, token, nil, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := agent.Stats()
			status, body := putReport(t, agent, tc.token, tripped)
			if status != http.StatusUnauthorized || !strings.Contains(string(body), "does not vouch for the token") {
				t.Errorf("PUT report: %d %s, want 401 from the API server's review", status, body)
			}
			after := agent.Stats()
			if after.TokensVerified != before.TokensVerified || after.TokenReviews != before.TokenReviews+1 {
				t.Errorf("verified %d → %d, reviews %d → %d; want none verified and one review", before.TokensVerified, after.TokensVerified, before.TokenReviews, after.TokenReviews)
			}
		})
	}

	// A reader's token is the API server's to vouch for, even once the keys have: sent to a
	// pod's endpoint first, it is verified (and refused, bound to no pod); listing the pods
	// with it then costs a review.
	reader := readerToken(t)
	if status, body := putReport(t, agent, reader, started); status != http.StatusForbidden || !strings.Contains(string(body), "bound to no pod") {
		t.Errorf("a reader's token on the pods' endpoint: %d %s, want 403", status, body)
	}
	before := agent.Stats()
	if status, body := call(t, http.MethodGet, agent.url+breakerconfig.AgentPodsPath+"?namespace="+ns, reader, nil); status != http.StatusOK {
		t.Errorf("listing the pods as the reader: %d %s", status, body)
	}
	if after := agent.Stats(); after.TokenReviews != before.TokenReviews+1 || after.TokensVerified != before.TokensVerified {
		t.Errorf("listing the pods with a token the keys had verified: reviews %d → %d, verified %d → %d; want one review", before.TokenReviews, after.TokenReviews, before.TokensVerified, after.TokensVerified)
	}

	fetches := agent.Stats().KeyFetches
	for i := range 20 {
		forged := resign(t, token, nil, false)
		parts := strings.SplitN(forged, ".", 2)
		header, err := json.Marshal(map[string]string{"alg": "ES256", "kid": fmt.Sprintf("made-up-%d", i)})
		must(t, err)
		forged = base64.RawURLEncoding.EncodeToString(header) + "." + parts[1]
		if status, _ := putReport(t, agent, forged, tripped); status != http.StatusUnauthorized {
			t.Fatalf("a token under a made-up key ID: %d, want 401", status)
		}
	}
	if n := agent.Stats().KeyFetches - fetches; n != 0 {
		t.Errorf("20 tokens under made-up key IDs within %s made the agent read the keys %d more times, want none", keysRefreshEvery, n)
	}
	eventually(t, "the pod's report in the node's object", func() error {
		if _, open := counted(t, ns, node.Name, "payments", ""); open != 0 {
			t.Fatalf("a refused token's report was recorded: %d open", open)
		}
		if pods, _ := counted(t, ns, node.Name, "payments", ""); pods != 1 {
			return fmt.Errorf("%d pods counted, want 1", pods)
		}
		return nil
	})
}

// TestIssuerKeysOfEveryKind: the algorithms the API server signs service-account tokens
// with, each against its kind of key in a key set as /openid/v1/jwks serves it: RS256 with
// an RSA key, ES256, ES384 and ES512 with ECDSA keys on P-256, P-384 and P-521. A token
// verifies only under its own key and algorithm, with the issuer's name, the audience, a
// future expiry and a subject that is the service account its claims name.
func TestIssuerKeysOfEveryKind(t *testing.T) {
	t.Parallel()
	const issuer = "https://issuer.example"
	now := time.Now()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, err)
	ec := map[string]*ecdsa.PrivateKey{}
	for alg, curve := range map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()} {
		k, err := ecdsa.GenerateKey(curve, rand.Reader)
		must(t, err)
		ec[alg] = k
	}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	jwks := []map[string]string{{"kty": "RSA", "use": "sig", "kid": "rsa", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())}}
	for alg, k := range ec {
		size := (k.Curve.Params().BitSize + 7) / 8
		x, y := make([]byte, size), make([]byte, size)
		k.X.FillBytes(x)
		k.Y.FillBytes(y)
		jwks = append(jwks, map[string]string{"kty": "EC", "use": "sig", "kid": alg, "crv": k.Curve.Params().Name, "x": b64(x), "y": b64(y)})
	}
	docs := map[string]any{discoveryPath: map[string]string{"issuer": issuer, "jwks_uri": issuer + jwksPath}, jwksPath: map[string]any{"keys": jwks}}
	keys := newIssuerKeys(func(_ context.Context, path string) ([]byte, error) {
		doc, ok := docs[path]
		if !ok {
			return nil, errors.New("404")
		}
		return json.Marshal(doc)
	})

	claims := func(modify func(map[string]any)) map[string]any {
		c := map[string]any{
			"iss": issuer, "sub": "system:serviceaccount:shop:app", "aud": []string{breakerconfig.NodeAgentAudience},
			"exp": now.Add(time.Hour).Unix(), "nbf": now.Add(-time.Minute).Unix(),
			"kubernetes.io": map[string]any{
				"namespace": "shop", "serviceaccount": map[string]string{"name": "app", "uid": "sa-uid"},
				"pod": map[string]string{"name": "checkout", "uid": "pod-uid"}, "node": map[string]string{"name": "node-a", "uid": "node-uid"},
			},
		}
		if modify != nil {
			modify(c)
		}
		return c
	}
	sign := func(alg, kid string, c map[string]any) string {
		header, err := json.Marshal(map[string]string{"alg": alg, "kid": kid})
		must(t, err)
		payload, err := json.Marshal(c)
		must(t, err)
		signed := b64(header) + "." + b64(payload)
		var sig []byte
		switch alg {
		case "RS256":
			sum := sha256Sum(signed)
			sig, err = rsa.SignPKCS1v15(rand.Reader, rsaKey, crypto.SHA256, sum)
			must(t, err)
		default:
			k := ec[alg]
			var sum []byte
			switch alg {
			case "ES256":
				sum = sha256Sum(signed)
			case "ES384":
				s := sha512.Sum384([]byte(signed))
				sum = s[:]
			case "ES512":
				s := sha512.Sum512([]byte(signed))
				sum = s[:]
			}
			r, s, err := ecdsa.Sign(rand.Reader, k, sum)
			must(t, err)
			size := (k.Curve.Params().BitSize + 7) / 8
			sig = make([]byte, 2*size)
			r.FillBytes(sig[:size])
			s.FillBytes(sig[size:])
		}
		return signed + "." + b64(sig)
	}

	for _, alg := range []string{"RS256", "ES256", "ES384", "ES512"} {
		kid := alg
		if alg == "RS256" {
			kid = "rsa"
		}
		id, ok := keys.verify(sign(alg, kid, claims(nil)), now)
		if want := (identity{username: "system:serviceaccount:shop:app", namespace: "shop", serviceAccount: "app", pod: "checkout", podUID: "pod-uid", node: "node-a"}); !ok || id != want {
			t.Errorf("%s: %+v, %v; want %+v", alg, id, ok, want)
		}
	}
	for _, tc := range []struct {
		name  string
		token string
	}{
		{"RS256 under an ECDSA key's ID", sign("RS256", "ES256", claims(nil))},
		{"ES384 under the P-256 key's ID", sign("ES384", "ES256", claims(nil))},
		{"another issuer", sign("ES256", "ES256", claims(func(c map[string]any) { c["iss"] = "https://elsewhere.example" }))},
		{"another audience", sign("ES256", "ES256", claims(func(c map[string]any) { c["aud"] = "https://kubernetes.default.svc" }))},
		{"expired", sign("ES256", "ES256", claims(func(c map[string]any) { c["exp"] = now.Add(-time.Second).Unix() }))},
		{"no expiry", sign("ES256", "ES256", claims(func(c map[string]any) { delete(c, "exp") }))},
		{"not valid for another hour", sign("ES256", "ES256", claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }))},
		{"a subject that is not its service account", sign("ES256", "ES256", claims(func(c map[string]any) { c["sub"] = "system:serviceaccount:shop:admin" }))},
		{"no service account", sign("ES256", "ES256", claims(func(c map[string]any) { delete(c["kubernetes.io"].(map[string]any), "serviceaccount") }))},
		{"a key of nobody's", func() string {
			tok := sign("ES256", "ES256", claims(nil))
			other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			must(t, err)
			saved := ec["ES256"]
			ec["ES256"] = other
			defer func() { ec["ES256"] = saved }()
			forged := sign("ES256", "ES256", claims(nil))
			return tok[:strings.LastIndex(tok, ".")] + forged[strings.LastIndex(forged, "."):]
		}()},
	} {
		if id, ok := keys.verify(tc.token, now); ok {
			t.Errorf("%s: verified as %+v, want not", tc.name, id)
		}
	}
	if n := keys.fetches.Load(); n != 1 {
		t.Errorf("the keys were read %d times, want once", n)
	}
}

// TestIssuerKeysUnavailable: an agent that cannot read the issuer's keys verifies nothing
// and tries again at most every keysRefreshEvery, so its pods' tokens all go to
// TokenReview as before.
func TestIssuerKeysUnavailable(t *testing.T) {
	t.Parallel()
	keys := newIssuerKeys(func(context.Context, string) ([]byte, error) { return nil, errors.New("forbidden") })
	now := time.Now()
	token := "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsifQ.e30.AAAA"
	for i := range 10 {
		if _, ok := keys.verify(token, now.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("verified without keys")
		}
	}
	if n := keys.fetches.Load(); n != 1 {
		t.Errorf("10 tokens in 10 s: %d tries to read the keys, want 1", n)
	}
	keys.verify(token, now.Add(keysRefreshEvery+time.Second))
	if n := keys.fetches.Load(); n != 2 {
		t.Errorf("after %s: %d tries, want 2", keysRefreshEvery, n)
	}
}

func sha256Sum(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}
