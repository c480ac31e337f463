package certs

import (
	"os"
	"path/filepath"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	// What envtest or an older version left: plain files.
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, content := range []string{"one", "one", "two"} {
		changed, err := writeFiles(dir, map[string][]byte{"tls.crt": []byte(content + ".crt"), "tls.key": []byte(content + ".key")})
		if err != nil {
			t.Fatal(err)
		}
		if want := i != 1; changed != want {
			t.Errorf("write %d (%s): changed %v, want %v", i, content, changed, want)
		}
		if got := read(t, filepath.Join(dir, "tls.crt")) + read(t, filepath.Join(dir, "tls.key")); got != content+".crt"+content+".key" {
			t.Errorf("write %d: read %q", i, got)
		}
		for _, name := range []string{"tls.crt", "tls.key"} {
			if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != filepath.Join(dataLink, name) {
				t.Errorf("%s: link %q %v, want through %s", name, target, err, dataLink)
			}
		}
		versions, _ := filepath.Glob(filepath.Join(dir, versionGlob))
		if len(versions) != 1 {
			t.Errorf("write %d: %d versions left, want 1", i, len(versions))
		}
	}
}
