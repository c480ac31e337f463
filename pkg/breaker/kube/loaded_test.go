package kube

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// podEnvironment clears what OptionsFromEnvironment reads, for a test to set its own.
func podEnvironment(t *testing.T) {
	t.Helper()
	for _, name := range []string{EnvPodName, EnvPodUID, EnvNamespace, EnvConfigDir, EnvNodeAgent, EnvNodeAgentToken, "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
}

// captureDefaultLog points slog.Default, which FromEnvironment logs to, at a buffer.
func captureDefaultLog(t *testing.T) *lockedBuffer {
	t.Helper()
	buf := &lockedBuffer{}
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, nil)))
	t.Cleanup(func() { slog.SetDefault(was) })
	return buf
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Issue 35: FromEnvironment returned before the config was loaded, so the first calls ran
// the default policy (MinimumThroughput 20) instead of the file's (4). It returns once the
// config is applied: the first breaker the program gets runs the published policy.
func TestFromEnvironmentReturnsWithTheConfigApplied(t *testing.T) {
	podEnvironment(t)
	dir := t.TempDir()
	p := breaker.DefaultPolicy()
	p.MinimumThroughput = 4
	doc, err := breakerconfig.Marshal(ConfigOf("payments", 1, p, breakerconfig.ScopePod))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, breakerconfig.Key("payments")), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvConfigDir, dir)
	logs := captureDefaultLog(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := FromEnvironment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Get("payments").Policy().MinimumThroughput; got != 4 {
		t.Errorf("the first breaker runs minimumThroughput %d, want the file's 4", got)
	}
	if strings.Contains(logs.String(), "No breaker config yet") {
		t.Errorf("warned of no config, with one applied:\n%s", logs)
	}
}

// With no config in FirstConfigWait (the node agent it names cannot be reached),
// FromEnvironment says so in the log and returns a registry on the default policy; a
// context that ends first ends the wait with its error.
func TestFromEnvironmentSaysWhenItGivesUp(t *testing.T) {
	podEnvironment(t)
	was := firstConfigWait
	firstConfigWait = 200 * time.Millisecond // the behaviour, not the bound, is tested
	t.Cleanup(func() { firstConfigWait = was })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := ln.Addr().String()
	_ = ln.Close() // nothing listens: the node agent cannot be reached
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvNodeAgent, "http://"+away)
	t.Setenv(EnvNodeAgentToken, token)
	logs := captureDefaultLog(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := FromEnvironment(ctx)
	if err != nil {
		t.Fatalf("no config in the wait: %v, want the registry anyway", err)
	}
	if got := reg.Get("payments").Policy(); got != breaker.DefaultPolicy() {
		t.Errorf("policy %+v before any config, want the default", got)
	}
	if !strings.Contains(logs.String(), "No breaker config yet; the breakers run the default policy until it arrives") ||
		!strings.Contains(logs.String(), "waited=200ms") {
		t.Errorf("the log does not say it gave up waiting:\n%s", logs)
	}

	ended, end := context.WithCancel(context.Background())
	end()
	if _, err := FromEnvironment(ended); err != context.Canceled {
		t.Errorf("with its context ended: %v, want context.Canceled", err)
	}
}

// Issue 35: an agent that reads a directory and has no API server to report to (fuseboxd
// --config-dir outside a pod) logged `"why":"Options.Config is nil"`, a field a reader of
// the log never set; it says what is off and why in the domain's words.
func TestNoReportSaysWhyInItsOwnWords(t *testing.T) {
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := Connect(ctx, Options{ConfigDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-a.Done()
	said := logs.String()
	if !strings.Contains(said, "Not reporting breaker states") || !strings.Contains(said, "no API server to write this pod's BreakerReport to") {
		t.Errorf("the log does not say why reporting is off:\n%s", said)
	}
	if strings.Contains(said, "Options.Config") {
		t.Errorf("the log names a Go field:\n%s", said)
	}
}
