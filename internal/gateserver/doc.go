// Package gateserver serves the operator's rollout gate (docs/design.md §10,
// docs/rollouts.md): GET /v1/namespaces/{namespace}/circuitbreakers/{name}/gate, for
// Argo Rollouts' web provider and anyone else, and a POST on the same path in the shape
// of Flagger's webhooks. It answers over HTTPS, only to callers the API server
// authenticates (TokenReview) and authorizes for get on that CircuitBreaker
// (SubjectAccessReview on the resource), and judges with package gate from the
// CircuitBreaker the operator's cache holds.
package gateserver
