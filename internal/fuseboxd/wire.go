package fuseboxd

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// The HTTP/1.1 of the API's frequent requests, by hand. A worker asks for a permit and
// settles it on every call it makes, so what one request costs the daemon is what every
// call costs the application. Go's HTTP server spends tens of allocations on each
// request (the Request, its Header map and URL, a context, the response's state), and
// the collector's cycles for that garbage made much of the slowest one percent of the
// round trips (docs/benchmarks.md, "fuseboxd"). The requests the API really gets are few and
// fixed: the routes of routes.go, a small body with a Content-Length, on a kept-alive
// connection. serveConn reads those straight from the connection's buffer and answers
// them from a buffer it reuses. Anything else (a chunked or large body, Expect:
// 100-continue, HTTP/1.0, an escaped or unknown path, a header too long for the buffer)
// goes, with the connection and every byte read of it, to the same routes on net/http,
// which serves the connection from then on: the same answers either way, checked by
// TestWireAnswers and TestRouteTableAgreement.

// wireBuffer is each connection's read and write buffer: a request must fit whole in it
// to be served by hand. Clients' requests take a few hundred bytes.
const wireBuffer = 4 << 10

// request is the part of a request serveConn acts on; its slices point into the
// connection's read buffer and are valid until the request is discarded from it.
type request struct {
	route     *route
	arg, body []byte
	close     bool // Connection: close
	length    int  // of the request, headers and body, in the buffer
}

// errHandOff means the request is not one serveConn answers by hand.
var errHandOff = errors.New("fuseboxd: request for net/http")

// serveConn serves the requests on conn until the client closes it, asks to, or the
// server shuts down; or hands conn to net/http at the first request it does not answer
// itself.
func (s *Server) serveConn(conn net.Conn) {
	c := &wireConn{conn: conn, from: s.identify(conn), r: bufio.NewReaderSize(conn, wireBuffer), w: bufio.NewWriterSize(conn, wireBuffer),
		scratch: make([]byte, 0, 256)}
	if s.track(c, true) && s.serveWire(c) {
		return // net/http's now
	}
	s.track(c, false)
	// Counted out first, so that a client that sees its connection end may count on
	// the place being free.
	s.open.Add(-1)
	_ = conn.Close()
}

// serveWire answers c's requests until c is to be closed (false) or has been handed to
// net/http (true).
func (s *Server) serveWire(c *wireConn) bool {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(s.idleTimeout))
		if _, err := c.r.Peek(1); err != nil {
			return false
		}
		// A request has begun: the server waits for it to end before it shuts down.
		if !c.setActive(true) {
			return false
		}
		// It has requestTimeout to arrive whole and be answered, however slowly a
		// client trickles it or reads the answer.
		_ = c.conn.SetDeadline(time.Now().Add(s.requestTimeout))
		req, err := readRequest(c.r)
		if errors.Is(err, errHandOff) {
			s.log.Debug("Serving a connection with net/http from here on", "request", firstLine(c.r))
			s.handedOff.Add(1)
			s.track(c, false)
			// net/http sets its own, by the same limits.
			_ = c.conn.SetDeadline(time.Time{})
			s.handoff.give(&bufferedConn{Conn: c.conn, r: c.r, from: c.from, open: &s.open})
			return true
		}
		if err != nil {
			return false
		}
		a := req.route.answer(s, call{arg: req.arg, body: req.body, from: c.from, buf: c.scratch[:0]})
		// An acquire may have waited for a slot of a concurrency limit (at most its
		// maxWait): the answer gets its own time to be written, so that a wait the
		// operator allowed is never cut into a broken connection, which a client reads
		// as an unreachable daemon and fails open on.
		_ = c.conn.SetWriteDeadline(time.Now().Add(s.requestTimeout))
		closeAfter := req.close || s.closing.Load()
		_, _ = c.w.Write(s.header(c.w.AvailableBuffer(), a, closeAfter))
		_, _ = c.w.Write(a.body)
		// req points into the read buffer: its bytes go only once they are answered.
		_, _ = c.r.Discard(req.length)
		err = c.w.Flush()
		if !c.setActive(false) || closeAfter || err != nil {
			return false
		}
	}
}

// firstLine is the start of the request line at the head of r, for a log.
func firstLine(r *bufio.Reader) string {
	buf, _ := r.Peek(min(r.Buffered(), 120))
	line, _, _ := bytes.Cut(buf, []byte("\r\n"))
	return string(line)
}

// readRequest reads the request at the head of r without consuming it, or returns
// errHandOff if it is not one for serveConn: then with its route if its request line is
// one of the table's.
func readRequest(r *bufio.Reader) (request, error) {
	var buf []byte
	end := -1
	for end < 0 {
		var err error
		buf, err = r.Peek(r.Buffered())
		if err != nil {
			return request{}, err
		}
		if end = bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			break
		}
		if r.Buffered() == r.Size() {
			return request{}, errHandOff // headers longer than the buffer
		}
		if _, err := r.Peek(r.Buffered() + 1); err != nil {
			return request{}, err
		}
	}
	var req request
	head := buf[:end+2]
	line, head, _ := bytes.Cut(head, []byte("\r\n"))
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	path, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || !plainPath(path) {
		return request{}, errHandOff
	}
	if req.route, req.arg = match(method, path); req.route == nil {
		return request{}, errHandOff
	}
	length, host := -1, false
	for len(head) > 0 {
		var h []byte
		h, head, _ = bytes.Cut(head, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok || !validHeader(name, value) {
			return req, errHandOff
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			if host || !plainHost(value) {
				return req, errHandOff
			}
			host = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := digits(value)
			if length >= 0 || !ok {
				return req, errHandOff
			}
			length = n
		case bytes.EqualFold(name, []byte("Connection")):
			switch {
			case bytes.EqualFold(value, []byte("close")):
				req.close = true
			case !bytes.EqualFold(value, []byte("keep-alive")):
				return req, errHandOff
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")), bytes.EqualFold(name, []byte("Expect")),
			bytes.EqualFold(name, []byte("Upgrade")), bytes.EqualFold(name, []byte("Trailer")):
			return req, errHandOff
		}
	}
	if !host {
		return req, errHandOff // net/http refuses it, and says why
	}
	length = max(length, 0)
	req.length = end + 4 + length
	if req.length > r.Size() {
		return req, errHandOff // a body too large for the buffer
	}
	full, err := r.Peek(req.length)
	if err != nil {
		return request{}, err
	}
	req.body = full[end+4:]
	return req, nil
}

// validHeader: a token for a name, and no control character in the value, as net/http
// requires of a request it serves.
func validHeader(name, value []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// plainHost: a Host of letters, digits and ".-_:[]" (a name, an IPv4 or a bracketed
// IPv6 address, a port), which net/http takes as it is; it judges any other.
func plainHost(v []byte) bool {
	for _, c := range v {
		if !alphanumeric(c) && bytes.IndexByte([]byte(".-_:[]"), c) < 0 {
			return false
		}
	}
	return true
}

func alphanumeric(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// digits parses a Content-Length: 1 to 9 decimal digits.
func digits(v []byte) (int, bool) {
	if len(v) == 0 || len(v) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// header appends the status line and headers of a to buf.
func (s *Server) header(buf []byte, a answer, closeAfter bool) []byte {
	buf = append(buf, "HTTP/1.1 "...)
	buf = strconv.AppendInt(buf, int64(a.code), 10)
	buf = append(buf, ' ')
	buf = append(buf, http.StatusText(a.code)...)
	buf = append(buf, "\r\nDate: "...)
	buf = append(buf, s.date()...)
	if a.retryAfter > 0 {
		buf = append(buf, "\r\nRetry-After: "...)
		buf = strconv.AppendInt(buf, a.retryAfter, 10)
	}
	if closeAfter {
		buf = append(buf, "\r\nConnection: close"...)
	}
	if a.body != nil {
		buf = append(buf, "\r\nContent-Type: application/json\r\nContent-Length: "...)
		buf = strconv.AppendInt(buf, int64(len(a.body)), 10)
	}
	return append(buf, "\r\n\r\n"...)
}

// httpDate is the Date header's value, formatted once a second.
type httpDate struct {
	unix  int64
	value []byte
}

func (s *Server) date() []byte {
	now := time.Now()
	if d := s.httpDate.Load(); d != nil && d.unix == now.Unix() {
		return d.value
	}
	d := &httpDate{unix: now.Unix(), value: now.UTC().AppendFormat(nil, http.TimeFormat)}
	s.httpDate.Store(d)
	return d.value
}

// wireConn is a connection serveConn serves.
type wireConn struct {
	conn    net.Conn
	from    client
	r       *bufio.Reader
	w       *bufio.Writer
	scratch []byte // a permit's answer is built here (about 70 bytes)
	// state: 0 idle, 1 answering a request, 2 closed by Shutdown.
	state atomic.Int32
}

// setActive moves c between idle and answering; false means Shutdown closed it.
func (c *wireConn) setActive(active bool) bool {
	from, to := int32(1), int32(0)
	if active {
		from, to = 0, 1
	}
	return c.state.CompareAndSwap(from, to)
}
