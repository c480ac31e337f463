package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/internal/fakeclock"
)

// groupPolicy opens on two calls that both failed.
func groupPolicy() breaker.Policy {
	p := testPolicy()
	p.MinimumThroughput = 2
	return p
}

func newTestGroup(t *testing.T, p breaker.Policy, maxKeys int) (*Group, *fakeclock.Clock, *recorder) {
	t.Helper()
	clock := newFakeClock()
	rec := &recorder{}
	g, err := NewGroup("tenants", p, breaker.WithClock(clock), breaker.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	g.SetMaxKeys(maxKeys)
	return g, clock, rec
}

// failKey opens the breaker of key.
func failKey(t *testing.T, g *Group, key string) {
	t.Helper()
	doN(t, g.Get(key), 2, errBoom)
	wantState(t, g.Get(key), breaker.Open)
}

func TestGroupKeysAreIndependent(t *testing.T) {
	g, _, rec := newTestGroup(t, groupPolicy(), 10)
	failKey(t, g, "acme")
	if err := g.Get("acme").Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("acme's call: %v, want a short-circuit", err)
	}
	if err := g.Get("globex").Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Errorf("globex's call: %v, want it to run", err)
	}
	if acme := g.Get("acme"); g.Get("acme") != acme {
		t.Error("Get returned two breakers for one key")
	}
	tr := rec.takeTransitions()
	if len(tr) != 1 || tr[0].Breaker != "tenants/acme" || tr[0].To != breaker.Open {
		t.Fatalf("transitions %+v, want tenants/acme opening", tr)
	}
	group, key, ok := SplitKeyName(tr[0].Breaker)
	if group != "tenants" || key != "acme" || !ok {
		t.Errorf("SplitKeyName = %q %q %v", group, key, ok)
	}
	// Keys may hold the separator; the Group's name may not.
	if group, key, _ := SplitKeyName(g.Get("GET /items/{id}").Name()); group != "tenants" || key != "GET /items/{id}" {
		t.Errorf("a key with a slash split as %q %q", group, key)
	}
	if _, err := NewGroup("a/b", breaker.DefaultPolicy()); err == nil || !strings.Contains(err.Error(), `"a/b"`) {
		t.Errorf("NewGroup(a/b): %v, want a refusal naming it", err)
	}
	bad := breaker.DefaultPolicy()
	bad.Window = -time.Second
	if _, err := NewGroup("g", bad); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("NewGroup with a negative window: %v", err)
	}
}

func TestGroupUpdateReachesEveryMember(t *testing.T) {
	g, _, _ := newTestGroup(t, groupPolicy(), 10)
	failKey(t, g, "a")
	g.Get("b")
	p := groupPolicy()
	p.OpenTimeout = time.Minute
	if err := g.Update(p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} { // c is created after the update
		if got := g.Get(k).Policy().OpenTimeout; got != time.Minute {
			t.Errorf("%s: OpenTimeout %v after Update", k, got)
		}
	}
	wantState(t, g.Get("a"), breaker.Open) // state kept

	bad := p
	bad.FailureRatio = 2
	if err := g.Update(bad); err == nil || !strings.Contains(err.Error(), "failureRatio") {
		t.Errorf("invalid Update: %v", err)
	}
	if got := g.Get("d").Policy().FailureRatio; got != p.FailureRatio {
		t.Errorf("a refused policy replaced the Group's: ratio %v", got)
	}
}

func TestGroupEvictsLeastRecentlyUsedClosed(t *testing.T) {
	g, clock, _ := newTestGroup(t, groupPolicy(), 3)
	for _, k := range []string{"a", "b", "c"} {
		g.Get(k)
		clock.Advance(time.Second)
	}
	g.Get("a") // a is now the most recently used
	clock.Advance(time.Second)
	g.Get("d")
	if got := g.keys(); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("keys %v, want b evicted", got)
	}
	// A summary marks no key used.
	g.Summary()
	clock.Advance(time.Second)
	g.Get("e")
	if got := g.keys(); !slices.Equal(got, []string{"a", "d", "e"}) {
		t.Fatalf("keys %v, want c evicted", got)
	}
}

// TestGroupKeepsOutages: open and half-open breakers are never evicted; with nothing
// evictable, a new key is served past the bound, and the Group shrinks back once members
// close.
func TestGroupKeepsOutages(t *testing.T) {
	g, clock, _ := newTestGroup(t, groupPolicy(), 2)
	failKey(t, g, "a")
	failKey(t, g, "b")
	clock.Advance(testPolicy().OpenTimeout)
	wantState(t, g.Get("b"), breaker.HalfOpen)
	openA := g.Get("a")

	if err := g.Get("c").Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("new key c refused: %v", err)
	}
	if got := g.keys(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("keys %v, want all three: nothing was evictable", got)
	}
	if g.Get("a") != openA {
		t.Fatal("the open breaker of a was replaced")
	}
	// b's probes succeed: it closes and is evictable again; d's creation shrinks the Group
	// back to its bound, evicting the least recently used closed members (b, then c).
	doN(t, g.Get("b"), 2, nil)
	wantState(t, g.Get("b"), breaker.Closed)
	clock.Advance(time.Second)
	g.Get("d")
	if got := g.keys(); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("keys %v, want a (half-open) and d", got)
	}
	if s := g.Summary(); s.Keys != 2 || s.HalfOpen != 1 || s.Open != 0 {
		t.Errorf("summary %+v", s)
	}
}

// TestGroupForcedMembersAreEvictable: a forced mode decides the state, not the calls, so
// forced-open members hold no outage of their own and make room.
func TestGroupForcedMembersAreEvictable(t *testing.T) {
	p := groupPolicy()
	p.Mode = breaker.ModeForcedOpen
	g, clock, _ := newTestGroup(t, p, 2)
	for _, k := range []string{"a", "b", "c"} {
		wantState(t, g.Get(k), breaker.Open)
		clock.Advance(time.Second)
	}
	if got := g.keys(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("keys %v, want a evicted", got)
	}
	if s := g.Summary(); s.Open != 2 || s.State != breaker.Open || s.Reached.Breaker != "" {
		t.Errorf("summary %+v, want two forced-open keys and no transition behind it", s)
	}
}

func TestGroupSetMaxKeys(t *testing.T) {
	g, clock, _ := newTestGroup(t, groupPolicy(), 10)
	for _, k := range []string{"a", "b", "c", "d"} {
		g.Get(k)
		clock.Advance(time.Second)
	}
	failKey(t, g, "a")
	g.SetMaxKeys(2)
	if got := g.keys(); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("keys %v, want the open a and the newest d", got)
	}
	g.SetMaxKeys(0)
	g.mu.Lock()
	bound := g.maxKeys
	g.mu.Unlock()
	if bound != defaultMaxKeys {
		t.Errorf("SetMaxKeys(0): bound %d", bound)
	}
}

func TestGroupSummary(t *testing.T) {
	g, clock, _ := newTestGroup(t, groupPolicy(), 100)
	created := clock.Now()
	s := g.Summary()
	if s.Keys != 0 || s.State != breaker.Closed || !s.Since.Equal(created) || s.Worst != nil {
		t.Fatalf("empty group: %+v", s)
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		g.Get(k)
	}
	failKey(t, g, "a")
	openedAt := clock.Now()
	clock.Advance(time.Second)
	for _, k := range []string{"b", "c", "d", "e", "f"} {
		failKey(t, g, k)
		clock.Advance(time.Second)
	}
	s = g.Summary()
	if s.Keys != 8 || s.Open != 6 || s.HalfOpen != 0 || s.State != breaker.Open {
		t.Fatalf("summary %+v", s)
	}
	if !slices.Equal(s.Worst, []string{"f", "e", "d", "c", "b"}) {
		t.Errorf("worst %v, want the five most recently opened", s.Worst)
	}
	if !s.Since.Equal(openedAt) || s.Reached.Breaker != "tenants/a" || s.Reached.Reason != breakerconfig.ReasonTripped || s.Reached.Counts.Failures != 2 {
		t.Errorf("the Group opened at %v by %+v, want at %v by a's failures", s.Since, s.Reached, openedAt)
	}

	// Time ends a's open period first: Summary notices without a call.
	clock.Advance(testPolicy().OpenTimeout - 6*time.Second)
	s = g.Summary()
	if s.Open != 5 || s.HalfOpen != 1 || s.State != breaker.Open || !slices.Equal(s.Worst, []string{"f", "e", "d", "c", "b"}) {
		t.Fatalf("after a's timeout: %+v", s)
	}
	clock.Advance(10 * time.Second)
	s = g.Summary()
	if s.Open != 0 || s.HalfOpen != 6 || s.State != breaker.HalfOpen || s.Reached.To != breaker.HalfOpen || s.Reached.Reason != breakerconfig.ReasonTimedOut {
		t.Fatalf("after every timeout: %+v", s)
	}
	// Each went half-open when its open period ended, whenever Summary noticed: the most
	// recent first.
	if !slices.Equal(s.Worst, []string{"f", "e", "d", "c", "b"}) {
		t.Errorf("half-open worst %v", s.Worst)
	}
	failKey(t, g, "g")
	if s = g.Summary(); s.State != breaker.Open || s.Worst[0] != "g" || s.Reached.Breaker != "tenants/g" {
		t.Errorf("g opened: %+v", s)
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		doN(t, g.Get(k), 2, nil)
	}
	clock.Advance(testPolicy().OpenTimeout)
	doN(t, g.Get("g"), 2, nil)
	s = g.Summary()
	if s.State != breaker.Closed || s.Open+s.HalfOpen != 0 || s.Worst != nil || s.Reached.Breaker != "tenants/g" || s.Reached.To != breaker.Closed {
		t.Errorf("all closed: %+v", s)
	}
}

// TestGroupLookupAllocatesNothing: the call path of an existing key.
func TestGroupLookupAllocatesNothing(t *testing.T) {
	g, err := NewGroup("g", breaker.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	g.Get("k")
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _ = g.Get("k").Execute(ctx, succeed) }); n != 0 {
		t.Errorf("%v allocations per Get + Execute", n)
	}
}

// A Group's policy limits the calls in flight per key: one busy key refuses its own calls
// over the limit and not another key's, and Update moves every key's limit.
func TestGroupConcurrencyPerKey(t *testing.T) {
	p := groupPolicy()
	p.MaxInFlight = 1
	g, _, _ := newTestGroup(t, p, 10)
	done, err := g.Get("a").Allow()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get("a").Allow(); !errors.Is(err, breaker.ErrConcurrencyLimited) || errors.Is(err, breaker.ErrOpen) {
		t.Errorf("key a over its limit: %v", err)
	}
	other, err := g.Get("b").Allow()
	if err != nil {
		t.Errorf("key b refused for key a's calls: %v", err)
	}
	other(nil)
	p.MaxInFlight = 2
	if err := g.Update(p); err != nil {
		t.Fatal(err)
	}
	second, err := g.Get("a").Allow()
	if err != nil {
		t.Errorf("key a under its raised limit: %v", err)
	}
	second(nil)
	done(nil)
	if tr := g.Get("a").Traffic(); tr.Limit != 2 || tr.InFlightPeak != 2 || tr.Limited != 1 {
		t.Errorf("key a's traffic %+v", tr)
	}
}
