package registry

import (
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/access"
)

// peek reads what a Group needs of its breakers beyond their exported API: the call
// path's clock (to mark a key used for one function call and one atomic load), the
// published state (to judge eviction under the Group's lock without a breaker's), the
// breaker's wall clock, and a policy's defaults.
var peek = access.Breaker.(*access.Of[breaker.Breaker, breaker.Policy, breaker.Option])
