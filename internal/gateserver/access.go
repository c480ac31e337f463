package gateserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// How long the API server's answers are kept. A gate is polled every few seconds to
// minutes by a handful of rollout controllers, so keeping answers saves little; these
// bound how long a revoked token or a removed binding still reads a verdict.
const (
	tokenCacheTTL = time.Minute
	allowCacheTTL = 30 * time.Second
	// A refusal is kept briefly: the binding that fixes it should work at once.
	denyCacheTTL = 5 * time.Second
)

// access asks the API server who a caller is and whether they may read a CircuitBreaker.
type access struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

func newAccess(cfg *rest.Config, httpClient *http.Client) (*access, error) {
	authnClient, err := authenticationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authzClient, err := authorizationv1.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	// The retry backoff of kube-apiserver's own delegated authentication.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 tokenCacheTTL,
		TokenAccessReviewClient:  authnClient,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("gate authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient,
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("gate authorization: %w", err)
	}
	return &access{authn: authn, authz: authz}, nil
}

// authenticate returns who sent req, by its bearer token or, when it carries none,
// by token (the token a Flagger webhook's metadata carries: Flagger sends no headers).
// ok is false when neither names anyone the API server knows.
func (a *access) authenticate(req *http.Request, token string) (user.Info, bool, error) {
	if req.Header.Get("Authorization") == "" && token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, ok, err := a.authn.AuthenticateRequest(req)
	if err != nil || !ok {
		return nil, false, err
	}
	return res.User, true, nil
}

// mayGet says whether u may get the CircuitBreaker namespace/name: the question the API
// server answers for `kubectl get circuitbreaker`, about the resource, not the URL, so
// the RBAC that lets someone read a breaker lets them read its gate.
func (a *access) mayGet(ctx context.Context, u user.Info, namespace, name string) (bool, string, error) {
	d, reason, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            u,
		Verb:            "get",
		Namespace:       namespace,
		APIGroup:        resiliencev1alpha1.GroupVersion.Group,
		APIVersion:      resiliencev1alpha1.GroupVersion.Version,
		Resource:        "circuitbreakers",
		Name:            name,
		ResourceRequest: true,
	})
	return d == authorizer.DecisionAllow, reason, err
}
