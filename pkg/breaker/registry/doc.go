// Package registry holds many breakers: a Registry of named breakers that creates them on
// first use and hot-reloads their policies (what pkg/breaker/kube drives from the
// operator's published configuration), and a Group of one breaker per key (host, route,
// tenant) under one policy, bounded, whose summary is what a pod reports of it
// (docs/groups.md).
//
// Both are built on package breaker's Breaker; a Group reads its members' clock and
// published state through the module's internal access package, so that marking a key
// used reads the call path's clock (one function call and one atomic load) and judging
// eviction takes no breaker's lock.
package registry
