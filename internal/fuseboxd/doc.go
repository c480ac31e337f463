// Package fuseboxd is the per-pod decision sidecar of docs/design.md §8: it serves the
// breakers of one registry.Registry to programs in any language, over HTTP/1.1 on a Unix
// socket (and, when asked, on loopback TCP).
//
// A program asks for a permit before calling its dependency and settles the permit with
// the call's outcome afterwards; the permit is the breaker's two-step Allow and done,
// held on the program's behalf between two requests. Because the program may crash
// between them, every permit has a lease: one not settled within it is dropped, exactly
// as an in-process call whose done never came (§5.3). A closed circuit loses nothing by
// that, and a half-open one re-opens once no probe outcome has arrived for its open
// timeout, so a client that dies holding a probe cannot wedge the breaker. Memory is
// bounded: at most MaxPermits permits are outstanding, each a few hundred bytes, and
// each lives at most MaxLease. One client (a process, or a connection: client.go) holds
// at most MaxPermitsPerClient of them; an acquire a cap stops is refused as the breaker
// refuses one, so that one leaking worker makes the others neither wait nor fail open.
//
// The breakers' policies, their hot reload and the pod's report are the library's
// (pkg/breaker/kube), used exactly as a Go application uses them; this package adds
// only the wire.
package fuseboxd
