package fuseboxd

import (
	"errors"
	"net"
	"net/http"
)

// ServeNetHTTP serves ln with net/http alone, as the daemon did before serveConn: the
// reference its answers are compared with (TestWireAnswers) and measured against
// (BenchmarkPermitRoundTrip).
func (s *Server) ServeNetHTTP(ln net.Listener) error {
	if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// HandedOff is how many connections serveConn has given to net/http.
func (s *Server) HandedOff() int64 { return s.handedOff.Load() }

// Route is a route of the API's table, for tests that derive requests from it.
type Route struct{ Method, Pattern, Wildcard string }

// Routes is the API's route table.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, r := range routes {
		out[i] = Route{r.method, r.pattern, r.wildcard}
	}
	return out
}

// RefusalLane is how many connections over MaxConnections are answered at once.
const RefusalLane = refusalLane
