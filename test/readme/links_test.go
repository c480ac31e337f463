package readme

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestREADMELinksResolve: every relative link and image of README.md names a file or
// directory of the repository, and a link with a #fragment names a heading of that
// Markdown file (or of the README itself), as GitHub spells the heading's anchor. Links
// to other sites are not followed: the tests reach nothing beyond this machine.
func TestREADMELinksResolve(t *testing.T) {
	links, err := readLinks(repoRoot, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	relative := 0
	for _, l := range links {
		if l.external() {
			continue
		}
		relative++
		if err := l.resolve(repoRoot); err != nil {
			t.Errorf("README.md:%d: link %q: %v", l.line, l.target, err)
		}
	}
	// The README links into docs/ for every feature past the first hour: a parser that
	// found none would pass the loop above without checking anything.
	if relative < 20 {
		t.Errorf("%d relative links found in README.md, want every link into docs/ and examples/ (at least 20)", relative)
	}
}

// TestAnchors: the heading anchors a link may name, as GitHub renders them, checked on
// headings of this repository's docs that other files link to.
func TestAnchors(t *testing.T) {
	doc := strings.Join([]string{
		"# Benchmarks",
		"```sh",
		"# not a heading: a comment in a code block",
		"```",
		"## How long `make test` takes (`.ci/run`)",
		"## pkg/breaker call path",
		"## The node agent (`--node`)",
		"## 9. Node agents: reports and config per node",
		"### A pod flapping its report (issue 18)",
		"## Retry budget",
		"## Retry budget",
		"## [Linked](elsewhere.md) *heading* ##",
	}, "\n")
	got := anchorsOf(doc)
	want := []string{
		"benchmarks",
		"how-long-make-test-takes-cirun",
		"pkgbreaker-call-path",
		"the-node-agent---node",
		"9-node-agents-reports-and-config-per-node",
		"a-pod-flapping-its-report-issue-18",
		"retry-budget",
		"retry-budget-1",
		"linked-heading",
	}
	if !slices.Equal(got, want) {
		t.Errorf("anchors:\n got %q\nwant %q", got, want)
	}
}

// link is one link or image of a Markdown file.
type link struct {
	file   string // the file it is in, relative to the repository root
	line   int
	target string // as written
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an optional title.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// referenceDef matches a reference definition: [label]: target.
	referenceDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan     = regexp.MustCompile("(`+)[^`]*?(`+)")
	fence        = regexp.MustCompile("^ {0,3}(```|~~~)")
	atxHeading   = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	markdownLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag      = regexp.MustCompile(`<[^>]+>`)
)

// readLinks returns the links of root/file, leaving out code blocks and code spans,
// which GitHub renders as text.
func readLinks(root, file string) ([]link, error) {
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []link
	inCode := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{file: file, line: n, target: m[1]})
		}
		if m := referenceDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{file: file, line: n, target: m[1]})
		}
	}
	return out, sc.Err()
}

// external reports whether the link names another site (or a mail address): it has a
// URL scheme.
func (l link) external() bool {
	u, err := url.Parse(l.target)
	return err == nil && u.Scheme != ""
}

// resolve checks that the link's path exists under root, within the repository, and
// that its fragment, if any, is an anchor of the Markdown file it names.
func (l link) resolve(root string) error {
	path, fragment, _ := strings.Cut(l.target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return err
	}
	var rel string
	switch {
	case path == "":
		rel = l.file // #fragment: a heading of this file
	case strings.HasPrefix(path, "/"):
		rel = filepath.Clean(strings.TrimPrefix(path, "/")) // GitHub: from the repository root
	default:
		rel = filepath.Clean(filepath.Join(filepath.Dir(l.file), path))
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s is outside the repository", rel)
	}
	info, err := os.Stat(filepath.Join(root, rel))
	if err != nil {
		return fmt.Errorf("no such file or directory in the repository: %s", rel)
	}
	if fragment == "" {
		return nil
	}
	if info.IsDir() || !strings.HasSuffix(rel, ".md") {
		return fmt.Errorf("#%s: %s is not a Markdown file, whose headings an anchor could name", fragment, rel)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	anchors := anchorsOf(string(data))
	if !slices.Contains(anchors, fragment) {
		return fmt.Errorf("%s has no heading whose anchor is #%s (its anchors: %s)", rel, fragment, strings.Join(anchors, " "))
	}
	return nil
}

// anchorsOf returns the anchors GitHub gives the ATX headings of a Markdown document, in
// order: the heading's text as rendered (links as their text, code spans as their code,
// no HTML tags), lower-cased, without what is neither a letter, a digit, a mark, a
// space, '-' nor '_', spaces made '-'; a repeated anchor gets -1, -2, ... Headings in code
// blocks are not headings.
func anchorsOf(doc string) []string {
	var out []string
	seen := map[string]int{}
	inCode := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\r\n")
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		m := atxHeading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		text := markdownLink.ReplaceAllString(m[1], "$1")
		text = htmlTag.ReplaceAllString(text, "")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor = fmt.Sprintf("%s-%d", anchor, n)
		} else {
			seen[anchor] = 1
		}
		out = append(out, anchor)
	}
	return out
}
