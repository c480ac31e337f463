package fuseboxd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// One daemon per socket. A second daemon that took the path of a live one would leave
// the first running unreachable, and the pod's clients failing open; so the path belongs
// to the daemon holding the lock on PATH.lock (flock, released by the kernel however the
// daemon ends), and a socket is replaced only once nothing answers on it.

// InUseError is ListenUnix's refusal of a path another daemon serves.
type InUseError struct {
	Path string
	PID  int // of the daemon serving it, 0 if unknown
}

func (e *InUseError) Error() string {
	who := "another fuseboxd"
	if e.PID > 0 {
		who += " (pid " + strconv.Itoa(e.PID) + ")"
	}
	return fmt.Sprintf("%s is serving %s; stop it first, or give this one another --socket", who, e.Path)
}

// ListenUnix listens on the Unix socket path, refusing (with an *InUseError) a path
// another daemon serves, and replacing a socket a daemon that is gone left behind (but
// no other kind of file). The socket is writable by every user: the pod's containers may
// run as different users, and only they mount its directory. Closing the listener
// removes the socket, if it is still this one's, and then the lock.
func ListenUnix(path string) (net.Listener, error) {
	lock, err := lockSocket(path)
	if err != nil {
		return nil, err
	}
	ln, bound, err := listenUnixLocked(path)
	if err != nil {
		lock.release()
		return nil, err
	}
	return &socketListener{UnixListener: ln, path: path, bound: bound, lock: lock}, nil
}

// listenUnixLocked binds path, the lock held, and returns the socket file bound.
func listenUnixLocked(path string) (*net.UnixListener, os.FileInfo, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, nil, fmt.Errorf("fuseboxd: %s exists and is not a socket", path)
		}
		// A daemon that takes no lock (an older one) may still serve it.
		if pid, live, err := answering(path); err != nil {
			return nil, nil, err
		} else if live {
			return nil, nil, &InUseError{Path: path, PID: pid}
		}
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("fuseboxd: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("fuseboxd: %w", err)
	}
	// Close removes the socket itself, and only if the path is still this socket.
	ln.SetUnlinkOnClose(false)
	bound, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o666)
	}
	if err != nil {
		_ = ln.Close()
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("fuseboxd: %w", err)
	}
	return ln, bound, nil
}

// answering reports whether a process accepts connections on the socket at path, and
// its pid when the kernel names it (SO_PEERCRED of the connection). Only a refused
// connection means nobody listens: a socket whose listener is too busy to take one is
// not stale, and is not replaced.
func answering(path string) (int, bool, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		defer conn.Close()
		return int(peerProcess(conn)), true, nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("fuseboxd: %s: cannot tell whether a daemon serves it: %w", path, err)
}

// socketListener is the daemon's socket and the lock that makes the path its own.
type socketListener struct {
	*net.UnixListener
	path  string
	bound os.FileInfo // the socket file as bound, to remove only that one
	lock  *socketLock
	once  sync.Once
	err   error
}

var _ net.Listener = (*socketListener)(nil)

func (l *socketListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if now, err := os.Lstat(l.path); err == nil && os.SameFile(now, l.bound) {
			_ = os.Remove(l.path)
		}
		// Released last: the next daemon finds the path free of this one's socket.
		l.lock.release()
	})
	return l.err
}
