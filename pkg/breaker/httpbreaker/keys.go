package httpbreaker

import (
	"net/http"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// A key function picks, for one request, the key of the breaker that guards it in a
// [registry.Group]: one breaker per host, per route, per tenant, so that the failures of one
// do not open the circuit for the others. Keys become breaker names ("<group>/<key>") and
// a Group keeps a bounded number of them, so a key function should map requests onto a
// known, modest set: a host the client is configured to call, a route pattern, not a raw
// path or anything a caller can vary at will.

// ByHost keys a client's breakers by the host (and port) a request is sent to: what
// [Transport] does with a Group and no Key.
func ByHost(r *http.Request) string { return r.URL.Host }

// ByPattern keys a server's breakers by the ServeMux pattern that matched the request
// (Request.Pattern, "GET /items/{id}"): what [Handler] does with a Group and no Key. The
// pattern is set once a ServeMux has routed the request, so ByPattern suits a Handler that
// a ServeMux calls (mux.Handle(pattern, h)). A Handler in front of the mux sees no pattern
// yet: use [ByMuxPattern] there.
func ByPattern(r *http.Request) string { return r.Pattern }

// ByMuxPattern keys a server's breakers by the pattern mux will route the request to, for
// a Handler that wraps the whole mux. Requests that match no pattern share the key "".
func ByMuxPattern(mux *http.ServeMux) func(*http.Request) string {
	return func(r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		_, pattern := mux.Handler(r)
		return pattern
	}
}

// guard returns the breaker of a request: b, or with g set, g's breaker of key(r) (def
// when key is nil).
func guard(b *breaker.Breaker, g *registry.Group, key, def func(*http.Request) string, r *http.Request) *breaker.Breaker {
	if g == nil {
		return b
	}
	if key == nil {
		key = def
	}
	return g.Get(key(r))
}
