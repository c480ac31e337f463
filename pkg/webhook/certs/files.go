package certs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The layout the kubelet gives a Secret volume, which certwatcher handles: the
// files are symlinks through ..data to a hidden directory, and an update is a
// new hidden directory plus one atomic rename of ..data.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
	versionGlob = "..fusebox-*"
)

// writeFiles makes dir hold files (name → content) and reports whether it
// changed anything. Every name switches to the new content at the same
// instant, so a reader never sees a certificate next to the other one's key.
func writeFiles(dir string, files map[string][]byte) (bool, error) {
	same := true
	for name, content := range files {
		if have, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(have, content) {
			same = false
			break
		}
	}
	if same {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	version, err := os.MkdirTemp(dir, strings.TrimSuffix(versionGlob, "*"))
	if err != nil {
		return false, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(version, name), content, 0o600); err != nil {
			_ = os.RemoveAll(version)
			return false, err
		}
	}
	if err := replaceSymlink(dir, dataLink, filepath.Base(version)); err != nil {
		_ = os.RemoveAll(version)
		return false, err
	}
	for name := range files {
		if err := replaceSymlink(dir, name, filepath.Join(dataLink, name)); err != nil {
			return false, err
		}
	}
	// Drop the versions ..data no longer points to. certwatcher, which watches
	// the files through the symlinks it resolved, sees them go and reloads.
	old, _ := filepath.Glob(filepath.Join(dir, versionGlob))
	for _, o := range old {
		if o != version {
			_ = os.RemoveAll(o)
		}
	}
	return true, nil
}

// replaceSymlink makes dir/name a symlink to target, atomically.
func replaceSymlink(dir, name, target string) error {
	path := filepath.Join(dir, name)
	if have, err := os.Readlink(path); err == nil && have == target {
		return nil
	}
	tmp := filepath.Join(dir, dataLinkTmp)
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link %s: %w", path, err)
	}
	return nil
}
