//go:build race

package e2e

// raceDetector: built with -race, which slows every goroutine of the test binary (the
// operator, 200 agents, the test's own polling) several times over.
const raceDetector = true
