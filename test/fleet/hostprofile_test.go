package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// profileHost writes a CPU profile of this node host's next 20 s to the FLEET_PROFILE
// directory (which the harness's environment passes on) as name-host-N.pprof, N the
// host's name: what its agents and pods spend on an incident. It does nothing for an
// empty name, in the harness's own process, or while a profile runs.
func profileHost(name string) {
	host, dir := os.Getenv(nodeHostEnv), os.Getenv("FLEET_PROFILE")
	if name == "" || host == "" || dir == "" {
		return
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-host-%s.pprof", name, host))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet node host %s: profile: %v\n", host, err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "fleet node host %s: profile: %v\n", host, err)
		_ = f.Close()
		return
	}
	time.AfterFunc(20*time.Second, func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	})
}
