// Package circuit holds the two types package breaker and its observer vocabulary
// (package observe) both speak of: a circuit's State and its Counts. Package breaker
// makes them its own with aliases (breaker.State, breaker.Counts), so the two packages
// share one type and neither imports the other's internals.
package circuit
