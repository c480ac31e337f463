package main

import (
	"context"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The same builder makes the node's pause image (and the example's): the binary of
// the package named sits at the entrypoint named, on the same root filesystem.
func TestImageOfAnotherPackage(t *testing.T) {
	opts := testOptions(t)
	opts.Package, opts.Entrypoint = "./hack/pause", "/pause"
	opts.Platforms = []v1.Platform{{OS: runtime.GOOS, Architecture: runtime.GOARCH}}
	idx, err := Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	img, err := imageFor(idx, opts.Platforms[0])
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/pause" {
		t.Errorf("entrypoint %q, want /pause", got)
	}
	files := layerFiles(t, img)
	if len(files["pause"]) == 0 {
		t.Errorf("no /pause in the image (files %d)", len(files))
	}
	if _, ok := files["manager"]; ok {
		t.Error("/manager is in the pause image")
	}
	if _, ok := files["etc/passwd"]; !ok {
		t.Error("no /etc/passwd: not the same root filesystem as the manager's")
	}
}
