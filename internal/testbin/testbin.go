package testbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// The import paths of the commands tests run as processes.
const (
	Fuseboxd     = "github.com/fusebox-dev/fusebox/cmd/fuseboxd"
	Manager      = "github.com/fusebox-dev/fusebox/cmd/manager"
	LocalCluster = "github.com/fusebox-dev/fusebox/hack/localcluster"
)

// Path returns the path of the executable of the main package pkg (an import path of the
// workspace), building it if the build cache does not hold it yet. The file is the build
// cache's: run it, do not change or remove it.
//
// On a cache miss `go run` links into a temporary directory, prints that path and removes
// it as it exits, having stored the executable in the cache; asked again, it prints the
// cached file's path. So a path that is gone is asked for once more.
func Path(pkg string) (string, error) {
	for range 2 {
		path, err := goRunPath(pkg)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("go run -exec echo %s: the executable it names is gone twice: does the build cache (go env GOCACHE) keep executables?", pkg)
}

// goRunPath asks `go run` where the executable of pkg is.
func goRunPath(pkg string) (string, error) {
	// -exec runs "echo EXECUTABLE" instead of the executable: what echo prints is its path.
	cmd := exec.Command("go", "run", "-exec", "echo", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go run -exec echo %s: %w\n%s", pkg, err, stderr.String())
	}
	path := strings.TrimSpace(string(out))
	if path == "" || strings.ContainsAny(path, "\n") {
		return "", fmt.Errorf("go run -exec echo %s printed %q, want one path", pkg, out)
	}
	return path, nil
}
