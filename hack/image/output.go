package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteLayout replaces dir with an OCI image layout whose index.json names
// the multi-platform index idx, tagged ref (the annotation containerd, skopeo
// and `docker load` read the name from).
func WriteLayout(dir string, idx v1.ImageIndex, ref name.Reference) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	top := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	p, err := layout.Write(dir, top)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref.Name(),
		"org.opencontainers.image.ref.name": ref.Identifier(),
	}))
}

// dockerManifestEntry is one image of the manifest.json that `docker load`
// has read since before it understood OCI layouts.
type dockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes the OCI layout in dir as one tar file at out, adding
// a manifest.json for the image of platform p, so both an OCI-aware
// `docker load` (all platforms) and an older one (p only) accept it.
// Entries are sorted, with fixed times and owners: same layout, same bytes.
func WriteArchive(out, dir string, idx v1.ImageIndex, p v1.Platform, ref name.Reference, mtime time.Time) error {
	img, err := imageFor(idx, p)
	if err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	entry := dockerManifestEntry{Config: blobPath(cfgName), RepoTags: []string{ref.Name()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		entry.Layers = append(entry.Layers, blobPath(d))
	}
	manifest, err := json.Marshal([]dockerManifestEntry{entry})
	if err != nil {
		return err
	}

	var files []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	}); err != nil {
		return err
	}
	files = append(files, "manifest.json")
	sort.Strings(files)

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	dirs := map[string]bool{}
	for _, rel := range files {
		for _, parent := range parents(rel) {
			if !dirs[parent] {
				dirs[parent] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parent + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
					return closeAll(err, f)
				}
			}
		}
		var data []byte
		if rel == "manifest.json" {
			data = manifest
		} else if data, err = os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
			return closeAll(err, f)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return closeAll(err, f)
		}
		if _, err := io.Copy(tw, bytes.NewReader(data)); err != nil {
			return closeAll(err, f)
		}
	}
	if err := tw.Close(); err != nil {
		return closeAll(err, f)
	}
	return f.Close()
}

// Push uploads the index and both images to ref with the credentials of the
// docker config (~/.docker/config.json, credential helpers), and returns the
// digest it is pullable by.
func Push(ctx context.Context, idx v1.ImageIndex, ref name.Reference, opts ...remote.Option) (v1.Hash, error) {
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(ref, idx, opts...); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

func imageFor(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(p) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("the index has no image for %s", platformString(p))
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// parents of "blobs/sha256/x" are "blobs" and "blobs/sha256".
func parents(rel string) []string {
	var out []string
	for d := filepath.ToSlash(filepath.Dir(rel)); d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
		out = append([]string{d}, out...)
	}
	return out
}

func closeAll(err error, f *os.File) error {
	_ = f.Close()
	return err
}
