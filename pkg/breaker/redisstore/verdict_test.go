package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

func TestParseShared(t *testing.T) {
	since := time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)
	ns := encodeSince(since)
	tests := []struct {
		name                   string
		epoch, state, sin, hos string
		want                   shared
		wantErr                bool
	}{
		{"open", "7", "open", ns, "0", shared{epoch: 7, state: breaker.Open, since: since}, false},
		// An older version's count of half-open successes: valid, and ignored.
		{"half-open with successes", "8", "half_open", ns, "3", shared{epoch: 8, state: breaker.HalfOpen, since: since}, false},
		{"closed without start", "1", "closed", "0", "0", shared{epoch: 1, state: breaker.Closed}, false},
		{"epoch zero", "0", "open", ns, "0", shared{}, true},
		{"negative epoch", "-1", "open", ns, "0", shared{}, true},
		{"hex epoch", "0x10", "open", ns, "0", shared{}, true},
		{"epoch beyond 2^53", "9007199254740992", "open", ns, "0", shared{}, true},
		{"CamelCase state", "1", "Open", ns, "0", shared{}, true},
		{"unknown state", "1", "ajar", ns, "0", shared{}, true},
		{"negative since", "1", "open", "-5", "0", shared{}, true},
		{"float since", "1", "open", "1.5e18", "0", shared{}, true},
		{"negative count", "1", "half_open", ns, "-1", shared{}, true},
		{"count while open", "1", "open", ns, "2", shared{}, true},
		{"empty", "", "", "", "", shared{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseShared(tt.epoch, tt.state, tt.sin, tt.hos)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got.epoch != tt.want.epoch || got.state != tt.want.state || !got.since.Equal(tt.want.since) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseMessage(t *testing.T) {
	key, v, err := parseMessage(format + " 3 open 1700000000000000000 0 fusebox:verdict:pay ments")
	if err != nil || key != "fusebox:verdict:pay ments" || v.epoch != 3 || v.state != breaker.Open {
		t.Fatalf("got %q %+v %v", key, v, err)
	}
	for _, bad := range []string{
		"", "hello", format, format + " 3 open 1 0", format + " 3 open 1 0 ",
		"other.v1 3 open 1 0 k", format + " x open 1 0 k",
	} {
		if _, _, err := parseMessage(bad); err == nil {
			t.Errorf("parseMessage(%q) accepted garbage", bad)
		}
	}
}

func TestSinceRoundTrip(t *testing.T) {
	local := time.Now() // carries a monotonic reading and a local zone
	v, err := parseShared("1", "open", encodeSince(local), "0")
	if err != nil {
		t.Fatal(err)
	}
	if !v.since.Equal(roundSince(local)) || !v.since.Equal(local) {
		t.Errorf("since %v did not survive the trip: %v", local, v.since)
	}
	if encodeSince(time.Time{}) != "0" || !roundSince(time.Time{}).IsZero() {
		t.Error("the zero time is not written as 0")
	}
}

// FuzzParseMessage: whatever arrives on the channel, parsing never panics, and what it
// accepts re-encodes to the same message.
func FuzzParseMessage(f *testing.F) {
	f.Add(format + " 3 open 1700000000000000000 0 fusebox:verdict:payments")
	f.Add(format + " 1 half_open 1 2 k")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, payload string) {
		key, v, err := parseMessage(payload)
		if err != nil {
			return
		}
		again := strings.Join([]string{format, uitoa(v.epoch), v.state.String(), encodeSince(v.since), "0", key}, " ")
		k2, v2, err := parseMessage(again)
		if err != nil || k2 != key || v2 != v {
			t.Fatalf("%q parsed as %q %+v, which re-encodes as %q (%v)", payload, key, v, again, err)
		}
	})
}

func TestParsePeriod(t *testing.T) {
	base := shared{epoch: 7, state: breaker.Open}
	for period, want := range map[string]shared{
		"":                 {epoch: 7, state: breaker.Open},
		"7 3 120000000000": {epoch: 7, state: breaker.Open, opens: 3, openFor: 2 * time.Minute},
		// Left behind by this version before an older one wrote epoch 7: not this verdict's.
		"6 3 120000000000": {epoch: 7, state: breaker.Open},
	} {
		got, err := parsePeriod(base, period)
		if err != nil || got != want {
			t.Errorf("parsePeriod(%q) = %+v, %v; want %+v", period, got, err, want)
		}
	}
	for _, bad := range []string{"7 3", "7 -1 5", "7 3 -5", "x 3 5", "7 3 5 9", "7 3 1e9"} {
		if _, err := parsePeriod(base, bad); !errors.Is(err, errGarbage) {
			t.Errorf("parsePeriod(%q) = %v, want garbage", bad, err)
		}
	}
}
