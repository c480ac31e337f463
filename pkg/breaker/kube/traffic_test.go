package kube

import (
	"math"
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// What counts as a material move of a pod's traffic (traffic.go).
func TestTrafficMoved(t *testing.T) {
	on := func(requests, accepts, retries, throttled int64) traffic {
		return traffic{on: true, requests: requests, accepts: accepts, retries: retries, throttled: throttled}
	}
	for _, tc := range []struct {
		name     string
		was, now traffic
		moved    bool
	}{
		{"unchanged", on(1000, 500, 50, 100), on(1000, 500, 50, 100), false},
		{"volume up 9 %", on(1000, 500, 50, 100), on(1090, 545, 55, 109), false},
		{"volume up 10 %", on(1000, 500, 50, 100), on(1111, 555, 55, 111), true},
		{"volume down 10 %", on(1000, 500, 50, 100), on(900, 450, 45, 90), true},
		{"throttled share up 1 point", on(1000, 500, 50, 100), on(1000, 500, 50, 110), false},
		{"throttled share up 2 points", on(1000, 500, 50, 100), on(1000, 500, 50, 120), true},
		{"retry share down 2 points", on(1000, 500, 50, 100), on(1000, 500, 30, 100), true},
		{"accept share down 3 points", on(1000, 500, 50, 100), on(1000, 470, 50, 100), true},
		{"from none", on(0, 0, 0, 0), on(1, 1, 0, 0), true},
		{"to none (opened)", on(40, 20, 0, 0), on(0, 0, 0, 0), true},
		{"none still", on(0, 0, 0, 0), on(0, 0, 0, 0), false},
		{"first reported", traffic{}, on(0, 0, 0, 0), true},
	} {
		if got := trafficMoved(tc.was, tc.now); got != tc.moved {
			t.Errorf("%s: moved %v, want %v", tc.name, got, tc.moved)
		}
	}
}

// A count beyond the report's bound is written at the bound, which the schema accepts.
func TestTrafficOfClamps(t *testing.T) {
	got := trafficOf(breaker.Traffic{Requests: math.MaxInt64, Accepts: -3, Retries: 7, Throttled: breakerconfig.MaxTrafficCount + 1}, sampled{traffic: true})
	want := traffic{on: true, requests: breakerconfig.MaxTrafficCount, accepts: 0, retries: 7, throttled: breakerconfig.MaxTrafficCount}
	if got != want {
		t.Errorf("trafficOf = %+v, want %+v", got, want)
	}
	// Retries allowed whose calls have not finished yet: the schema refuses more retries
	// (or accepts, or throttled) than requests, so the report says as many as requests.
	got = trafficOf(breaker.Traffic{Requests: 4, Accepts: 9, Retries: 6, Throttled: 5}, sampled{traffic: true})
	if want := (traffic{on: true, requests: 4, accepts: 4, retries: 4, throttled: 4}); got != want {
		t.Errorf("trafficOf = %+v, want %+v", got, want)
	}
}
