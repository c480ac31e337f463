package fuseboxd

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// routes is the API of docs/design.md §8, written once. handler registers each route on
// net/http's ServeMux, and the hand-written wire (wire.go) matches requests against the
// same table, so a route is added in one place and the two servers cannot disagree on
// where a request goes (TestRouteTableAgreement).
var routes = []route{
	newRoute("POST /v1/breakers/{name}/permits", readsBody|grantsPermits, func(s *Server, c call) answer {
		return s.acquire(c.arg, c.body, c.from, c.buf)
	}),
	newRoute("POST /v1/permits/{permit}", readsBody, func(s *Server, c call) answer {
		return s.settle(c.arg, c.body)
	}),
	newRoute("GET /v1/breakers/{name}", 0, func(s *Server, c call) answer {
		return s.describe(string(c.arg))
	}),
	newRoute("POST /v1/breakers/{name}/trip", 0, func(s *Server, c call) answer {
		return s.trip(string(c.arg))
	}),
	newRoute("GET /healthz", 0, func(*Server, call) answer { return healthy }),
	newRoute("GET /readyz", 0, func(s *Server, _ call) answer { return s.readyz() }),
}

// route is one request the API answers.
type route struct {
	method, pattern string
	// prefix and suffix are the pattern's path around its one wildcard segment, whose
	// name is wildcard; a path without a wildcard is all prefix.
	prefix, suffix, wildcard string

	flags  routeFlags
	answer func(s *Server, c call) answer
}

type routeFlags uint8

const (
	// readsBody: the answer depends on the body, which net/http reads for it (at most
	// MaxBody); the other routes ignore a body.
	readsBody routeFlags = 1 << iota
	// grantsPermits: the route a client hoarding permits or connections takes from
	// the others, refused at a cap (conns.go).
	grantsPermits
)

// call is what a route answers.
type call struct {
	arg  []byte // the wildcard's path segment
	body []byte
	from client // who is asking
	buf  []byte // a 201's body is appended to it
}

// newRoute parses "METHOD /path/{wildcard}/path", as ServeMux reads it, with at most
// one wildcard and that a whole segment: what between matches.
func newRoute(pattern string, flags routeFlags, answer func(*Server, call) answer) route {
	method, path, _ := strings.Cut(pattern, " ")
	r := route{method: method, pattern: path, prefix: path, flags: flags, answer: answer}
	if open := strings.IndexByte(path, '{'); open >= 0 {
		end := strings.IndexByte(path, '}')
		r.prefix, r.wildcard, r.suffix = path[:open], path[open+1:end], path[end+1:]
		if r.prefix[len(r.prefix)-1] != '/' || r.suffix != "" && r.suffix[0] != '/' || strings.ContainsAny(r.suffix, "{}") {
			panic(fmt.Sprintf("fuseboxd: route %q: one wildcard, a whole segment", pattern))
		}
	}
	return r
}

// match returns the route of method and path and the path's wildcard segment, or nil.
// ServeMux would pick the same one: path is plain (plainPath), and no two routes match
// one path, since each wildcard is exactly one segment.
func match(method, path []byte) (*route, []byte) {
	for i := range routes {
		r := &routes[i]
		if string(method) != r.method {
			continue
		}
		if r.wildcard == "" {
			if string(path) == r.prefix {
				return r, nil
			}
			continue
		}
		if arg, ok := between(path, r.prefix, r.suffix); ok {
			return r, arg
		}
	}
	return nil, nil
}

// between returns the one path segment of path between prefix and suffix.
func between(path []byte, prefix, suffix string) ([]byte, bool) {
	if !bytes.HasPrefix(path, []byte(prefix)) || !bytes.HasSuffix(path, []byte(suffix)) || len(path) <= len(prefix)+len(suffix) {
		return nil, false
	}
	seg := path[len(prefix) : len(path)-len(suffix)]
	return seg, bytes.IndexByte(seg, '/') < 0
}

// plainPath reports whether ServeMux would take path as it is: segments of letters,
// digits, '-', '_' and '.', none of them empty, "." or "..", no escapes, no query.
func plainPath(path []byte) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	for rest := path[1:]; ; {
		seg, after, more := bytes.Cut(rest, []byte("/"))
		if len(seg) == 0 || string(seg) == "." || string(seg) == ".." {
			return false
		}
		for _, c := range seg {
			if !alphanumeric(c) && c != '-' && c != '_' && c != '.' {
				return false
			}
		}
		if !more {
			return true
		}
		rest = after
	}
}

// handler serves the routes on net/http. [Server.Serve] answers the requests it can
// itself (wire.go) and hands every other one, with its connection, to this handler.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	for i := range routes {
		r := &routes[i]
		mux.HandleFunc(r.method+" "+r.pattern, func(w http.ResponseWriter, req *http.Request) {
			c := call{from: clientOf(req.Context())}
			if r.wildcard != "" {
				c.arg = []byte(req.PathValue(r.wildcard))
			}
			if r.flags&readsBody != 0 {
				var ok bool
				if c.body, ok = readBody(w, req); !ok {
					return
				}
			}
			writeAnswer(w, r.answer(s, c))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, errorAnswer(http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)))
	})
	return mux
}
