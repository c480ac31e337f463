package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var wantLabels = []string{
	"org.opencontainers.image.source",
	"org.opencontainers.image.revision",
	"org.opencontainers.image.version",
	"org.opencontainers.image.licenses",
}

// One test, as `make image` runs it: build, write, push to a registry, pull
// back by digest, inspect, run; then build again from scratch and compare.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: cross-compiles the manager twice for two platforms")
	}
	opts := testOptions(t)
	ctx := context.Background()

	idx, err := Build(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}

	// The pushed index, pulled back by digest from an in-process registry.
	srv := httptest.NewServer(registry.New(registry.Logger(discardLogger())))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ref, err := name.ParseReference(u.Host + "/fusebox-dev/fusebox:test")
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := Push(ctx, idx, ref)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if pushed != digest {
		t.Errorf("push reported %s, built %s", pushed, digest)
	}
	byDigest := ref.Context().Digest(digest.String())
	pulled, err := remote.Index(byDigest)
	if err != nil {
		t.Fatalf("pull %s: %v", byDigest, err)
	}
	checkIndex(t, pulled, opts)

	// The OCI layout and the docker tarball name the same index.
	dir := filepath.Join(t.TempDir(), "image")
	if err := WriteLayout(dir, idx, ref); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != digest || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Errorf("index.json lists %+v, want the index %s tagged test", tm.Manifests, digest)
	}
	archive := filepath.Join(t.TempDir(), "image.tar")
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if err := WriteArchive(archive, dir, idx, host, ref, opts.Created); err != nil {
		t.Fatal(err)
	}
	// tarball.ImageFromPath reads the archive the way `docker load` does:
	// through manifest.json.
	tag, _ := name.NewTag(ref.Name())
	loaded, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatalf("read the archive as docker load would: %v", err)
	}
	hostImg, err := imageFor(idx, host)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustConfigName(t, loaded), mustConfigName(t, hostImg); a != b {
		t.Errorf("archive's manifest.json loads config %s, the index has %s for %s", a, b, platformString(host))
	}

	// Build again, from a fresh compile: same digest, same archive bytes.
	again, err := Build(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	digest2, err := again.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if digest2 != digest {
		t.Fatalf("two builds of the same sources: %s then %s", digest, digest2)
	}
	dir2 := filepath.Join(t.TempDir(), "image")
	archive2 := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteLayout(dir2, again, ref); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(archive2, dir2, again, host, ref, opts.Created); err != nil {
		t.Fatal(err)
	}
	if a, b := fileSum(t, archive), fileSum(t, archive2); a != b {
		t.Errorf("two archives of the same build differ: %x, %x", a, b)
	}
	t.Logf("index %s, reproduced", digest)
	for _, p := range opts.Platforms {
		img, _ := imageFor(idx, p)
		size := int64(0)
		layers, _ := img.Layers()
		for _, l := range layers {
			s, _ := l.Size()
			size += s
		}
		t.Logf("  %s: %d bytes compressed", platformString(p), size)
	}
}

func checkIndex(t *testing.T, idx v1.ImageIndex, opts Options) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index media type %s, want an OCI image index", m.MediaType)
	}
	got := map[string]bool{}
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Errorf("manifest %s has no platform", d.Digest)
			continue
		}
		got[platformString(*d.Platform)] = true
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		p := platformString(*d.Platform)
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", p, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", p, cf.Config.User)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != "/manager" {
			t.Errorf("%s: entrypoint %q, want /manager", p, cf.Config.Entrypoint)
		}
		for _, l := range wantLabels {
			if cf.Config.Labels[l] == "" {
				t.Errorf("%s: no label %s (labels %v)", p, l, cf.Config.Labels)
			}
		}
		if !cf.Created.Equal(opts.Created) {
			t.Errorf("%s: created %s, want the source date %s", p, cf.Created, opts.Created)
		}
		files := layerFiles(t, img)
		for _, f := range []string{"manager", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "tmp/"} {
			if _, ok := files[f]; !ok {
				t.Errorf("%s: no /%s in the image", p, f)
			}
		}
		if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no nonroot 65532:\n%s", p, files["etc/passwd"])
		}
		if !bytes.Contains(files["etc/ssl/certs/ca-certificates.crt"], []byte("BEGIN CERTIFICATE")) {
			t.Errorf("%s: the CA bundle holds no certificate", p)
		}
		if d.Platform.Architecture == runtime.GOARCH && d.Platform.OS == runtime.GOOS {
			runHelp(t, files["manager"])
		}
	}
	for _, p := range opts.Platforms {
		if !got[platformString(p)] {
			t.Errorf("the index has no %s image (has %v)", platformString(p), got)
		}
	}
	if len(m.Manifests) != len(opts.Platforms) {
		t.Errorf("the index lists %d images, want %d", len(m.Manifests), len(opts.Platforms))
	}
}

// runHelp runs the image's /manager on this machine: a static binary that
// starts and knows its flags.
func runHelp(t *testing.T, manager []byte) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager")
	if err := os.WriteFile(bin, manager, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Errorf("/manager --help: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "-metrics-secure") || !strings.Contains(string(out), "-leader-elect") {
		t.Errorf("/manager --help does not list the manager's flags:\n%s", out)
	}
}

func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
		_ = rc.Close()
	}
	return files
}

func testOptions(t *testing.T) Options {
	t.Helper()
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (.ci/run installs Debian's ca-certificates)", ca, err)
		}
		t.Skipf("SKIPPED: no CA bundle at %s; install Debian's ca-certificates", ca)
	}
	// The labels a release would carry, but fixed: the test is about the
	// build, not about this checkout's state.
	return Options{
		RepoRoot:       filepath.Join("..", ".."),
		Package:        "./cmd/manager",
		Entrypoint:     "/manager",
		Platforms:      []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}},
		CACertificates: ca,
		Created:        time.Unix(1796000000, 0).UTC(),
		Labels: map[string]string{
			"org.opencontainers.image.source":   "https://github.com/fusebox-dev/fusebox",
			"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
			"org.opencontainers.image.version":  "v0.0.0-test",
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
}

func mustConfigName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
