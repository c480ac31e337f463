// Package registry holds many breakers: a Registry of named breakers that creates them on
// first use and hot-reloads their policies (what pkg/breaker/kube drives from the
// operator's published configuration), and a Group of one breaker per key (host, route,
// tenant) under one policy, bounded, whose summary is what a pod reports of it
// (docs/groups.md).
//
// Both are built on package breaker's Breaker. A Group follows its members through an
// observer of its own and reads time on the clock they read (the module's internal core
// package holds both's clocks and options), so that marking a key used costs one atomic
// load and judging eviction takes no breaker's lock.
package registry
