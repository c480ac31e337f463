package fuseboxd

import (
	"bytes"
	"encoding/json"
	"errors"
)

// acquireBody is what an acquire's body says.
type acquireBody struct {
	leaseMs  int64
	hasLease bool
}

// settleBody is what a settle's body says.
type settleBody struct {
	outcome     string
	durationMs  int64
	hasDuration bool
}

// decodeAcquire decodes an acquire's body, which may be empty.
func decodeAcquire(body []byte) (acquireBody, error) {
	var a acquireBody
	if len(bytes.TrimSpace(body)) == 0 {
		return a, nil
	}
	ok := scanFlatObject(body, func(key []byte, _ []byte, num int64, isNum bool) bool {
		if string(key) != "leaseMs" || !isNum {
			return false
		}
		a.leaseMs, a.hasLease = num, true
		return true
	})
	if ok {
		return a, nil
	}
	var req struct {
		LeaseMs *int64 `json:"leaseMs"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return acquireBody{}, err
	}
	if req.LeaseMs != nil {
		return acquireBody{leaseMs: *req.LeaseMs, hasLease: true}, nil
	}
	return acquireBody{}, nil
}

// decodeSettle decodes a settle's body, which must be there.
func decodeSettle(body []byte) (settleBody, error) {
	var b settleBody
	ok := scanFlatObject(body, func(key []byte, str []byte, num int64, isNum bool) bool {
		switch {
		case string(key) == "outcome" && !isNum:
			b.outcome = outcomeWord(str)
		case string(key) == "durationMs" && isNum:
			b.durationMs, b.hasDuration = num, true
		default:
			return false
		}
		return true
	})
	if ok {
		return b, nil
	}
	var req struct {
		Outcome    string `json:"outcome"`
		DurationMs *int64 `json:"durationMs"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return settleBody{}, err
	}
	b = settleBody{outcome: req.Outcome}
	if req.DurationMs != nil {
		b.durationMs, b.hasDuration = *req.DurationMs, true
	}
	return b, nil
}

// outcomeWord returns str as a string, without allocating for the three outcomes.
func outcomeWord(str []byte) string {
	switch string(str) {
	case "success":
		return "success"
	case "failure":
		return "failure"
	case "ignored":
		return "ignored"
	}
	return string(str)
}

// decodeJSON is the general decoder, for any body scanFlatObject declines: one JSON
// value, as encoding/json reads it (keys matched without regard to case, unknown ones
// ignored), and nothing after it.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return errors.New("malformed JSON body: " + err.Error())
	}
	if dec.More() {
		return errors.New("malformed JSON body: more than one value")
	}
	return nil
}

// scanFlatObject reads body, without reflection or allocation, if it is one JSON object
// of the shape clients send: keys and string values in printable ASCII with no escapes,
// numbers that are integers of at most 18 digits, white space anywhere JSON allows it.
// It calls field for each member in order (str for a string, num for a number) and
// reports whether body had that shape and field accepted every member. On false the
// caller decodes body with encoding/json, which has the last word on anything else, so
// a body means the same whichever path reads it.
func scanFlatObject(body []byte, field func(key, str []byte, num int64, isNum bool) bool) bool {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body)
	}
	for {
		key, next, ok := scanString(body, i)
		if !ok {
			return false
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		i = skipSpace(body, i+1)
		if i >= len(body) {
			return false
		}
		if body[i] == '"' {
			str, next, ok := scanString(body, i)
			if !ok || !field(key, str, 0, false) {
				return false
			}
			i = next
		} else {
			num, next, ok := scanInteger(body, i)
			if !ok || !field(key, nil, num, true) {
				return false
			}
			i = next
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not JSON white
// space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the string that starts with the quote at b[i], if it has only
// printable ASCII and no escapes, and returns its contents and the index after it.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanInteger reads the JSON number at b[i] if it is an integer of 1 to 18 digits
// (no fraction, no exponent, no leading zero), and returns it and the index after it.
func scanInteger(b []byte, i int) (int64, int, bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var n int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		n = n*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}
