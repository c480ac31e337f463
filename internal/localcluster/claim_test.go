package localcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One run per directory: a second claim is refused with who holds it and the kubeconfig
// that reaches it, and once the first lets go the directory can be claimed again.
func TestClaimDirOneRunPerDirectory(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	first, err := ClaimDir(dir, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	_, err = ClaimDir(dir, kubeconfig)
	var running *Running
	if !errors.As(err, &running) {
		t.Fatalf("second claim: %v, want *Running", err)
	}
	if running.PID != os.Getpid() || running.Kubeconfig != kubeconfig || running.Since.IsZero() {
		t.Errorf("second claim sees %+v, want pid %d, kubeconfig %s and a start time", running, os.Getpid(), kubeconfig)
	}
	msg := err.Error()
	for _, want := range []string{"Fusebox already runs here", "export KUBECONFIG=" + kubeconfig, "Ctrl-C"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%q is more than one line", msg)
	}
	if _, err := os.Stat(kubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a claim wrote the kubeconfig: %v", err)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := ClaimDir(dir, kubeconfig)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	_ = again.Release()
}
