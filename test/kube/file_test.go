package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// volume is a directory the way the kubelet maintains a ConfigMap volume: the files live
// in a hidden timestamped directory, ..data is a symlink to it, and every key is a
// symlink through ..data. An update writes a new hidden directory and swaps ..data with
// one rename.
type volume struct {
	dir string
	n   int
}

func (v *volume) publish(t *testing.T, data map[string]string) {
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_01_02_03_04_05.%09d", v.n)
	must(t, os.Mkdir(filepath.Join(v.dir, ts), 0o755))
	for k, doc := range data {
		must(t, os.WriteFile(filepath.Join(v.dir, ts, k), []byte(doc), 0o644))
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	must(t, os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")))
	entries, err := os.ReadDir(v.dir)
	must(t, err)
	for _, e := range entries {
		if _, ok := data[e.Name()]; !ok && !strings.HasPrefix(e.Name(), ".") && e.Type()&os.ModeSymlink != 0 {
			must(t, os.Remove(filepath.Join(v.dir, e.Name())))
		}
	}
	for k := range data {
		if _, err := os.Lstat(filepath.Join(v.dir, k)); os.IsNotExist(err) {
			must(t, os.Symlink(filepath.Join("..data", k), filepath.Join(v.dir, k)))
		}
	}
	if old != "" {
		must(t, os.RemoveAll(filepath.Join(v.dir, old)))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceFollowsKubeletSwaps(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "files")
	vol := &volume{dir: t.TempDir()}
	// What is not a key is ignored: dot-files, other suffixes, directories.
	must(t, os.WriteFile(filepath.Join(vol.dir, ".hidden.json"), []byte("{"), 0o644))
	must(t, os.WriteFile(filepath.Join(vol.dir, "README"), []byte("hello"), 0o644))
	must(t, os.Mkdir(filepath.Join(vol.dir, "dir.json"), 0o755))
	p1 := testPolicy()
	vol.publish(t, map[string]string{"files.json": render(t, "files", 1, p1, "Pod", nil)})

	in := startInstance(t, ns, "a", instanceOptions{
		breakers: []string{"files"},
		// An hour: only the file events can bring the updates in time.
		modify: func(o *kube.Options) { o.ConfigDir, o.PollInterval = vol.dir, time.Hour },
	})
	ins := []*instance{in}
	eventually(t, propagation, func() error { return policyIs(ins, "files", p1) })
	eventually(t, propagation, func() error {
		return memberIs(ns, "files", "a", wantEntry(resiliencev1alpha1.StateClosed, 1))
	})
	in.reg.Get("files").Trip()

	p2 := p1
	p2.Window = 20 * time.Second
	vol.publish(t, map[string]string{"files.json": render(t, "files", 2, p2, "Pod", nil)})
	eventually(t, propagation, func() error { return policyIs(ins, "files", p2) })
	if s := in.reg.Get("files").State(); s != breaker.Open {
		t.Errorf("state %v after the update, want still open", s)
	}
	eventually(t, propagation, func() error {
		return memberIs(ns, "files", "a", wantEntry(resiliencev1alpha1.StateOpen, 2))
	})

	vol.publish(t, map[string]string{"files.json": `{"name": "files", "generation": 3, "openTimeout": "30s", "window": "10s", "failureRatio": 7}`})
	eventually(t, propagation, func() error {
		return memberIs(ns, "files", "a", func(m resiliencev1alpha1.BreakerReportEntry) error {
			if m.ConfigGeneration != 2 || !strings.Contains(m.ConfigError, "failureRatio") {
				return fmt.Errorf("want generation 2 kept and a configError naming failureRatio")
			}
			return nil
		})
	})
	if err := policyIs(ins, "files", p2); err != nil {
		t.Error(err)
	}

	vol.publish(t, map[string]string{})
	eventually(t, propagation, func() error { return policyIs(ins, "files", breaker.DefaultPolicy()) })
}

// TestFileSourceWithoutAPI: a pod with no API access reads its config from the volume and
// reports nothing. The directory appears only after the start, so the watch on it cannot
// be set up at first, and the poll has to find it.
func TestFileSourceWithoutAPI(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "config")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	a, err := kube.Connect(ctx, kube.Options{
		ConfigDir:    dir,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logWriter(t, &logs), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-a.Done() }()
	b := a.Registry().Get("local")
	if !strings.Contains(logs.String(), "Not reporting breaker states") {
		t.Errorf("no log line saying reporting is off:\n%s", logs.String())
	}

	must(t, os.Mkdir(dir, 0o755))
	vol := &volume{dir: dir}
	p := testPolicy()
	p.SuccessThreshold = 4
	vol.publish(t, map[string]string{"local.json": render(t, "local", 1, p, "Pod", nil)})
	eventually(t, propagation, func() error {
		if got := b.Policy(); got != p {
			return fmt.Errorf("policy %+v, want %+v", got, p)
		}
		return nil
	})
	if s := a.Stats(); s.Writes != 0 || s.WriteFailures != 0 {
		t.Errorf("stats %+v: a pod without API access wrote", s)
	}
}
