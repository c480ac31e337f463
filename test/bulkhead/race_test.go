//go:build race

package bulkhead

func init() { raceDetector = true }
