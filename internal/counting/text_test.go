package counting

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// What a pod writes reaches terminals through the status and Events: escape sequences and
// other control characters are removed whole, the length is bounded (issue 29).
func TestReportText(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "fleet.requests: must be at least 0", "fleet.requests: must be at least 0"},
		{"empty", "", ""},
		{"colour (CSI SGR)", "\x1b[31;1mred\x1b[0m alert", "red alert"},
		{"cursor moves and erase", "ok\x1b[2K\x1b[1A\x1b[999Dforged line", "okforged line"},
		{"private CSI", "a\x1b[?25lb", "ab"},
		{"window title (OSC, BEL)", "\x1b]0;pwned\x07title", "title"},
		{"hyperlink (OSC 8, ST)", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"an OSC never terminated", "before\x1b]52;c;cGF5bG9hZA==", "before"},
		{"device control string", "a\x1bPq#0;2;0;0;0\x1b\\b", "ab"},
		{"two-character escapes", "a\x1bcb\x1b7c\x1b8", "abc"},
		{"charset designation", "a\x1b(0b", "ab"},
		{"8-bit CSI", "a\u009b31mb", "ab"},
		{"8-bit OSC and ST", "a\u009d0;x\u009cb", "ab"},
		{"a lone ESC at the end", "a\x1b", "a"},
		{"C0 controls", "a\x00b\x07c\x08d\x7f", "abcd"},
		{"newlines and tabs fold into spaces", "line one\n\tline two\r\n", "line one line two"},
		{"runs of spaces fold", "  a   b  ", "a b"},
		{"bidi overrides", "user\u202etxt.exe\u202c", "usertxt.exe"},
		{"zero-width characters", "a\u200bb\ufeffc", "abc"},
		{"invalid UTF-8", "a\xffb", "a\ufffdb"},
		{"non-ASCII text stays", "ungültig: größer als 100 %", "ungültig: größer als 100 %"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(tc.in, 100)
			if got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !printable(got) {
				t.Errorf("Text(%q) = %q holds a control character", tc.in, got)
			}
			if Text(got, 100) != got {
				t.Errorf("Text is not idempotent on %q", got)
			}
		})
	}
}

// printable reports whether s is valid UTF-8 with no control or formatting character.
func printable(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

func TestReportTextIsBounded(t *testing.T) {
	long := strings.Repeat("é", 300)
	got := Text(long, MaxConfigErrorText)
	if n := utf8.RuneCountInString(got); n != MaxConfigErrorText || !strings.HasSuffix(got, truncated) {
		t.Errorf("%d characters %q..., want %d ending in %q", n, got[:10], MaxConfigErrorText, truncated)
	}
	if got := Text(strings.Repeat("a", MaxConfigErrorText), MaxConfigErrorText); len(got) != MaxConfigErrorText || strings.HasSuffix(got, truncated) {
		t.Errorf("a text at the bound was cut: %q", got)
	}
	// The escape sequences do not count towards the bound: they are gone.
	padded := strings.Repeat("\x1b[0m", 500) + "short"
	if got := Text(padded, 10); got != "short" {
		t.Errorf("got %q", got)
	}
	if got := Text("abc", 0); got != "" {
		t.Errorf("limit 0: %q", got)
	}
}

func TestEventNote(t *testing.T) {
	if n := EventNote("short"); n != "short" {
		t.Errorf("got %q", n)
	}
	long := strings.Repeat("ü", MaxEventNote) // two bytes each
	n := EventNote(long)
	if len(n) > MaxEventNote || !utf8.ValidString(n) || !strings.HasSuffix(n, truncated) {
		t.Errorf("%d bytes, valid %v", len(n), utf8.ValidString(n))
	}
}

// A text that needs nothing done costs no allocation: every report's configError and
// worst keys pass through Text on every reconcile.
func TestReportTextDoesNotAllocateForPlainText(t *testing.T) {
	s := "pod checkout-7d9f: fleet.requests: must be at least 0"
	if n := testing.AllocsPerRun(100, func() { _ = Text(s, MaxConfigErrorText) }); n != 0 {
		t.Errorf("%v allocations for a plain text", n)
	}
}

func FuzzReportText(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[31mred", "\x1b]0;t\x07", "a\u009b1mb", "\xff\xfe", "a\u202eb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s, 64)
		if !printable(got) || strings.ContainsRune(got, 0x1b) {
			t.Fatalf("Text(%q) = %q", s, got)
		}
		if utf8.RuneCountInString(got) > 64 {
			t.Fatalf("Text(%q) = %q: longer than the bound", s, got)
		}
		if again := Text(got, 64); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
		// The shortcut says plain only of what the full pass leaves as it is.
		if isPlainText(s, 64) && plainText(s, 64) != s {
			t.Fatalf("isPlainText(%q), but the full pass makes it %q", s, plainText(s, 64))
		}
	})
}
