package kube

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestLateBreakerAdoptsAtOnce: a breaker the application creates after the config arrived
// is reconciled as soon as the registry announces it: it adopts its fleet verdict without
// waiting for the config to change again, moments after the Get that created it.
func TestLateBreakerAdoptsAtOnce(t *testing.T) {
	dir := t.TempDir()
	c := ConfigOf("payments", 1, breaker.DefaultPolicy(), breakerconfig.ScopeFleet)
	c.Verdict = &breakerconfig.Verdict{State: breakerconfig.StateOpen, Since: time.Now().Add(-time.Second), ConsecutiveOpens: 1,
		OpenTimeout: breakerconfig.Duration(time.Hour)}
	doc, err := breakerconfig.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, breakerconfig.Key("payments")), doc, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	a, err := Connect(ctx, Options{ConfigDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-a.Done() }()
	for deadline := time.Now().Add(10 * time.Second); a.Stats().ConfigApplies == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the config was never applied")
		}
	}

	// Nothing changes the config from here on: a breaker reconciled only when the config
	// changes would never adopt the verdict. How soon it did, moments after the Get, is
	// logged; the bound is only there to fail instead of hanging, generous for a loaded
	// machine.
	created := time.Now()
	b := a.Registry().Get("payments")
	for b.State() != breaker.Open {
		if time.Since(created) > 10*time.Second {
			t.Fatalf("payments is %v %v after it was created, want the fleet's Open verdict adopted at once", b.State(), time.Since(created))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("Open %v after it was created", time.Since(created))
	if n := a.Stats().Adoptions; n != 1 {
		t.Errorf("%d adoptions, want 1", n)
	}
}

// TestPublishedAndLoaded: what a program serving the registry to others (cmd/fuseboxd)
// reads besides the breakers: whether the config is loaded, and each published
// document's generation and scope; a name nobody published has none.
func TestPublishedAndLoaded(t *testing.T) {
	dir := t.TempDir()
	doc, err := breakerconfig.Marshal(ConfigOf("payments", 7, breaker.DefaultPolicy(), breakerconfig.ScopeFleet))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, breakerconfig.Key("payments")), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := Connect(ctx, Options{ConfigDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-a.Done() }()
	for deadline := time.Now().Add(10 * time.Second); !a.Loaded(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the config was never loaded")
		}
	}
	if c, ok := a.Published("payments"); !ok || c.Generation != 7 || c.Scope != breakerconfig.ScopeFleet {
		t.Errorf("Published(payments) = %+v, %v; want generation 7, scope Fleet", c, ok)
	}
	if _, ok := a.Published("inventory"); ok {
		t.Error("Published(inventory) found a document nobody published")
	}
}
