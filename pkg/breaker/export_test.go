package breaker

// SetRandom makes b's adaptive throttling draw from f instead of math/rand/v2, so that
// tests outside the package can replay a run. Call it before b is used.
func SetRandom(b *Breaker, f func() float64) { b.rnd = f }
