package registry

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func TestRegistry(t *testing.T) {
	clock := newFakeClock()
	rec := &recorder{}
	def := testPolicy()
	r, err := New(def, breaker.WithClock(clock), breaker.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("Lookup created a breaker")
	}
	a := r.Get("a")
	if r.Get("a") != a || a.Name() != "a" || a.Policy() != withDefaults(def) {
		t.Fatalf("Get: %p %q %+v", a, a.Name(), a.Policy())
	}

	// State survives a reload, and the options reach every breaker.
	doN(t, a, 20, errBoom)
	wantState(t, a, breaker.Open)
	if len(rec.takeTransitions()) != 1 {
		t.Fatal("the registry's observer did not see the transition")
	}
	pa := def
	pa.OpenTimeout = time.Minute
	pb := def
	pb.MinimumThroughput = 3
	if err := r.Apply(map[string]breaker.Policy{"a": pa, "b": pb}); err != nil {
		t.Fatal(err)
	}
	wantState(t, a, breaker.Open)
	if a.Policy().OpenTimeout != time.Minute {
		t.Fatalf("a's policy = %+v", a.Policy())
	}
	// A breaker created after Apply gets its configured policy.
	if got := r.Get("b").Policy().MinimumThroughput; got != 3 {
		t.Fatalf("b created with minimum %d", got)
	}

	// An invalid entry is refused for that name only; the others apply.
	bad := pb
	bad.FailureRatio = 2
	pa.OpenTimeout = 2 * time.Minute
	err = r.Apply(map[string]breaker.Policy{"a": pa, "b": bad, "c": bad})
	if err == nil || !strings.Contains(err.Error(), "invalid failureRatio") || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("Apply error = %v", err)
	}
	if r.Get("b").Policy().MinimumThroughput != 3 || r.Get("c").Policy() != withDefaults(def) || a.Policy().OpenTimeout != 2*time.Minute {
		t.Fatal("an invalid entry changed a policy, or a valid one was not applied")
	}

	// Names absent from the set revert to the default.
	if err := r.Apply(map[string]breaker.Policy{}); err != nil {
		t.Fatal(err)
	}
	if a.Policy() != withDefaults(def) || r.Get("b").Policy() != withDefaults(def) {
		t.Fatal("absent names kept their configured policies")
	}
	wantState(t, a, breaker.Open)

	if got := r.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %v", got)
	}
	var each []string
	r.Each(func(b *breaker.Breaker) { each = append(each, b.Name()); r.Get("from-each") })
	if !slices.Equal(each, []string{"a", "b", "c"}) {
		t.Fatalf("Each saw %v", each)
	}
	if _, err := New(breaker.Policy{FailureRatio: 2}); err == nil {
		t.Fatal("New accepted an invalid default")
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r, _ := New(breaker.DefaultPolicy())
	var wg sync.WaitGroup
	got := make([]*breaker.Breaker, 16)
	for i := range got {
		wg.Go(func() {
			got[i] = r.Get("shared")
			p := breaker.DefaultPolicy()
			p.MinimumThroughput = i + 1
			_ = r.Apply(map[string]breaker.Policy{"shared": p})
		})
	}
	wg.Wait()
	for _, b := range got {
		if b != got[0] {
			t.Fatal("Get created two breakers for one name")
		}
	}
}

func TestRegistryGroups(t *testing.T) {
	reg, err := New(breaker.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	tight := breaker.DefaultPolicy()
	tight.OpenTimeout = 5 * time.Second
	if err := reg.Apply(map[string]breaker.Policy{"hosts": tight}); err != nil {
		t.Fatal(err)
	}
	g := reg.Group("hosts")
	if reg.Group("hosts") != g {
		t.Fatal("Group returned two Groups for one name")
	}
	if got := g.Get("a.example").Policy().OpenTimeout; got != 5*time.Second {
		t.Errorf("a member of a configured Group has OpenTimeout %v", got)
	}

	tighter := tight
	tighter.OpenTimeout = 2 * time.Second
	bad := tight
	bad.Window = -1
	if err := reg.Apply(map[string]breaker.Policy{"hosts": tighter}); err != nil {
		t.Fatal(err)
	}
	if got := g.Get("a.example").Policy().OpenTimeout; got != 2*time.Second {
		t.Errorf("Apply did not reach the member: OpenTimeout %v", got)
	}
	if err := reg.Apply(map[string]breaker.Policy{"hosts": bad}); err == nil || !strings.Contains(err.Error(), `"hosts"`) {
		t.Errorf("invalid policy for a Group: %v", err)
	}
	if got := g.Get("c.example").Policy().OpenTimeout; got != 2*time.Second {
		t.Errorf("a refused policy changed the Group: %v", got)
	}
	if err := reg.Apply(nil); err != nil {
		t.Fatal(err)
	}
	if got := g.Get("b.example").Policy(); got != withDefaults(breaker.DefaultPolicy()) {
		t.Errorf("an unconfigured Group's member runs %+v, want the default", got)
	}
	if g2, ok := reg.LookupGroup("hosts"); !ok || g2 != g || !slices.Equal(reg.Names(), []string{"hosts"}) {
		t.Errorf("LookupGroup %v %v, Names %v", g2, ok, reg.Names())
	}

	reg.Get("payments")
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"a breaker's name as a Group's", func() { reg.Group("payments") }},
		{"a Group's name as a breaker's", func() { reg.Get("hosts") }},
		{"a separator in a Group's name", func() { reg.Group("a/b") }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
}

// TestRegistryOnCreate: every hook hears of each breaker and Group the registry creates,
// once however many goroutines race to create it, after the registry holds it and with no
// lock held (the hook calls back into the registry); a Group's keys are not announced.
func TestRegistryOnCreate(t *testing.T) {
	reg, err := New(testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		created []string
		second  int
	)
	reg.OnCreate(func(name string) {
		_, isBreaker := reg.Lookup(name)
		_, isGroup := reg.LookupGroup(name)
		if !isBreaker && !isGroup {
			t.Errorf("%q announced before the registry holds it", name)
		}
		reg.Names() // takes the registry's lock: a hook called under it would deadlock
		mu.Lock()
		defer mu.Unlock()
		created = append(created, name)
	})
	reg.OnCreate(func(string) {
		mu.Lock()
		defer mu.Unlock()
		second++
	})

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			reg.Get("payments")
			reg.Group("hosts").Get("a.example")
		})
	}
	wg.Wait()
	reg.Get("payments")
	reg.Group("hosts").Get("b.example")

	slices.Sort(created)
	if want := []string{"hosts", "payments"}; !slices.Equal(created, want) || second != 2 {
		t.Errorf("announced %v and %d to the second hook, want %v to both", created, second, want)
	}
}

// TestLeakedProbeThroughRegistry: a reload while a probe is out keeps it out, and
// shortens the limit after which an unanswered probe re-opens the circuit.
func TestLeakedProbeThroughRegistry(t *testing.T) {
	clock := newFakeClock()
	r, err := New(testPolicy(), breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	b := r.Get("db")
	b.Trip()
	clock.Advance(30 * time.Second)
	_, _ = b.Allow()
	// A reload while the probe is out keeps it out, and shortens its limit.
	p := testPolicy()
	p.OpenTimeout = 5 * time.Second
	if err := r.Apply(map[string]breaker.Policy{"db": p}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	if got, _ := r.Lookup("db"); got.State() != breaker.Open {
		t.Fatalf("state %v, want re-opened", got.State())
	}
}
