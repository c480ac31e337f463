// Package plugin is `kubectl fusebox`: the commands that show CircuitBreakers
// (status, watch, a live web dashboard) and hold them open or closed for a
// while through spec.override (open, close, release), and list every pod of a
// breaker, read from the node agents (pods). cmd/kubectl-fusebox is
// its binary; the logic lives here so tests run it in-process.
package plugin
