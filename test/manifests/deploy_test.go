package manifests

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// `make deploy` (kustomize) sets both images: the manager's (IMG), and fuseboxd's
// (FUSEBOXD_IMG) for the node agent's DaemonSet and for the sidecar the pod webhook
// injects, whose only way in is the manager's --fuseboxd-image. Both containers pull only
// what is not on the node, so a locally loaded image runs whatever its tag. And config/
// is left as committed (issue 35, items 4 and 10: it used to run `kustomize edit set
// image` in config/ itself).
func TestMakeDeploySetsBothImages(t *testing.T) {
	kustomize := kustomizeBin(t)
	makeBin, err := exec.LookPath("make")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED: no make on PATH: %v", err)
	}
	const (
		manager  = "registry.example.com/team/fusebox:v1.2.3"
		fuseboxd = "registry.example.com/team/fuseboxd:v1.2.3-sidecar"
	)
	before := treeHash(t, "../../config")
	bin := t.TempDir()
	cmd := exec.Command(makeBin, "-s", "-C", "../..", "deploy-manifests",
		"IMG="+manager, "FUSEBOXD_IMG="+fuseboxd, "LOCALBIN="+bin, "KUSTOMIZE="+kustomize)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deploy-manifests: %v\n%s", err, out)
	}
	if after := treeHash(t, "../../config"); after != before {
		t.Error("make deploy-manifests changed config/")
	}
	rendered, err := os.ReadFile(filepath.Join(bin, "deploy", "fusebox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, rendered)

	var dep appsv1.Deployment
	find(t, objs, "Deployment", "fusebox-controller-manager", &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Name != "manager" || c.Image != manager || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %s: image %q, pull policy %q; want manager, %s, IfNotPresent", c.Name, c.Image, c.ImagePullPolicy, manager)
	}
	if !slices.Contains(c.Args, "--fuseboxd-image="+fuseboxd) {
		t.Errorf("manager args %q: want --fuseboxd-image=%s, the sidecar the webhook injects", c.Args, fuseboxd)
	}
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "fusebox-node", &ds)
	a := ds.Spec.Template.Spec.Containers[0]
	if a.Image != fuseboxd || a.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("node agent: image %q, pull policy %q; want %s, IfNotPresent", a.Image, a.ImagePullPolicy, fuseboxd)
	}
}

// treeHash is a digest of every file's path and contents under dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}
