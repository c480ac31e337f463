package fuseboxd_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// leanClient is what a worker in another language does with its one kept-alive
// connection (PHP's curl, a Python worker's http.client): it writes each request from a
// buffer it reuses and reads the answer into another, with none of the Go HTTP client's
// per-request objects and goroutines. It understands just what the daemon answers: a
// status line, headers, and a Content-Length body.
type leanClient struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte
	body []byte
	// retryAfter is the last answer's Retry-After header, if any.
	retryAfter string
}

func dialLean(sock string) (*leanClient, error) { return dialLeanNet("unix", sock) }

// dialLeanNet is dialLean on any network: "tcp" for the daemon's loopback listener.
func dialLeanNet(network, addr string) (*leanClient, error) {
	conn, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return &leanClient{conn: conn, r: bufio.NewReaderSize(conn, 4096)}, nil
}

func (c *leanClient) Close() error { return c.conn.Close() }

// post sends POST path with body and returns the answer's status and body; the body is
// valid until the next call.
func (c *leanClient) post(path, body []byte) (int, []byte, error) {
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: fuseboxd\r\n"...)
	if len(body) > 0 {
		c.req = append(c.req, "Content-Type: application/json\r\n"...)
	}
	c.req = append(c.req, "Content-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, nil, err
	}
	return c.readAnswer()
}

var errAnswer = errors.New("lean client: an answer it does not understand")

func (c *leanClient) readAnswer() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: status line %q", errAnswer, line)
	}
	length := 0
	c.retryAfter = ""
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		switch {
		case !ok:
			return 0, nil, fmt.Errorf("%w: header %q", errAnswer, h)
		case bytes.EqualFold(name, contentLength):
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, nil, fmt.Errorf("%w: header %q", errAnswer, h)
			}
		case bytes.EqualFold(name, retryAfter):
			c.retryAfter = string(bytes.TrimSpace(value))
		case bytes.EqualFold(name, transferEncoding):
			return 0, nil, fmt.Errorf("%w: header %q", errAnswer, h)
		}
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, nil, err
	}
	return code, c.body, nil
}

var (
	contentLength    = []byte("Content-Length")
	transferEncoding = []byte("Transfer-Encoding")
	retryAfter       = []byte("Retry-After")
)
