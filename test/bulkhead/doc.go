// Package bulkhead simulates a fleet of pods sharing a limit on calls in flight to one
// dependency (docs/design.md §5.18): real breakers on a fake clock, driven by an event loop,
// with the operator's shares and fleet baseline delivered as the pod's agent would. Its
// tests assert the bounds the fleet keeps and log the figures docs/benchmarks.md records
// ("Fleet concurrency"); run them with go test -v ./test/bulkhead/.
package bulkhead
