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
