package plugin

import (
	"strings"
	"testing"
	"time"
)

func TestParseDurationTakesDays(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		text string // formatDuration of want
	}{
		{"2d", 48 * time.Hour, "2d"},
		{"1d12h", 36 * time.Hour, "1d12h"},
		{"7d", 168 * time.Hour, "7d"},
		{"0d30m", 30 * time.Minute, "30m"},
		{"1d1h30m15s", 25*time.Hour + 30*time.Minute + 15*time.Second, "1d1h30m15s"},
		{"-1d", -24 * time.Hour, "-1d"},
		{"+1d", 24 * time.Hour, "1d"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"15m", 15 * time.Minute, "15m"},
		{"1.5h", 90 * time.Minute, "1h30m"},
		{"45s", 45 * time.Second, "45s"},
		{"0", 0, "0s"},
	} {
		got, err := parseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if text := formatDuration(tc.want); text != tc.text {
			t.Errorf("formatDuration(%v) = %q, want %q", tc.want, text, tc.text)
		}
		if back, err := parseDuration(formatDuration(tc.want)); err != nil || back != tc.want {
			t.Errorf("parseDuration(formatDuration(%v)) = %v, %v", tc.want, back, err)
		}
	}
	for _, in := range []string{"", "d", "1.5d", "d12h", "1d-1h", "1d2d", "2 d", "1dx", "tomorrow", "99999d"} {
		if d, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, d)
		}
	}
	var d time.Duration
	err := durationFlag{&d}.Set("1w")
	if err == nil || !strings.Contains(err.Error(), "want a duration such as 15m, 2h, 2d or 1d12h") {
		t.Errorf("Set(1w): %v", err)
	}
}
