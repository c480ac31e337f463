package fuseboxd

import (
	"context"
	"net"
	"strconv"
)

// client is whom a permit counts against for Options.MaxPermitsPerClient: the process
// at the other end of a Unix socket, when the kernel can name it (SO_PEERCRED gives its
// pid in this daemon's PID namespace: a process of the same container, or of a pod
// that shares its process namespace), so that a worker leaking permits is capped
// however many connections it opens; else the connection (a process in another
// container of the pod, whose pid the kernel reports as 0; loopback TCP).
type client struct {
	pid  int32  // the peer process, or 0
	conn uint64 // the connection's serial number when pid is 0
}

func (c client) String() string {
	if c.pid != 0 {
		return "process " + strconv.Itoa(int(c.pid))
	}
	return "connection " + strconv.FormatUint(c.conn, 10)
}

// identify returns the client conn's requests come from.
func (s *Server) identify(conn net.Conn) client {
	if pid := peerProcess(conn); pid > 0 {
		return client{pid: pid}
	}
	return client{conn: s.connSerial.Add(1)}
}

// clientKey holds a request's client in its context on net/http.
type clientKey struct{}

// connContext gives the requests of a connection net/http serves its client: the one
// serveConn identified before handing the connection over, or a new one.
func (s *Server) connContext(ctx context.Context, conn net.Conn) context.Context {
	var from client
	if bc, ok := conn.(*bufferedConn); ok {
		from = bc.from
	} else {
		from = s.identify(conn)
	}
	return context.WithValue(ctx, clientKey{}, from)
}

func clientOf(ctx context.Context) client {
	from, _ := ctx.Value(clientKey{}).(client)
	return from
}
