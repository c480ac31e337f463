package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// limits are the daemon's caps and timeouts as flags (docs/fuseboxd.md, "Limits"). The
// defaults are far from what a healthy client of the pod meets; the flags are for a pod
// whose workers hold more (an event loop with thousands of calls in flight).
type limits struct {
	maxConnections, maxPermitsPerClient int
	requestTimeout, idleTimeout         time.Duration
}

func (l *limits) register(fs *flag.FlagSet) {
	fs.IntVar(&l.maxConnections, "max-connections", fuseboxd.DefaultMaxConnections,
		"connections served at once; past it a connection gets one answer (an acquire: 429 connections_exhausted) and is closed")
	fs.IntVar(&l.maxPermitsPerClient, "max-permits-per-client", fuseboxd.DefaultMaxPermitsPerClient,
		"permits one client (a process on the socket, else a connection) holds at once; past it its acquires get 429 client_permits_exhausted")
	fs.DurationVar(&l.requestTimeout, "request-timeout", fuseboxd.DefaultRequestTimeout,
		"how long a request may take to arrive, header and body, and its answer to be written")
	fs.DurationVar(&l.idleTimeout, "idle-timeout", fuseboxd.DefaultIdleTimeout,
		"close a connection no request has begun on for this long")
}

// check refuses a value the daemon cannot run with, naming the flag.
func (l *limits) check() error {
	for name, v := range map[string]int{"max-connections": l.maxConnections, "max-permits-per-client": l.maxPermitsPerClient} {
		if v <= 0 {
			return fmt.Errorf("--%s %d: must be at least 1", name, v)
		}
	}
	for name, v := range map[string]time.Duration{"request-timeout": l.requestTimeout, "idle-timeout": l.idleTimeout} {
		if v <= 0 {
			return fmt.Errorf("--%s %v: must be a positive duration", name, v)
		}
	}
	return nil
}

// apply returns o with the limits set.
func (l *limits) apply(o fuseboxd.Options) fuseboxd.Options {
	o.MaxConnections, o.MaxPermitsPerClient = l.maxConnections, l.maxPermitsPerClient
	o.RequestTimeout, o.IdleTimeout = l.requestTimeout, l.idleTimeout
	return o
}
