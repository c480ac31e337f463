package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func TestMetricsFollowStatusAndForgetDeletedBreakers(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	cb := &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "payments"}}
	cb.Status.State = resiliencev1alpha1.StateOpen
	cb.Status.MemberCounts = &resiliencev1alpha1.MemberCounts{Reporting: 3, Closed: 2, Open: 1}
	m.observe(cb)
	m.transition(cb, resiliencev1alpha1.StateOpen)
	m.forget("shop", []resiliencev1alpha1.CircuitBreaker{*cb})

	want := `
# HELP fusebox_circuitbreaker_state 1 for the CircuitBreaker's current state (Closed, Open, HalfOpen), 0 for the others; no series until a pod reports.
# TYPE fusebox_circuitbreaker_state gauge
fusebox_circuitbreaker_state{name="payments",namespace="shop",state="Closed"} 0
fusebox_circuitbreaker_state{name="payments",namespace="shop",state="HalfOpen"} 0
fusebox_circuitbreaker_state{name="payments",namespace="shop",state="Open"} 1
# HELP fusebox_circuitbreaker_members Pods reporting the CircuitBreaker, by their circuit state.
# TYPE fusebox_circuitbreaker_members gauge
fusebox_circuitbreaker_members{name="payments",namespace="shop",state="Closed"} 2
fusebox_circuitbreaker_members{name="payments",namespace="shop",state="HalfOpen"} 0
fusebox_circuitbreaker_members{name="payments",namespace="shop",state="Open"} 1
# HELP fusebox_circuitbreaker_transitions_total Changes of the CircuitBreaker's state seen by the operator, by the state entered.
# TYPE fusebox_circuitbreaker_transitions_total counter
fusebox_circuitbreaker_transitions_total{name="payments",namespace="shop",to="Open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	m.forget("shop", nil)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after the breaker is deleted: %d series (%v), want none", n, err)
	}
}
