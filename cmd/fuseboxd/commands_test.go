package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBinary runs the built fuseboxd with args and, of the environment, nothing that names
// a node or a pod, and returns what it wrote to stderr and whether it succeeded.
func runBinary(t *testing.T, args ...string) (stderr string, ok bool) {
	t.Helper()
	cmd := exec.Command(fuseboxdBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NODE_NAME=") && !strings.HasPrefix(kv, "POD_") && !strings.HasPrefix(kv, "FUSEBOX_") && !strings.HasPrefix(kv, "KUBERNETES_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	return errb.String(), err == nil
}

// TestCommands (issue 43): `fuseboxd serve`, `fuseboxd node` and `fuseboxd probe` run what
// they name, with no word of deprecation; the command lines of the release before them
// (no command, --node, --probe) run the same, after one line on stderr that says what to
// run instead. Each is stopped before it serves, at a flag or an environment it refuses,
// which shows which program read its command line.
func TestCommands(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.sock")
	badLimit := []string{"--socket", filepath.Join(t.TempDir(), "s"), "--config-dir", t.TempDir(), "--max-connections", "0"}
	for _, tc := range []struct {
		name       string
		args       []string
		deprecated string // "" for none
		refusal    string // what the program that ran says
	}{
		{"serve", append([]string{"serve"}, badLimit...), "", "--max-connections 0: must be at least 1"},
		{"node", []string{"node", "--listen", "127.0.0.1:0"}, "", "NODE_NAME is not set"},
		{"probe", []string{"probe", "--socket", missing}, "", "probe " + missing},
		{"no command", badLimit, "run `fuseboxd serve` with the same flags", "--max-connections 0: must be at least 1"},
		{"--node", []string{"--node", "--node-listen", "127.0.0.1:0"}, "run `fuseboxd node` with the same flags", "NODE_NAME is not set"},
		{"--probe", []string{"--probe", "--socket", missing}, "run `fuseboxd probe` with the same flags", "probe " + missing},
		{"an unknown command", []string{"start"}, "", `unknown command "start"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, ok := runBinary(t, tc.args...)
			if ok || !strings.Contains(stderr, tc.refusal) {
				t.Errorf("fuseboxd %q: succeeded %v, stderr %q; want a failure saying %q", tc.args, ok, stderr, tc.refusal)
			}
			first, _, _ := strings.Cut(stderr, "\n")
			switch {
			case tc.deprecated == "" && strings.Contains(stderr, "deprecated"):
				t.Errorf("fuseboxd %q: stderr %q says deprecated", tc.args, stderr)
			case tc.deprecated != "" && (!strings.Contains(first, "deprecated") || !strings.Contains(first, tc.deprecated)):
				t.Errorf("fuseboxd %q: first line %q, want one that says deprecated and %q", tc.args, first, tc.deprecated)
			}
		})
	}
	if stderr, ok := runBinary(t, "help"); !ok || !strings.Contains(stderr, "serve") || !strings.Contains(stderr, "node") {
		t.Errorf("fuseboxd help: %v %q, want the commands", ok, stderr)
	}
}
