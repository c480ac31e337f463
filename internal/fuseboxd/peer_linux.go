package fuseboxd

import (
	"net"
	"syscall"
)

// peerProcess is the pid of the process that connected conn, if conn is a Unix socket
// and that process is in this one's PID namespace; else 0.
func peerProcess(conn net.Conn) int32 {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = cred.Pid
		}
	})
	return pid
}
