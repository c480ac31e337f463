// Package policy renders a CircuitBreaker's policy as the pods run it: the published
// document's policy fields (breakerconfig.Policy) from the spec's, each default filled in
// and each percent turned into a ratio, with one function for the enforced policy and the
// candidate's alike (docs/design.md §4, §11); and the spec a candidate describes
// (CandidateSpec), which the operator renders, the webhook judges and `kubectl fusebox
// promote` makes the spec.
package policy
