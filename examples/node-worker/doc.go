// Package nodeworker holds the test of the node-worker example (worker.mjs): eight Node
// worker processes sharing one breaker through one fuseboxd.
package nodeworker
