package fuseboxd_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// TestListenUnixOnePerPath: a socket path is one daemon's. A second ListenUnix on it is
// refused with the holder's pid, so is one on a socket some process without the lock
// answers on; a socket nobody answers on is replaced; closing removes the socket and
// the lock.
func TestListenUnixOnePerPath(t *testing.T) {
	base, err := os.MkdirTemp("", "fbd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	path := filepath.Join(base, "s.sock")

	first, err := fuseboxd.ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	var inUse *fuseboxd.InUseError
	if _, err := fuseboxd.ListenUnix(path); !errors.As(err, &inUse) || inUse.PID != os.Getpid() || inUse.Path != path {
		t.Fatalf("a second ListenUnix on a held path: %v, want InUseError naming pid %d", err, os.Getpid())
	}
	if conn, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the first socket after the refusal: %v", err)
	} else {
		conn.Close()
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".lock"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after Close: %v, want it removed", p, err)
		}
	}

	// A process that takes no lock, listening on the path.
	other, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fuseboxd.ListenUnix(path); !errors.As(err, &inUse) {
		t.Fatalf("ListenUnix on a socket another process answers on: %v, want InUseError", err)
	}
	// Gone without removing its socket: the file is stale, and replaced.
	other.(*net.UnixListener).SetUnlinkOnClose(false)
	other.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket: %v", err)
	}
	again, err := fuseboxd.ListenUnix(path)
	if err != nil {
		t.Fatalf("ListenUnix on a stale socket: %v", err)
	}
	again.Close()

	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fuseboxd.ListenUnix(path); err == nil {
		t.Fatal("ListenUnix replaced a file that is not a socket")
	}
}
