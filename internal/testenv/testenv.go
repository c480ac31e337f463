// Package testenv starts the envtest control plane (a real kube-apiserver and
// etcd, built from source by hack/envtest.sh) for Fusebox's test suites.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubernetesVersion is the version of the control plane hack/envtest.sh builds;
// it matches k8s.io/api in go.mod.
const KubernetesVersion = "1.37.2"

// AssetsDir returns the directory holding kube-apiserver and etcd:
// KUBEBUILDER_ASSETS when set (make test sets it), else the newest directory
// hack/envtest.sh installed into for this version (it names them after the version and a
// digest of the modules they were built from).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		data = filepath.Join(home, ".local", "share")
	}
	pattern := filepath.Join(data, "kubebuilder-envtest", "k8s", fmt.Sprintf("%s-%s-%s-*", KubernetesVersion, runtime.GOOS, runtime.GOARCH))
	dirs, _ := filepath.Glob(pattern)
	var newest string
	var at time.Time
	for _, dir := range dirs {
		if fi, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil && fi.ModTime().After(at) {
			newest, at = dir, fi.ModTime()
		}
	}
	if newest == "" {
		return "", fmt.Errorf("no envtest control plane in %s: run `make envtest` (or hack/envtest.sh) first, or set KUBEBUILDER_ASSETS", pattern)
	}
	return newest, nil
}

// New returns an envtest environment with Fusebox's CRDs, which must exist.
// repoRoot is the path from the calling package to the repository root.
func New(repoRoot string) (*envtest.Environment, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: dir,
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		// envtest gives kube-apiserver and etcd 20 s each to come up, which a machine
		// shared with other builds does not always give them (seen at a load average of
		// 22 on two cores); starting returns as soon as they answer.
		env.ControlPlaneStartTimeout = startTimeout
	}
	return env, nil
}

// Start starts env's control plane and returns its config. When starting fails after
// the processes came up (the CRDs did not install: a test binary run from another
// directory finds no config/crd), it stops them, which envtest leaves running: a suite
// that stops only what started would leave a kube-apiserver and an etcd behind each run.
func Start(env *envtest.Environment) (*rest.Config, error) {
	cfg, err := env.Start()
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return cfg, nil
}

// startTimeout is how long each process of the control plane may take to start.
const startTimeout = 2 * time.Minute
