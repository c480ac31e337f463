package plugin

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// day is the plugin's "d": 24 hours. An override is bounded in days (at most
// seven), so people write them in days; Go's durations stop at hours.
const day = 24 * time.Hour

// parseDuration reads a duration as time.ParseDuration does, with whole days
// in front allowed: "2d", "1d12h", "-1d", "90m".
func parseDuration(s string) (time.Duration, error) {
	text := s
	sign := time.Duration(1)
	if rest, ok := strings.CutPrefix(text, "-"); ok {
		sign, text = -1, rest
	} else {
		text = strings.TrimPrefix(text, "+")
	}
	days, rest, ok := strings.Cut(text, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q: the days come first, as a whole number (such as 2d or 1d12h)", s)
	}
	d := time.Duration(n) * day
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r < 0 {
			return 0, fmt.Errorf("%q: after the days, want hours, minutes or seconds (such as 1d12h or 2d30m)", s)
		}
		d += r
	}
	return sign * d, nil
}

// formatDuration writes d as a person would type it, the inverse of
// parseDuration: whole days first, no zero units at the end ("1d12h", "90m"
// is "1h30m", "-5m").
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	days, rest := d/day, d%day
	out := ""
	if days > 0 {
		out = fmt.Sprintf("%dd", days)
	}
	if rest > 0 {
		r := rest.String()
		if strings.HasSuffix(r, "m0s") {
			r = strings.TrimSuffix(r, "0s")
		}
		if strings.HasSuffix(r, "h0m") {
			r = strings.TrimSuffix(r, "0m")
		}
		out += r
	}
	return sign + out
}

// durationFlag is a pflag.Value for a duration that may be given in days.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return formatDuration(*f.d)
}

func (f durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 15m, 2h, 2d or 1d12h: %w", err)
	}
	*f.d = d
	return nil
}

func (durationFlag) Type() string { return "duration" }
