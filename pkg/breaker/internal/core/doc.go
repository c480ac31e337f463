// Package core is what package breaker and package registry share of a breaker: the options
// it is built with (breaker.Option sets them, so a Group reads the clock its members read)
// and the two clocks it reads time on, the coarse one of the call path and an injected
// Clock (docs/design.md §5.14). It is an ordinary package both import, as failsafe-go's
// policies share theirs; nothing outside the breaker module's tree can import it.
package core
