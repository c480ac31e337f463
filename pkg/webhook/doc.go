// Package webhook serves Fusebox's admission webhooks from the operator: the
// CircuitBreaker defaulting and validating webhooks (package circuitbreaker),
// the pod injection webhook (package podinject), and, for clusters without
// cert-manager, their serving certificate (package certs).
//
// [Setup] is the one entry point the manager calls; [Options.BindFlags]
// declares its flags. docs/webhooks.md is the user's guide.
package webhook
