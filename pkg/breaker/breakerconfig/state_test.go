package breakerconfig

import (
	"testing"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func TestParseState(t *testing.T) {
	for s, want := range map[string]breaker.State{"closed": breaker.Closed, "Closed": breaker.Closed, "open": breaker.Open,
		"Open": breaker.Open, "half_open": breaker.HalfOpen, "HalfOpen": breaker.HalfOpen} {
		st, err := ParseState(s)
		if err != nil || st != want {
			t.Errorf("ParseState(%q) = %v, %v", s, st, err)
		}
	}
	if _, err := ParseState("ajar"); err == nil {
		t.Error("ParseState accepted nonsense")
	}
}

// FuzzParseState checks that ParseState accepts exactly the six spellings and that what it
// returns prints back as the telemetry spelling.
func FuzzParseState(f *testing.F) {
	for _, s := range []string{"closed", "Open", "half_open", "HalfOpen", "", "OPEN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseState(s)
		if err != nil {
			return
		}
		back, err := ParseState(st.String())
		if err != nil || back != st {
			t.Fatalf("ParseState(%q) = %v, which does not round-trip", s, st)
		}
	})
}
