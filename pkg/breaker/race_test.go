//go:build race

package breaker

func init() { raceDetector = true }
