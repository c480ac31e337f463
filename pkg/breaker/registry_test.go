package breaker

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	clock := newFakeClock()
	rec := &recorder{}
	def := testPolicy()
	r, err := NewRegistry(def, WithClock(clock), WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("Lookup created a breaker")
	}
	a := r.Get("a")
	if r.Get("a") != a || a.Name() != "a" || a.Policy() != def.withDefaults() {
		t.Fatalf("Get: %p %q %+v", a, a.Name(), a.Policy())
	}

	// State survives a reload, and the options reach every breaker.
	doN(t, a, 20, errBoom)
	wantState(t, a, Open)
	if len(rec.takeTransitions()) != 1 {
		t.Fatal("the registry's observer did not see the transition")
	}
	pa := def
	pa.OpenTimeout = time.Minute
	pb := def
	pb.MinimumThroughput = 3
	if err := r.Apply(map[string]Policy{"a": pa, "b": pb}); err != nil {
		t.Fatal(err)
	}
	wantState(t, a, Open)
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
	err = r.Apply(map[string]Policy{"a": pa, "b": bad, "c": bad})
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) || fe.Field != "failureRatio" || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("Apply error = %v", err)
	}
	if r.Get("b").Policy().MinimumThroughput != 3 || r.Get("c").Policy() != def.withDefaults() || a.Policy().OpenTimeout != 2*time.Minute {
		t.Fatal("an invalid entry changed a policy, or a valid one was not applied")
	}

	// Names absent from the set revert to the default.
	if err := r.Apply(map[string]Policy{}); err != nil {
		t.Fatal(err)
	}
	if a.Policy() != def.withDefaults() || r.Get("b").Policy() != def.withDefaults() {
		t.Fatal("absent names kept their configured policies")
	}
	wantState(t, a, Open)

	if got := r.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %v", got)
	}
	var each []string
	r.Each(func(b *Breaker) { each = append(each, b.Name()); r.Get("from-each") })
	if !slices.Equal(each, []string{"a", "b", "c"}) {
		t.Fatalf("Each saw %v", each)
	}
	if _, err := NewRegistry(Policy{}); err == nil {
		t.Fatal("NewRegistry accepted an invalid default")
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r, _ := NewRegistry(DefaultPolicy())
	var wg sync.WaitGroup
	got := make([]*Breaker, 16)
	for i := range got {
		wg.Go(func() {
			got[i] = r.Get("shared")
			p := DefaultPolicy()
			p.MinimumThroughput = i + 1
			_ = r.Apply(map[string]Policy{"shared": p})
		})
	}
	wg.Wait()
	for _, b := range got {
		if b != got[0] {
			t.Fatal("Get created two breakers for one name")
		}
	}
}
