package main

import (
	"net"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// listeners opens the Unix socket and, if asked, the loopback address.
func listeners(socket, loopback string) ([]net.Listener, error) {
	ln, err := fuseboxd.ListenUnix(socket)
	if err != nil {
		return nil, err
	}
	if loopback == "" {
		return []net.Listener{ln}, nil
	}
	tl, err := fuseboxd.ListenLoopback(loopback)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return []net.Listener{ln, tl}, nil
}
