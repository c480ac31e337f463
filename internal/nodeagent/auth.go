package nodeagent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/utils/clock"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// identity is who a request comes from, as the API server vouched for its token: a
// service account, and, for a token bound to a pod, the pod and its node. Each endpoint
// decides whom it serves: the pods' endpoints a pod bound to the agent's node
// (Agent.identify), the pods endpoint the readers of the agent's own namespace
// (Agent.identifyReader).
type identity struct {
	username                  string // system:serviceaccount:<namespace>:<serviceAccount>
	namespace, serviceAccount string
	pod                       string // "" for a token bound to no pod
	podUID                    types.UID
	node                      string
}

func (id identity) String() string {
	if id.pod == "" {
		return id.username
	}
	return id.namespace + "/" + id.pod
}

// asPod returns a refusal (403) unless id is a pod's, on a node: what the pods' endpoints
// serve.
func (id identity) asPod() *refusal {
	switch {
	case id.pod == "" || id.podUID == "":
		return refuse(http.StatusForbidden, "the token of %s is bound to no pod (no %s and %s): use the pod's projected token, not a Secret's", id.username, extraPodName, extraPodUID)
	case id.node == "":
		return refuse(http.StatusForbidden, "the token of pod %s names no node (no %s): the agent serves the pods of its node only", id, extraNodeName)
	}
	return nil
}

// refusal is a request the agent does not accept, with the status it answers.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func refuse(status int, format string, args ...any) *refusal {
	return &refusal{status: status, msg: fmt.Sprintf(format, args...)}
}

// Bounds of what the authenticator keeps. A node runs at most a few hundred pods, each
// with one token at a time (two while the kubelet rotates it), so maxKnownTokens is room
// to spare; refused tokens are kept briefly, so that a pod retrying with a bad token costs
// the API server one review every refusedFor, not one per request.
const (
	maxKnownTokens   = 2048
	maxRefusedTokens = 512
	refusedFor       = 10 * time.Second
	// unexpiringFor is how long a token without an expiry is believed: a legacy
	// Secret-based token, which the agent refuses anyway (it names no pod).
	unexpiringFor = time.Minute
	// concurrentReviews bounds the TokenReviews in flight, so that a flood of unknown
	// tokens from the network costs the API server a few requests at a time.
	concurrentReviews = 4
	// maxPendingReviews bounds the tokens waiting for a review; past it a new token is
	// answered 503 at once, so that a flood of them holds no more than this.
	maxPendingReviews = 512
	// reviewTimeout bounds one TokenReview, waiting for its turn included. It is not
	// the request's: a review outlives the request that asked for it, so that a pod
	// whose request gave up on a slow API server finds the answer kept when it asks
	// again, instead of starting another review that would give up as well.
	reviewTimeout = 60 * time.Second
)

// authenticator checks tokens and keeps the answers: a pod's token is verified against
// its issuer's keys when it can be (issuerKeys), else the API server is asked
// (TokenReview); either way it is believed until it expires, without checking again.
// That is safe for a pod's token because what could revoke it early (its pod deleted) is
// checked on every request anyway: the pod must be bound to the node in the agent's pod
// cache. The readers' tokens, which no pod check follows, are always reviewed.
type authenticator struct {
	client authnclient.TokenReviewInterface
	keys   *issuerKeys // nil: every token is reviewed
	clock  clock.PassiveClock
	sem    chan struct{}

	mu      sync.Mutex
	known   map[string]knownToken // guarded by mu: by token
	refused map[string]refusedToken
	pending map[string]*review // the reviews under way, by token: one per token

	reviews atomic.Int64
}

// review is one TokenReview under way; done is closed once id and err are set.
type review struct {
	done chan struct{}
	id   identity
	err  error
}

type knownToken struct {
	id      identity
	refusal *refusal // the identity is no pod's: refused with this, however often asked
	until   time.Time
	// verified: checked against the issuer's keys, not by the API server; believed
	// only where a pod check follows (authenticate's pod).
	verified bool
}

type refusedToken struct {
	refusal *refusal
	until   time.Time
}

func newAuthenticator(client authnclient.TokenReviewInterface, keys *issuerKeys, clk clock.PassiveClock) *authenticator {
	return &authenticator{
		client: client, keys: keys, clock: clk, sem: make(chan struct{}, concurrentReviews),
		known: map[string]knownToken{}, refused: map[string]refusedToken{}, pending: map[string]*review{},
	}
}

// authenticate returns the identity of the request's bearer token, or a refusal: 401 for
// no token or one the API server does not vouch for (garbage, expired, another audience),
// 403 for a valid token that names no pod, 503 when the API server cannot be asked. With
// pod set, the caller checks the pod the identity names in its pod cache, so the token
// may be verified against its issuer's keys; without, only the API server's word counts.
func (a *authenticator) authenticate(ctx context.Context, header string, pod bool) (identity, error) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return identity{}, refuse(http.StatusUnauthorized, "no bearer token: send the pod's projected service-account token for audience %s as \"Authorization: Bearer <token>\"", breakerconfig.NodeAgentAudience)
	}
	now := a.clock.Now()
	a.mu.Lock()
	id, kept, err := a.kept(token, now, pod)
	a.mu.Unlock()
	if kept {
		return id, err
	}

	// Refused on sight, without asking the API server, whatever the signature would say:
	// what is not a JWT, what says it has expired, and what is not for this audience.
	claims, err := readClaims(token)
	if err != nil {
		return identity{}, refuse(http.StatusUnauthorized, "invalid token: %v", err)
	}
	if !claims.expires.IsZero() && !now.Before(claims.expires) {
		return identity{}, refuse(http.StatusUnauthorized, "the token expired at %s: the kubelet rotates projected tokens; read the token file again", claims.expires.UTC().Format(time.RFC3339))
	}
	if !slices.Contains(claims.audiences, breakerconfig.NodeAgentAudience) {
		return identity{}, refuse(http.StatusUnauthorized, "the token is not for audience %s (it is for %q): project a service-account token with that audience", breakerconfig.NodeAgentAudience, claims.audiences)
	}

	// A pod's token signed by its issuer is believed without asking anyone.
	if pod && a.keys != nil {
		if id, ok := a.keys.verify(token, now); ok {
			a.mu.Lock()
			keep(a.known, maxKnownTokens, now, token, knownToken{id: id, until: claims.expires, verified: true}, func(k knownToken) time.Time { return k.until })
			a.mu.Unlock()
			return id, nil
		}
	}

	// Every request with this token waits for the one review of it. A review that ended
	// since the first look has kept its answer: looked for again, so that a request that
	// came as it ended begins no second review.
	a.mu.Lock()
	if id, kept, err := a.kept(token, now, pod); kept {
		a.mu.Unlock()
		return id, err
	}
	rv, ok := a.pending[token]
	if !ok {
		if len(a.pending) >= maxPendingReviews {
			a.mu.Unlock()
			return identity{}, refuse(http.StatusServiceUnavailable, "too many tokens are waiting to be checked with the API server: ask again shortly")
		}
		rv = &review{done: make(chan struct{})}
		a.pending[token] = rv
		go a.review(token, claims, rv)
	}
	a.mu.Unlock()
	select {
	case <-rv.done:
		return rv.id, rv.err
	case <-ctx.Done():
		return identity{}, refuse(http.StatusServiceUnavailable, "gave up waiting for the API server to check the token (TokenReview): %v; the answer is kept for the next request", ctx.Err())
	}
}

// kept is the answer kept for token at now, if there is one: an identity, or a refusal.
// A token verified against its issuer's keys counts only for a pod. Caller holds mu.
func (a *authenticator) kept(token string, now time.Time, pod bool) (identity, bool, error) {
	if k, ok := a.known[token]; ok && now.Before(k.until) && (pod || !k.verified) {
		if k.refusal != nil {
			return identity{}, true, k.refusal
		}
		return k.id, true, nil
	}
	if r, ok := a.refused[token]; ok && now.Before(r.until) {
		return identity{}, true, r.refusal
	}
	return identity{}, false, nil
}

// review asks the API server about token, keeps the answer and hands it to rv's waiters.
func (a *authenticator) review(token string, claims claims, rv *review) {
	rv.id, rv.err = a.ask(token, claims)
	a.mu.Lock()
	delete(a.pending, token)
	a.mu.Unlock()
	close(rv.done)
}

func (a *authenticator) ask(token string, claims claims) (identity, error) {
	ctx, cancel := context.WithTimeout(context.Background(), reviewTimeout)
	defer cancel()
	select {
	case a.sem <- struct{}{}:
		defer func() { <-a.sem }()
	case <-ctx.Done():
		return identity{}, refuse(http.StatusServiceUnavailable, "gave up waiting to check the token: %v", ctx.Err())
	}
	a.reviews.Add(1)
	answer, err := a.client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: []string{breakerconfig.NodeAgentAudience},
	}}, metav1.CreateOptions{})
	if err != nil {
		// Says nothing about the token: not kept, asked again next time.
		return identity{}, refuse(http.StatusServiceUnavailable, "cannot check the token with the API server (TokenReview): %v", err)
	}
	id, refusal := judge(answer.Status)
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if refusal != nil && refusal.status == http.StatusUnauthorized {
		keep(a.refused, maxRefusedTokens, now, token, refusedToken{refusal, now.Add(refusedFor)}, func(r refusedToken) time.Time { return r.until })
		return identity{}, refusal
	}
	until := claims.expires
	if until.IsZero() {
		until = now.Add(unexpiringFor)
	}
	keep(a.known, maxKnownTokens, now, token, knownToken{id: id, refusal: refusal, until: until}, func(k knownToken) time.Time { return k.until })
	if refusal != nil {
		return identity{}, refusal
	}
	return id, nil
}

// keep puts v under token in m, first making room when m is full: the expired entries
// go, and if none has expired, an arbitrary one.
func keep[V any](m map[string]V, most int, now time.Time, token string, v V, until func(V) time.Time) {
	if _, ok := m[token]; !ok && len(m) >= most {
		for t, old := range m {
			if !now.Before(until(old)) {
				delete(m, t)
			}
		}
		for t := range m {
			if len(m) < most {
				break
			}
			delete(m, t)
		}
	}
	m[token] = v
}

// judge turns the API server's answer into an identity or a refusal: 401 when it does not
// vouch for the token, 403 when the token is valid but no service account's. A service
// account's token bound to no pod is an identity too (a reader's, GET /v1/pods): whether
// an endpoint serves it is the endpoint's to say.
func judge(s authenticationv1.TokenReviewStatus) (identity, *refusal) {
	if !s.Authenticated {
		why := s.Error
		if why == "" {
			why = "not authenticated"
		}
		return identity{}, refuse(http.StatusUnauthorized, "the API server does not vouch for the token (audience %s): %s", breakerconfig.NodeAgentAudience, why)
	}
	if len(s.Audiences) > 0 && !slices.Contains(s.Audiences, breakerconfig.NodeAgentAudience) {
		return identity{}, refuse(http.StatusUnauthorized, "the token is not for audience %s", breakerconfig.NodeAgentAudience)
	}
	u := s.User
	rest, ok := strings.CutPrefix(u.Username, serviceAccountPrefix)
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" {
		return identity{}, refuse(http.StatusForbidden, "%q is not a service account: the agent serves pods, each with its own projected token, and the readers of its namespace", u.Username)
	}
	return identity{
		username: u.Username, namespace: ns, serviceAccount: sa,
		pod: first(u.Extra[extraPodName]), podUID: types.UID(first(u.Extra[extraPodUID])), node: first(u.Extra[extraNodeName]),
	}, nil
}

// serviceAccountPrefix begins the user name of every service account's token:
// system:serviceaccount:<namespace>:<name>.
const serviceAccountPrefix = "system:serviceaccount:"

// claims is what the agent reads in a token before anyone vouched for it: enough to
// refuse it, never enough to accept it. Once the API server has vouched for the token,
// its expiry says how long to believe the answer.
type claims struct {
	expires   time.Time
	audiences []string
}

// readClaims reads a JWT's payload without checking its signature.
func readClaims(token string) (claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return claims{}, fmt.Errorf("not a JWT (want three dot-separated parts, got %d)", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return claims{}, fmt.Errorf("not a JWT: payload: %v", err)
	}
	var p struct {
		Exp *json.Number    `json:"exp"`
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return claims{}, fmt.Errorf("not a JWT: payload: %v", err)
	}
	var c claims
	if p.Exp != nil {
		sec, err := p.Exp.Int64()
		if err != nil {
			return claims{}, fmt.Errorf("not a JWT: exp %s", p.Exp)
		}
		c.expires = time.Unix(sec, 0)
	}
	if c.audiences, err = audiences(p.Aud); err != nil && len(p.Aud) > 0 {
		return claims{}, fmt.Errorf("not a JWT: aud %s", p.Aud)
	}
	return c, nil
}

// audiences reads a JWT's aud claim: a string or a list of them (RFC 7519 §4.1.3).
func audiences(aud json.RawMessage) ([]string, error) {
	var one string
	if json.Unmarshal(aud, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	err := json.Unmarshal(aud, &many)
	return many, err
}
