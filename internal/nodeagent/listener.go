package nodeagent

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// The port's limits (docs/fuseboxd.md, "The node agent"). Every pod of the node keeps one
// connection for its config stream and opens one for each report; the port is reachable
// from every pod of the node and, through the API server's pods/proxy, from the readers
// of GET /v1/pods, so none of them may hold it.
const (
	// maxConnections is the most connections served at once: a node runs at most a few
	// hundred pods (the kubelet's maxPods is 110 by default), each with a stream and a
	// report in flight, so 4,096 is room to spare, and far below the file descriptors
	// the agent may open.
	maxConnections = 4096
	// maxRefusing bounds the connections past the cap being answered at once; past it a
	// connection is closed unanswered, so a flood costs the agent no goroutine per
	// connection.
	maxRefusing = 64
	// refuseWriteTimeout bounds the write of the answer to a connection past the cap.
	refuseWriteTimeout = time.Second

	// readHeaderTimeout bounds a request's header: a pod's fits one packet, and a client
	// that trickles it holds a connection for no more than this.
	readHeaderTimeout = 10 * time.Second
	// readBodyTimeout bounds the whole of a request's arrival, body included (net/http's
	// ReadTimeout): a report is at most breakerconfig.MaxAgentReportSize, which a pod
	// sends in moments; a body that stalls is cut here and the connection closed. The
	// config stream, whose request has no body, clears it once its header is read.
	readBodyTimeout = 30 * time.Second
	// idleTimeout closes a kept-alive connection no request has begun on: a pod reports
	// when its breakers change, which may be rarely, and opens another when it needs one.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds a request's header; a pod's token is about 1 KiB.
	maxHeaderBytes = 64 << 10

	// tcpUserTimeout is how long the data the agent has sent on a connection may go
	// unacknowledged before the kernel drops it (TCP_USER_TIMEOUT, Linux): with a
	// heartbeat on every quiet config stream (breakerconfig.AgentHeartbeatInterval), a
	// pod whose node-local peer vanished without a FIN (its network namespace torn down)
	// is dropped within breakerconfig.AgentStreamTimeout, not after the minutes of TCP's
	// retransmissions.
	tcpUserTimeout = breakerconfig.AgentStreamTimeout
)

// portLimits are the port's limits as one agent runs with them: the constants above, which
// a test may lower.
type portLimits struct {
	maxConnections                   int
	readHeader, readBody, idle       time.Duration
	heartbeat, streamWrite, userTime time.Duration
}

func (l portLimits) withDefaults() portLimits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if l.maxConnections <= 0 {
		l.maxConnections = maxConnections
	}
	def(&l.readHeader, readHeaderTimeout)
	def(&l.readBody, readBodyTimeout)
	def(&l.idle, idleTimeout)
	def(&l.heartbeat, breakerconfig.AgentHeartbeatInterval)
	def(&l.streamWrite, streamWriteTimeout)
	def(&l.userTime, tcpUserTimeout)
	return l
}

// cappedListener serves at most max connections at once. A connection past the cap is
// accepted and answered 503 (with Retry-After) and closed, rather than left unaccepted as
// netutil.LimitListener leaves it: the kernel completes the handshake of a connection the
// agent does not accept, so a pod's request would wait in the backlog for its own timeout
// with no answer, while a 503 sends it to its jittered backoff at once (pkg/breaker/kube
// retries a report, and reconnects a stream, on any refusal) and says why.
type cappedListener struct {
	net.Listener
	max      int
	userTime time.Duration
	open     atomic.Int64
	refusing atomic.Int64
	refused  func() // counts a connection turned away
}

// capped wraps ln in the agent's connection cap.
func (a *Agent) capped(ln net.Listener) net.Listener {
	return &cappedListener{Listener: ln, max: a.port.maxConnections, userTime: a.port.userTime, refused: func() { a.refused.add(503) }}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			setUserTimeout(tc, l.userTime)
		}
		if l.open.Add(1) <= int64(l.max) {
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused()
		if l.refusing.Add(1) > maxRefusing {
			l.refusing.Add(-1)
			_ = c.Close()
			continue
		}
		go func() {
			defer l.refusing.Add(-1)
			refuseConn(c, l.max)
		}()
	}
}

// refuseConn answers a connection past the cap and closes it. The request is not read:
// the answer says nothing of it.
func refuseConn(c net.Conn, most int) {
	body := fmt.Sprintf(`{"error":"the node agent serves %d connections at once: ask again shortly"}`+"\n", most)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.Close()
}

// countedConn gives its place under the cap back when closed, once.
type countedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
