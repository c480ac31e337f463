package counting

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// What a pod writes as text (its configError, a Group's key names, and, carried by a node
// agent, its pod name) is copied into the CircuitBreaker's status, its conditions and its
// Events, which people read in terminals (kubectl describe, kubectl get -o yaml,
// kubectl fusebox). A pod's text is its own word, so it is made harmless first:
// Text drops control characters, whole terminal escape sequences with them, and
// the invisible formatting characters that reorder or hide text, and bounds the length.
// The report itself keeps what the pod wrote.

// Bounds of the pod text the operator copies.
const (
	// MaxConfigErrorText is how much of a pod's configError the status, the
	// conditions and the Events show: more than any refusal the library writes,
	// and a quarter of what the report may hold, so that the five refusals a
	// message names fit in it with their pods' names.
	MaxConfigErrorText = 256
	// MaxNameText bounds a pod's or a key's name as shown: a Kubernetes name's
	// longest, and status.keys.worst's schema bound.
	MaxNameText = 253
	// MaxEventNote is the most an Event's note may hold (events.k8s.io/v1 refuses a
	// longer one, and the Event is then lost).
	MaxEventNote = 1024
)

// truncated marks a text that was cut to its bound.
const truncated = "…"

// Text returns s made fit for status text: valid UTF-8, every terminal escape
// sequence (CSI, OSC and the other string sequences, in their 7-bit and 8-bit forms)
// removed whole, every other control or formatting character removed, whitespace
// (tabs, newlines) folded into single spaces and trimmed, and at most limit characters,
// the last of them "…" when it was cut. A text that is fit already is returned as it is,
// without allocating.
func Text(s string, limit int) string {
	if isPlainText(s, limit) {
		return s
	}
	return plainText(s, limit)
}

// plainText is Text without the shortcut for a text that is plain already.
func plainText(s string, limit int) string {
	var b strings.Builder
	b.Grow(min(len(s), 4*limit))
	space := false // a space is due before the next printable character
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == 0x1b:
			i = skipEscape(s, i)
		case r == 0x9b: // CSI, 8-bit form
			i = skipControlSequence(s, i)
		case r == 0x90 || r == 0x98 || r == 0x9d || r == 0x9e || r == 0x9f: // DCS, SOS, OSC, PM, APC
			i = skipControlString(s, i)
		case unicode.IsSpace(r):
			space = b.Len() > 0
		case unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r):
			// dropped: a control or an invisible formatting character
		default:
			if space {
				b.WriteByte(' ')
				space = false
			}
			b.WriteRune(r) // utf8.RuneError for a byte that is no UTF-8
		}
	}
	return cut(b.String(), limit)
}

// isPlainText reports whether s needs no change: valid UTF-8 of printable characters and
// single inner spaces, at most limit of them. Every reconcile passes every reporting
// pod's text through here, so printable ASCII, what nearly every report holds, takes one
// tight pass over the bytes.
func isPlainText(s string, limit int) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c > ' ' && c < 0x7f:
		case c == ' ':
			if i == 0 || i == len(s)-1 || s[i-1] == ' ' {
				return false
			}
		case c < utf8.RuneSelf:
			return false // a control character
		default:
			return isPlainUnicode(s, limit)
		}
	}
	return len(s) <= limit
}

// isPlainUnicode is isPlainText for a text that is not all ASCII.
func isPlainUnicode(s string, limit int) bool {
	n := 0
	prevSpace := true // a leading space needs trimming
	for _, r := range s {
		n++
		switch {
		case n > limit, r == utf8.RuneError:
			return false
		case r == ' ':
			if prevSpace {
				return false
			}
			prevSpace = true
			continue
		case r < 0x20, r >= 0x7f && r < 0xa0, r > 0x7f && (unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)):
			return false
		}
		prevSpace = false
	}
	return !prevSpace || n == 0
}

// cut returns s at most limit characters long, ending in "…" when it was longer.
func cut(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	if limit <= 0 {
		return ""
	}
	n := 0
	for i := range s {
		if n == limit-1 {
			return strings.TrimRight(s[:i], " ") + truncated
		}
		n++
	}
	return s
}

// skipEscape returns where the escape sequence whose ESC ended just before i ends.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch c := s[i]; {
	case c == '[':
		return skipControlSequence(s, i+1)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return skipControlString(s, i+1)
	case c >= 0x20 && c <= 0x2f: // intermediates, then one final character
		for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
			i++
		}
		if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
			i++
		}
		return i
	case c >= 0x30 && c <= 0x7e: // a two-character sequence
		return i + 1
	}
	return i
}

// skipControlSequence returns where the control sequence whose introducer ended just
// before i ends: parameter and intermediate bytes, then one final byte.
func skipControlSequence(s string, i int) int {
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
		i++
	}
	if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipControlString returns where the control string (an operating system command, a
// device control string, ...) whose introducer ended just before i ends: at its string
// terminator (ESC \ or its 8-bit form) or a BEL, which terminals also accept, or at the
// end of s.
func skipControlString(s string, i int) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case 0x07, 0x9c:
			return i + size
		case 0x1b:
			if i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			return i // another sequence starts: the string was never terminated
		}
		i += size
	}
	return i
}

// EventNote is note cut to what an Event may hold, at a character boundary.
func EventNote(note string) string {
	if len(note) <= MaxEventNote {
		return note
	}
	end := MaxEventNote - len(truncated)
	for end > 0 && !utf8.RuneStart(note[end]) {
		end--
	}
	return note[:end] + truncated
}
