// Package bench measures the breaker's call path against other Go circuit breakers
// (sony/gobreaker and failsafe-go) on the same scenarios, in a module of its own so that the
// library never depends on its competitors.
//
// Run it with
//
//	go test -run '^$' -bench . -benchmem -count 5
//
// Every benchmark is named Benchmark<Scenario>/impl=<library>, so that
// `benchstat -col /impl` lays the libraries side by side. When benchmarks ran, the test
// binary ends by printing the median ns/op of each scenario per library and its ratio to
// Fusebox's.
package bench
