// Package breakerconfig is the wire format between the Fusebox operator and the
// breaker library: the JSON document published for each CircuitBreaker under
// the key <name>.json of the namespace's fusebox-breakers ConfigMap.
//
// The operator renders it with Marshal; pods read it with Parse and turn it into
// their library's policy (pkg/breaker/kube). Readers ignore fields they do not
// know, so the operator can add fields without breaking older pods; a document
// that fails validation is refused whole, and the caller keeps its last good
// policy. Beside the document, the package holds every other name the operator
// and the pods must spell alike (names.go, agent.go) and the Go shape of a pod's
// report (report.go). It imports nothing of Fusebox, so that the API types and
// the library can both import it (docs/design.md §1).
package breakerconfig
