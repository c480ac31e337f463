package fleet

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The manager as a container runs it (FLEET_MANAGER_MEMORY): in a memory cgroup of its own
// with that limit, as the kubelet puts a container with resources.limits.memory, so that
// what the manager reads of its limit (the Go runtime's soft limit, cmd/manager) and
// what the kernel does past it are a pod's. The cgroup is made under the harness's own,
// on cgroup v2 or on v1's memory hierarchy, whichever the machine has.

// memoryCgroup is a cgroup made for one process, with a memory limit.
type memoryCgroup struct {
	dir string
}

// newMemoryCgroup makes a cgroup named name under this process's memory cgroup, limited
// to limit bytes.
func newMemoryCgroup(name string, limit int64) (*memoryCgroup, error) {
	parent, file, err := ownMemoryCgroup()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("make the manager's memory cgroup (FLEET_MANAGER_MEMORY needs root): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("limit the manager's memory cgroup: %w", err)
	}
	return &memoryCgroup{dir: dir}, nil
}

// wrap returns the command line that runs bin with args inside the cgroup: a shell that
// moves itself in and then becomes bin, so the manager's first instruction already runs
// under the limit and keeps the shell's pid.
func (c *memoryCgroup) wrap(bin string, args []string) (string, []string) {
	script := fmt.Sprintf(`echo $$ > %q && exec "$0" "$@"`, filepath.Join(c.dir, "cgroup.procs"))
	return "/bin/sh", append([]string{"-c", script, bin}, args...)
}

// remove deletes the cgroup, which its process has left by ending.
func (c *memoryCgroup) remove() error { return os.Remove(c.dir) }

// ownMemoryCgroup is the directory of this process's memory cgroup and the name of its
// limit file there: memory.max on cgroup v2, memory.limit_in_bytes on v1.
func ownMemoryCgroup() (dir, limitFile string, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var v1, v2 string
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if v1 != "" {
		if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
			return filepath.Join("/sys/fs/cgroup/memory", v1), "memory.limit_in_bytes", nil
		}
	}
	if v2 != "" {
		if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(b)+" ", " memory ") {
			return filepath.Join("/sys/fs/cgroup", v2), "memory.max", nil
		}
	}
	return "", "", errors.New("this machine has no cgroup memory controller mounted at /sys/fs/cgroup")
}
