package fuseboxd

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Connections: each costs the daemon its buffers and a goroutine (about 15 KiB) for as
// long as the client holds it, so at most MaxConnections are served at once
// (docs/fuseboxd.md, "Limits").

// refusalLane is how many connections over MaxConnections are answered at once; past
// that one is closed unread, so that refusing costs bounded memory too.
const refusalLane = 16

// admit serves conn, or refuses it when MaxConnections are open already.
func (s *Server) admit(conn net.Conn) {
	if s.open.Add(1) <= int64(s.maxConns) {
		go s.serveConn(conn)
		return
	}
	s.open.Add(-1)
	if s.warnings.due(connectionsAtCap) {
		s.log.Warn("As many connections are open as the daemon serves; new ones get one answer and are closed",
			"maxConnections", s.maxConns)
	}
	if s.refusing.Add(1) > refusalLane {
		s.refusing.Add(-1)
		_ = conn.Close()
		return
	}
	go s.refuseConn(conn)
}

// refuseConn answers the one request of a connection over MaxConnections, and closes
// it. An acquire is refused as a short-circuit (429, connections_exhausted, the
// breaker's state), so that a client holding connections makes the others run their
// fallback rather than take the daemon for dead and fail open. Any other request is
// answered: it holds nothing, and a settle frees a permit. One the wire does not read
// gets a 503 naming the cap.
func (s *Server) refuseConn(conn net.Conn) {
	defer conn.Close()
	// Counted out before the close, so that a client that sees its connection end may
	// count on the place being free.
	defer s.refusing.Add(-1)
	_ = conn.SetDeadline(time.Now().Add(s.requestTimeout))
	r := bufio.NewReaderSize(conn, wireBuffer)
	if _, err := r.Peek(1); err != nil {
		return
	}
	req, err := readRequest(r)
	var a answer
	switch {
	case req.route != nil && req.route.flags&grantsPermits != 0:
		e, b, refused := s.breakerNamed(req.arg)
		if b == nil {
			a = refused
			break
		}
		a = s.refuseAtCap(e, b, reasonConnections)
	case err == nil:
		a = req.route.answer(s, call{arg: req.arg, body: req.body})
	case errors.Is(err, errHandOff):
		a = errorAnswer(http.StatusServiceUnavailable, fmt.Sprintf("%d connections are open, as many as this daemon serves: close idle ones", s.maxConns))
		a.retryAfter = int64(unknownRetryAfter / time.Second)
	default:
		return
	}
	_, _ = conn.Write(append(s.header(nil, a, true), a.body...))
}

// bufferedConn is a connection handed to net/http with what serveConn read of it.
type bufferedConn struct {
	net.Conn
	r      *bufio.Reader
	from   client
	open   *atomic.Int64 // the server's count of open connections
	closed atomic.Bool
}

var _ net.Conn = (*bufferedConn)(nil)

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Close closes the connection, counted out of MaxConnections first (as serveConn does).
func (c *bufferedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.Add(-1)
	}
	return c.Conn.Close()
}

// handoff is the listener net/http serves: it accepts only the connections serveConn
// gives it.
type handoff struct {
	conns  chan net.Conn
	closed chan struct{}
	once   atomic.Bool
}

var _ net.Listener = (*handoff)(nil)

func newHandoff() *handoff {
	return &handoff{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (h *handoff) give(c net.Conn) {
	select {
	case h.conns <- c:
	case <-h.closed:
		_ = c.Close()
	}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	if h.once.CompareAndSwap(false, true) {
		close(h.closed)
	}
	return nil
}

func (h *handoff) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "fuseboxd" }
func (handoffAddr) String() string  { return "net/http" }
