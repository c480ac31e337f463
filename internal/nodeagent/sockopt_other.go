//go:build !linux

package nodeagent

import (
	"net"
	"time"
)

// setUserTimeout does nothing off Linux: TCP's own retransmission timeout applies, and the
// stream's write deadline once buffers fill.
func setUserTimeout(*net.TCPConn, time.Duration) {}
