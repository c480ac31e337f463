// Package controller reconciles CircuitBreakers: it publishes the rendered
// configuration of every breaker of a namespace in that namespace's
// fusebox-breakers ConfigMap and reports on each breaker's status.
//
// The reconciler is keyed by namespace, not by object: the ConfigMap is shared
// by every breaker of the namespace, so one reconcile computes it whole from
// all of them, which keeps the controller level-based and the ConfigMap free
// of keys that no breaker owns.
package controller
