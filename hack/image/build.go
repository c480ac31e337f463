package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user, as distroless's "nonroot": config/manager runs the pod
// with runAsNonRoot, which needs a numeric user in the image.
const (
	nonrootUID = 65532
	userSpec   = "65532:65532"
)

// Options say what to build. Everything that reaches the image is here, so
// two builds with equal Options from the same sources give the same digest.
type Options struct {
	// RepoRoot is the operator module's directory (the repository root).
	RepoRoot string
	// Package is the main package to put in the image, relative to RepoRoot:
	// the manager, or the example application or pause program of hack/cluster.sh.
	Package string
	// Entrypoint is where the binary goes in the image, and what it runs.
	Entrypoint string
	// Platforms are the image index's entries, each cross-compiled.
	Platforms []v1.Platform
	// CACertificates is a PEM bundle copied to /etc/ssl/certs/ca-certificates.crt.
	CACertificates string
	// Created is every timestamp in the image: config, history, file times.
	Created time.Time
	// Labels go into each image's config and onto the index as annotations.
	Labels map[string]string
}

// Build cross-compiles the package for every platform and assembles the
// multi-platform OCI image index.
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	ca, err := os.ReadFile(o.CACertificates)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w (install Debian's ca-certificates, or pass -ca-certificates)", err)
	}
	work, err := os.MkdirTemp("", "fusebox-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range o.Platforms {
		bin := filepath.Join(work, path.Base(o.Entrypoint)+"-"+p.OS+"-"+p.Architecture)
		if err := goBuild(ctx, o.RepoRoot, o.Package, p, bin); err != nil {
			return nil, err
		}
		img, err := platformImage(o, p, bin, ca)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
		}
		platform := p
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, o.Labels).(v1.ImageIndex), nil
}

// goBuild compiles a static binary of pkg for p. Reproducible: no cgo, paths
// trimmed, no VCS stamp (the revision is a label instead), an empty build ID,
// and the microarchitecture levels pinned so the builder's environment does
// not leak in.
func goBuild(ctx context.Context, root, pkg string, p v1.Platform, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=",
		// The package builds in the repository's workspace (go.work), whatever this
		// program itself was run with.
		"GOWORK=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, p.OS, p.Architecture, err, stderr.String())
	}
	return nil
}

func platformImage(o Options, p v1.Platform, bin string, ca []byte) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootFS(o.Created, o.Entrypoint, data, ca)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Config = v1.Config{
		User:       userSpec,
		Entrypoint: []string{o.Entrypoint},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		Labels: o.Labels,
	}
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "hack/image: " + o.Entrypoint + ", /etc/passwd (nonroot 65532), CA certificates",
			Comment:   "built without a container engine by github.com/fusebox-dev/fusebox/hack/image",
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, created)
}

// rootFS is the image's only layer: just enough for a static Go binary that
// talks TLS and runs as a non-root user. Entries are sorted and every time,
// owner and mode is fixed, so equal inputs give equal bytes.
func rootFS(mtime time.Time, entrypoint string, bin, ca []byte) ([]byte, error) {
	type entry struct {
		mode  int64
		uid   int
		data  []byte
		isDir bool
	}
	file := func(mode int64, data []byte) entry { return entry{mode: mode, data: data} }
	dir := func(mode int64, uid int) entry { return entry{mode: mode, uid: uid, isDir: true} }
	entries := map[string]entry{
		"etc/":                              dir(0o755, 0),
		"etc/group":                         file(0o644, []byte("root:x:0:\nnonroot:x:65532:\n")),
		"etc/nsswitch.conf":                 file(0o644, []byte("hosts: files dns\n")),
		"etc/passwd":                        file(0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")),
		"etc/ssl/":                          dir(0o755, 0),
		"etc/ssl/certs/":                    dir(0o755, 0),
		"etc/ssl/certs/ca-certificates.crt": file(0o644, ca),
		"home/":                             dir(0o755, 0),
		"home/nonroot/":                     dir(0o700, nonrootUID),
		strings.TrimPrefix(entrypoint, "/"): file(0o755, bin),
		"tmp/":                              dir(0o1777, 0),
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{
			Name:    n,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.isDir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// platformString is "os/arch[/variant]", as docker and crane spell it.
func platformString(p v1.Platform) string {
	return path.Join(p.OS, p.Architecture, p.Variant)
}

// parsePlatforms reads "linux/amd64,linux/arm64".
func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	return out, nil
}
