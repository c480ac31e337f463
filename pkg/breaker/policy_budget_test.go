package breaker

import (
	"errors"
	"math"
	"testing"
)

func TestValidateRetryBudgetAndThrottle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     Policy
		field string
	}{
		{"percent below 0", Policy{RetryBudget: &RetryBudget{Percent: -1}}, "retryBudget.percent"},
		{"percent above 100", Policy{RetryBudget: &RetryBudget{Percent: 101}}, "retryBudget.percent"},
		{"negative floor", Policy{RetryBudget: &RetryBudget{Percent: 20, MinPerSecond: -1}}, "retryBudget.minPerSecond"},
		{"k below 1", Policy{Throttle: &Throttle{K: 0.99}}, "throttle.k"},
		{"k NaN", Policy{Throttle: &Throttle{K: math.NaN()}}, "throttle.k"},
		{"k infinite", Policy{Throttle: &Throttle{K: math.Inf(1)}}, "throttle.k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe, ok := errors.AsType[*fieldError](tc.p.Validate())
			if !ok || fe.Field != tc.field {
				t.Fatalf("Validate() = %v, want a fieldError naming %s", tc.p.Validate(), tc.field)
			}
			if _, err := New("x", tc.p); err == nil {
				t.Fatal("New accepted the policy")
			}
		})
	}
	for _, p := range []Policy{
		{RetryBudget: &RetryBudget{}},
		{RetryBudget: &RetryBudget{Percent: 100, MinPerSecond: 1 << 20}},
		{Throttle: &Throttle{K: 1}},
		{Throttle: &Throttle{K: 10}},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", p, err)
		}
	}
}

// A policy is compared by value: an Update with equal contents behind new pointers changes
// nothing (not even the published period), and the breaker's policy cannot be changed by
// writing through the pointers handed in or handed out.
func TestPolicyPointersByValue(t *testing.T) {
	in := Policy{RetryBudget: &RetryBudget{Percent: 20, MinPerSecond: 10}, Throttle: &Throttle{K: 2}}
	b, err := New("x", in)
	if err != nil {
		t.Fatal(err)
	}
	in.RetryBudget.Percent, in.Throttle.K = 99, 9
	got := b.Policy()
	if got.RetryBudget.Percent != 20 || got.Throttle.K != 2 {
		t.Fatalf("the caller's pointers reach the breaker: %+v %+v", *got.RetryBudget, *got.Throttle)
	}
	got.RetryBudget.Percent, got.Throttle.K = 50, 5
	if again := b.Policy(); again.RetryBudget.Percent != 20 || again.Throttle.K != 2 {
		t.Fatalf("Policy() hands out the breaker's own pointers: %+v %+v", *again.RetryBudget, *again.Throttle)
	}
	before := b.cur.Load()
	if err := b.Update(Policy{RetryBudget: &RetryBudget{Percent: 20, MinPerSecond: 10}, Throttle: &Throttle{K: 2}}); err != nil {
		t.Fatal(err)
	}
	if b.cur.Load() != before {
		t.Fatal("an Update equal by value republished the period")
	}
	if err := b.Update(Policy{RetryBudget: &RetryBudget{Percent: 20, MinPerSecond: 10}, Throttle: &Throttle{K: 3}}); err != nil {
		t.Fatal(err)
	}
	if b.cur.Load() == before || b.Policy().Throttle.K != 3 {
		t.Fatal("an Update with a new k was taken as equal")
	}
}
