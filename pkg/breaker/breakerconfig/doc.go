// Package breakerconfig is the wire format between the Fusebox operator and the
// breaker library: the JSON document published for each CircuitBreaker under
// the key <name>.json of the namespace's fusebox-breakers ConfigMap.
//
// The operator renders it with Marshal; pods read it with Parse and turn it into
// a breaker.Policy. Readers ignore fields they do not know, so the operator can
// add fields without breaking older pods; a document that fails validation is
// refused whole, and the caller keeps its last good policy.
package breakerconfig
