package kube

import (
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"

	"context"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultPollInterval is how often the file source re-reads its directory when no file
// event told it to, in case one was missed.
const DefaultPollInterval = 10 * time.Second

// fileSource reads the ConfigMap mounted as a volume. The kubelet updates such a volume by
// writing a new hidden directory and swapping the ..data symlink to it with a rename, so
// every update is one event on the directory itself; the visible keys are symlinks through
// ..data. Watching the directory (not the files) catches the swap; a slow poll catches
// whatever a watch misses (an overflowed queue, a directory replaced underneath it).
type fileSource struct {
	dir   string
	poll  time.Duration
	apply func(map[string]string)
	log   *slog.Logger

	loaded  bool              // a first read was applied
	last    map[string]string // what was last applied, to apply only changes
	readErr string            // the last read error logged, to log each once
}

func (s *fileSource) run(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("Cannot watch the breaker config directory; polling only", "dir", s.dir, "interval", s.poll, "error", err)
	} else {
		defer w.Close()
	}
	watching := false
	watch := func() {
		if w == nil || watching {
			return
		}
		if err := w.Add(s.dir); err == nil {
			watching = true
		}
	}
	watch()
	s.load()

	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Clean(ev.Name) == filepath.Clean(s.dir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself went away; the watch went with it. Re-added on the
				// next poll, once it is back.
				watching = false
			}
			s.load()
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// Usually an overflow: events were lost, so read everything again.
			s.log.Debug("Breaker config directory watch error", "dir", s.dir, "error", err)
			s.load()
		case <-tick.C:
			watch()
			s.load()
		}
	}
}

// load reads the directory and applies it if it changed since the last time.
func (s *fileSource) load() {
	data, err := readConfigDir(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No volume (yet): like a deleted ConfigMap, the breakers run on their defaults.
		data = nil
		if s.newReadError(os.ErrNotExist) {
			s.log.Warn("Breaker config directory does not exist; breakers run on their default policies", "dir", s.dir)
		}
	case err != nil:
		// Keep what was applied last; the next event or poll retries.
		if s.newReadError(err) {
			s.log.Warn("Cannot read the breaker config directory; keeping the current policies", "dir", s.dir, "error", err)
		}
		return
	default:
		s.readErr = ""
	}
	if s.loaded && maps.Equal(data, s.last) {
		return
	}
	s.loaded, s.last = true, data
	s.apply(data)
}

// newReadError records err as the current read error and reports whether it differs
// from the last one, so that an error that persists is logged once.
func (s *fileSource) newReadError(err error) bool {
	if err.Error() == s.readErr {
		return false
	}
	s.readErr = err.Error()
	return true
}

// readConfigDir returns the contents of every *.json regular file in dir, by file name,
// following symlinks (the kubelet's keys are symlinks through ..data) and skipping
// dot-files (..data and the kubelet's hidden timestamped directories).
func readConfigDir(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	data := make(map[string]string, len(entries))
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, breakerconfig.KeySuffix) {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by a swap between ReadDir and here: the key is gone
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		data[name] = string(b)
	}
	return data, nil
}
