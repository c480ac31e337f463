package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The clients of other languages (clients/*) are tested by their own runners against
// this package's built fuseboxd, which each suite starts as often as it needs (FUSEBOXD
// names the binary): real daemons for the state machine and the hung sidecar, a lying
// socket server of the suite's own for the malformed answers. Each suite's daemons are on
// sockets of its own temporary directory, so the suites run in parallel: most of their
// time is spent starting interpreters and daemons, not on the CPU.

// skipWithout skips the test saying what to install, or fails it under CI, where
// .ci/run installs it.
func skipWithout(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// runSuite runs a client's test runner in dir with FUSEBOXD set, logging its output.
func runSuite(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("../../clients", dir))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "FUSEBOXD="+fuseboxdBin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(name), err)
	}
}

// findPython is the first python3 that is at least 3.11 (and imports pytest, if asked):
// Debian's python3-pytest installs for /usr/bin/python3, which need not be the python3
// first on PATH.
func findPython(withPytest bool) (string, error) {
	probe, want := "import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)", "python3 ≥ 3.11"
	if withPytest {
		probe, want = "import sys, pytest; sys.exit(0 if sys.version_info >= (3, 11) else 1)", "python3 ≥ 3.11 with pytest"
	}
	var tried []string
	for _, candidate := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(candidate)
		if err != nil {
			continue
		}
		out, err := exec.Command(p, "-c", probe).CombinedOutput()
		if err == nil {
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v: %s)", p, err, strings.TrimSpace(lastLine(string(out)))))
	}
	return "", fmt.Errorf("no %s among %v: apt-get install python3-pytest", want, tried)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestPythonClient runs clients/python's pytest suite.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	python, err := findPython(true)
	if err != nil {
		skipWithout(t, err.Error())
	}
	runSuite(t, "python", python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
}

// TestNodeClient runs clients/node's node:test suite. The files are named, not globbed,
// so that the command means the same to Node 18's runner as to later ones.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		skipWithout(t, "node not found: apt-get install nodejs")
	}
	files, err := filepath.Glob("../../clients/node/tests/*.test.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in clients/node/tests: %v", err)
	}
	args := []string{"--test"}
	for _, f := range files {
		args = append(args, filepath.Join("tests", filepath.Base(f)))
	}
	runSuite(t, "node", node, args...)
}
