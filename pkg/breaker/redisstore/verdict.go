package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
)

// format marks a value as one this package wrote. A hash without it under a breaker's key
// is someone else's, and is never read as a verdict nor overwritten.
const format = "fusebox.verdict.v1"

// The hash fields of a shared verdict, in the order HMGET asks for them. The fifth, hos, is
// the count of half-open successes that earlier versions shared across processes. Counters
// are never shared (docs/design.md §5.10), so it is written as 0 and its value ignored, but it
// stays in the v1 format so that processes of either version read each other's verdicts
// during a rolling upgrade. The sixth, period, is the open period (§5.13): earlier
// versions neither write nor read it, and leave it behind when they write a verdict, which
// is why it names the epoch it belongs to.
var fields = []string{"format", "epoch", "state", "since", "hos", "period"}

// maxEpoch keeps epochs exactly representable in the Lua scripts, whose numbers are
// doubles; a store that counted this far would need 2^53 transitions.
const maxEpoch = 1<<53 - 1

// shared is a verdict as it is held in Redis.
type shared struct {
	// epoch counts the state periods of the shared verdict: every state change bumps it,
	// and a compare-and-set succeeds only on top of the epoch the writer last knew.
	epoch uint64
	state breaker.State
	since time.Time // zero when the verdict has no known start
	// The open period (breaker.Verdict.ConsecutiveOpens and OpenTimeout); zero when the
	// writer did not say, and the adopting breaker then uses its own policy's.
	opens   int
	openFor time.Duration
}

func (s shared) verdict() breaker.Verdict {
	return breaker.Verdict{State: s.state, Since: s.since, ConsecutiveOpens: s.opens, OpenTimeout: s.openFor}
}

// samePeriod reports whether v is the state period s describes.
// Closed is closed whenever it started: a process that starts reads closed since its own
// start, and publishing that over an older closed verdict would only churn epochs.
func (s shared) samePeriod(v breaker.Verdict) bool {
	return s.state == v.State && (s.state == breaker.Closed || s.since.Equal(v.Since))
}

var errGarbage = errors.New("not a verdict")

// parseShared validates the raw fields of a verdict read from Redis or received on the
// channel. Everything is checked, because the key and the channel are shared with whatever
// else can reach the server: a value that does not parse is garbage, never a guess.
func parseShared(epoch, state, since, hos string) (shared, error) {
	var s shared
	e, err := strconv.ParseUint(epoch, 10, 64)
	if err != nil || e == 0 || e > maxEpoch {
		return s, fmt.Errorf("%w: epoch %.32q", errGarbage, epoch)
	}
	switch state {
	case "closed":
		s.state = breaker.Closed
	case "open":
		s.state = breaker.Open
	case "half_open":
		s.state = breaker.HalfOpen
	default:
		return s, fmt.Errorf("%w: state %.32q", errGarbage, state)
	}
	ns, err := strconv.ParseInt(since, 10, 64)
	if err != nil || ns < 0 {
		return s, fmt.Errorf("%w: since %.32q", errGarbage, since)
	}
	h, err := strconv.Atoi(hos)
	if err != nil || h < 0 || h > maxEpoch {
		return s, fmt.Errorf("%w: half-open successes %.32q", errGarbage, hos)
	}
	if s.state != breaker.HalfOpen && h != 0 {
		return s, fmt.Errorf("%w: half-open successes %d in state %s", errGarbage, h, s.state)
	}
	s.epoch = e
	if ns != 0 {
		s.since = time.Unix(0, ns).UTC()
	}
	return s, nil
}

// parsePeriod reads the period field of the verdict s: "<epoch> <opens> <ns>". A field
// written for another epoch (by this version, before an older one wrote the verdict) or
// absent says nothing; one that does not parse is garbage.
func parsePeriod(s shared, period string) (shared, error) {
	if period == "" {
		return s, nil
	}
	parts := strings.Split(period, " ")
	if len(parts) != 3 {
		return s, fmt.Errorf("%w: period %.48q", errGarbage, period)
	}
	e, err1 := strconv.ParseUint(parts[0], 10, 64)
	k, err2 := strconv.Atoi(parts[1])
	ns, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || k < 0 || k > maxEpoch || ns < 0 {
		return s, fmt.Errorf("%w: period %.48q", errGarbage, period)
	}
	if e == s.epoch {
		s.opens, s.openFor = k, time.Duration(ns)
	}
	return s, nil
}

// encodeSince writes a time as Unix nanoseconds; the zero time is 0. Times before 1970
// cannot be a verdict's start and are written as 0 too.
func encodeSince(t time.Time) string {
	if t.IsZero() || t.Before(time.Unix(0, 1)) {
		return "0"
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

// roundSince is what a local time looks like after a trip through Redis, so that a local
// verdict and the shared one it was published as compare equal.
func roundSince(t time.Time) time.Time {
	if t.IsZero() || t.Before(time.Unix(0, 1)) {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

// parseHash reads the reply of HMGET key format epoch state since hos. It reports ok=false
// for an absent key, and errGarbage for a hash that is not one of ours.
func parseHash(vals []any) (s shared, ok bool, err error) {
	if len(vals) != len(fields) {
		return s, false, fmt.Errorf("%w: %d fields", errGarbage, len(vals))
	}
	str := make([]string, len(vals))
	present := 0
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
		case string:
			str[i] = v
			present++
		default:
			return s, false, fmt.Errorf("%w: field %s is %T", errGarbage, fields[i], v)
		}
	}
	if present == 0 {
		// Either no key, or a hash with none of our fields: the latter is caught by the
		// compare-and-set script, which refuses to write over it.
		return s, false, nil
	}
	if str[0] != format {
		return s, false, fmt.Errorf("%w: format %.32q", errGarbage, str[0])
	}
	s, err = parseShared(str[1], str[2], str[3], str[4])
	if err == nil {
		s, err = parsePeriod(s, str[5])
	}
	return s, err == nil, err
}

// message is what the compare-and-set scripts publish: the format, the verdict, then the
// key, last so that it may hold any character.
func parseMessage(payload string) (key string, s shared, err error) {
	parts := strings.SplitN(payload, " ", 6)
	if len(parts) != 6 || parts[0] != format || parts[5] == "" {
		return "", s, fmt.Errorf("%w: message %.48q", errGarbage, payload)
	}
	s, err = parseShared(parts[1], parts[2], parts[3], parts[4])
	return parts[5], s, err
}
