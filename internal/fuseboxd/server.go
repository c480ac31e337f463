package fuseboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Options configure a [Server].
type Options struct {
	// Registry holds the breakers served; required.
	Registry *registry.Registry
	// Published returns the last good published config of a breaker (for its generation
	// and scope), as kube.Connection.Published does; nil means nothing is published.
	Published func(name string) (breakerconfig.Config, bool)
	// Ready reports whether the config has been loaded (for /readyz); nil means always.
	Ready func() bool
	// MaxPermits bounds the outstanding permits; zero means DefaultMaxPermits.
	MaxPermits int
	// MaxPermitsPerClient bounds the permits one client (a process, or a connection:
	// see client) holds at once; zero means DefaultMaxPermitsPerClient.
	MaxPermitsPerClient int
	// MaxConnections bounds the connections served at once; zero means
	// DefaultMaxConnections. Past it a connection gets one answer and is closed
	// (conns.go).
	MaxConnections int
	// RequestTimeout is how long a request may take to arrive, header and body, from its
	// first byte, and its answer to be written; zero means DefaultRequestTimeout. A
	// request handed to net/http has as long again from the hand-off.
	RequestTimeout time.Duration
	// IdleTimeout closes a connection on which no request has begun for that long;
	// zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxBreakers bounds the breakers the registry may hold before a request naming a
	// new, unpublished one is refused; zero means DefaultMaxBreakers.
	MaxBreakers int
	// ExpiryInterval is how often lapsed permits are dropped; zero means one second.
	ExpiryInterval time.Duration
	// Clock measures leases; nil means the system clock. Tests give the breakers' clock.
	Clock breaker.Clock
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Server serves the local decision API over any number of listeners.
type Server struct {
	reg         *registry.Registry
	published   func(string) (breakerconfig.Config, bool)
	ready       func() bool
	maxBreakers int
	// The connections' limits (conns.go, wire.go).
	maxConns       int
	requestTimeout time.Duration
	idleTimeout    time.Duration
	open           atomic.Int64 // connections served, by hand or by net/http
	refusing       atomic.Int64 // connections over maxConns being answered
	log            *slog.Logger
	permits        *permits
	now            func() time.Time

	// http serves the connections serveConn hands over (wire.go).
	http      *http.Server
	handoff   *handoff
	handedOff atomic.Int64 // connections given to net/http
	httpDate  atomic.Pointer[httpDate]

	mu        sync.Mutex
	listeners map[net.Listener]struct{} // guarded by mu
	conns     map[*wireConn]struct{}    // guarded by mu

	namesMu sync.RWMutex
	names   map[string]*breakerEntry // guarded by namesMu; see entry
	closing atomic.Bool              // set (under mu) by Shutdown

	connSerial atomic.Uint64 // numbers the connections whose process is unknown (client)
	warnings   warnings

	stop     context.CancelFunc
	stopped  chan struct{}
	shutOnce sync.Once
}

// New returns a Server for o and starts dropping lapsed permits; [Server.Shutdown]
// stops it.
func New(o Options) (*Server, error) {
	if o.Registry == nil {
		return nil, errors.New("fuseboxd: Options.Registry is nil")
	}
	s := &Server{
		reg:         o.Registry,
		published:   o.Published,
		ready:       o.Ready,
		maxBreakers: positiveOr(o.MaxBreakers, DefaultMaxBreakers),
		maxConns:    positiveOr(o.MaxConnections, DefaultMaxConnections),
		log:         o.Logger,
		stopped:     make(chan struct{}),
		handoff:     newHandoff(),
		listeners:   map[net.Listener]struct{}{},
		conns:       map[*wireConn]struct{}{},
		names:       map[string]*breakerEntry{},

		requestTimeout: positiveOr(o.RequestTimeout, DefaultRequestTimeout),
		idleTimeout:    positiveOr(o.IdleTimeout, DefaultIdleTimeout),
	}
	if s.published == nil {
		s.published = func(string) (breakerconfig.Config, bool) { return breakerconfig.Config{}, false }
	}
	if s.ready == nil {
		s.ready = func() bool { return true }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	interval := positiveOr(o.ExpiryInterval, time.Second)
	s.permits = newPermits(positiveOr(o.MaxPermits, DefaultMaxPermits), positiveOr(o.MaxPermitsPerClient, DefaultMaxPermitsPerClient))
	s.now = time.Now
	if o.Clock != nil {
		s.now = o.Clock.Now
	}
	s.http = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: s.requestTimeout,
		ReadTimeout:       s.requestTimeout,
		// Counted from the end of the header: the body's read, the wait of an acquire for
		// a slot of a concurrency limit (MaxLimitWait), then the answer's write.
		WriteTimeout:   2*s.requestTimeout + MaxLimitWait,
		IdleTimeout:    s.idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ConnContext:    s.connContext,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	go func() { _ = s.http.Serve(s.handoff) }()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() {
		defer close(s.stopped)
		s.permits.runExpiry(ctx, interval, s.now)
	}()
	return s, nil
}

// Serve accepts connections on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ln.Close()
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		switch {
		case err == nil:
			backoff = 0
			s.admit(conn)
		case s.closing.Load():
			return nil
		case errors.Is(err, net.ErrClosed):
			return err
		default:
			// Out of file descriptors, or a connection aborted before it was
			// accepted: wait, as net/http does, rather than end the service.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Debug("Accepting a connection failed; retrying", "error", err, "in", backoff)
			time.Sleep(backoff)
		}
	}
}

func positiveOr[T int | time.Duration](v, otherwise T) T {
	if v > 0 {
		return v
	}
	return otherwise
}

// track adds c to the connections Shutdown waits for, or removes it; adding reports
// false once Shutdown has begun.
func (s *Server) track(c *wireConn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Outstanding is how many permits are waiting for their outcome.
func (s *Server) Outstanding() int { return s.permits.len() }

// Shutdown stops accepting requests, waits (within ctx) for those in progress, and
// settles every outstanding permit as ignored: the calls they admitted count as neither
// success nor failure, and a probe's slot is freed at once.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutOnce.Do(func() {
		err = errors.Join(s.shutdownWire(ctx), s.http.Shutdown(ctx))
		_ = s.handoff.Close()
		n := s.permits.close()
		s.stop()
		<-s.stopped
		if n > 0 {
			s.log.Info("Settled outstanding permits as ignored", "permits", n)
		}
	})
	return err
}

// shutdownWire closes the listeners and the idle connections, and waits (within ctx)
// for the connections answering a request, which close once they have answered.
func (s *Server) shutdownWire(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		_ = ln.Close()
	}
	s.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		for c := range s.conns {
			if c.state.CompareAndSwap(0, 2) {
				_ = c.conn.Close()
			}
		}
		left := len(s.conns)
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ListenLoopback listens on addr, which must be a loopback IP address and a port
// ("127.0.0.1:8089", "[::1]:8089"): the API has no authentication, so it must never be
// reachable from outside the pod.
func ListenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("fuseboxd: --listen %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("fuseboxd: --listen %q: only a loopback IP address is allowed (such as 127.0.0.1)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fuseboxd: %w", err)
	}
	return ln, nil
}
