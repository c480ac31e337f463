package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// row finds the table line that starts with name (after the namespace, with -A).
func row(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i < len(f) && i < 2; i++ {
			if f[i] == name {
				return f
			}
		}
	}
	t.Fatalf("no row for %s in:\n%s", name, out)
	return nil
}

func TestStatusListsBreakers(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "alpha", nil)
	createBreaker(t, ns, "beta", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Scope = resiliencev1alpha1.ScopeFleet
		s.FleetQuorumPercent = ptr.To[int32](50)
	})
	setOverride(t, ns, "beta", resiliencev1alpha1.ModeForcedOpen, time.Now().Add(2*time.Hour+30*time.Second), "INC-1: provider down")
	report(t, ns, "app-0", tripped("alpha"))
	report(t, ns, "app-1", entry("alpha", resiliencev1alpha1.StateClosed, "Started"))
	waitState(t, ns, "alpha", resiliencev1alpha1.StateOpen, 1, 0, 1)

	out, _, err := kubectlFusebox(ctx, "-n", ns, "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "NAME") || !regexp.MustCompile(`^NAME\s+STATE\s+MODE\s+OVERRIDE\s+QUORUM\s+PODS\s+RETRIES\s+THROTTLED\s+AGE\n`).MatchString(out) {
		t.Errorf("header: want NAME STATE MODE OVERRIDE QUORUM PODS RETRIES THROTTLED AGE, got:\n%s", out)
	}
	if got, want := strings.Join(row(t, out, "alpha")[:6], " "), "alpha Open Enforce - - 1/0/1"; got != want {
		t.Errorf("alpha: got %q, want %q", got, want)
	}
	if got, want := strings.Join(row(t, out, "beta")[:10], " "), "beta - ForcedOpen (override) 120m left 50% 0/0/0 - -"; got != want {
		t.Errorf("beta: got %q, want %q", got, want)
	}

	all, _, err := kubectlFusebox(ctx, "-A", "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(all, "NAMESPACE") || !strings.Contains(all, ns+" ") {
		t.Errorf("-A: want a NAMESPACE column naming %s, got:\n%s", ns, all)
	}

	js, _, err := kubectlFusebox(ctx, "-n", ns, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list resiliencev1alpha1.CircuitBreakerList
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatalf("-o json: %v\n%s", err, js)
	}
	if len(list.Items) != 2 || list.Kind != "CircuitBreakerList" || list.Items[0].Kind != "CircuitBreaker" {
		t.Errorf("-o json: kind %q, %d items: %s", list.Kind, len(list.Items), js)
	}
	wide, _, err := kubectlFusebox(ctx, "-n", ns, "status", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^NAME\s+STATE\s+MODE\s+OVERRIDE\s+QUORUM\s+PODS\s+RETRIES\s+THROTTLED\s+AGE\s+SCOPE\s+REPORTING\s+LATEST CONFIG\s+CONSECUTIVE OPENS\s+OPEN PERIOD\n`).MatchString(wide) {
		t.Errorf("-o wide header:\n%s", wide)
	}
	if got, want := strings.Join(row(t, wide, "beta")[11:], " "), "Fleet 0 0 - -"; got != want {
		t.Errorf("-o wide beta's extra columns: got %q, want %q", got, want)
	}

	// kubectl's printers, through cli-runtime's PrintFlags.
	for _, tc := range []struct{ output, want string }{
		{"name", "circuitbreaker.resilience.fusebox.dev/alpha\ncircuitbreaker.resilience.fusebox.dev/beta\n"},
		{`jsonpath={range .items[*]}{.metadata.name}={.status.state};{end}`, "alpha=Open;beta=;"},
		{`go-template={{range .items}}{{.metadata.name}} {{.spec.scope}}|{{end}}`, "alpha Pod|beta Fleet|"},
	} {
		got, _, err := kubectlFusebox(ctx, "-n", ns, "status", "-o", tc.output)
		if err != nil || got != tc.want {
			t.Errorf("-o %s: got %q (%v), want %q", tc.output, got, err, tc.want)
		}
	}
	one, _, err := kubectlFusebox(ctx, "-n", ns, "status", "alpha", "-o", "jsonpath={.status.memberCounts.reporting}")
	if err != nil || one != "2" {
		t.Errorf("status alpha -o jsonpath: got %q (%v), want 2", one, err)
	}
	yml, _, err := kubectlFusebox(ctx, "-n", ns, "status", "beta", "-o", "yaml")
	if err != nil || !strings.HasPrefix(yml, "apiVersion: resilience.fusebox.dev/v1alpha1\nkind: CircuitBreaker\n") || strings.Contains(yml, "managedFields") {
		t.Errorf("status beta -o yaml (%v), want the object without managedFields:\n%s", err, yml)
	}
	if _, _, err := kubectlFusebox(ctx, "-n", ns, "status", "-o", "table"); err == nil || !strings.Contains(err.Error(), "want wide or one of") || !strings.Contains(err.Error(), "jsonpath") {
		t.Errorf("-o table: want an error listing the formats, got %v", err)
	}

	empty := newNamespace(t, "")
	_, errOut, err := kubectlFusebox(ctx, "-n", empty, "status")
	if err != nil || !strings.Contains(errOut, "No CircuitBreakers found in namespace "+empty) {
		t.Errorf("empty namespace: err %v, stderr %q", err, errOut)
	}
}

func TestStatusNameShowsMembersAndTransitions(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", nil)
	report(t, ns, "app-1", entry("payments", resiliencev1alpha1.StateClosed, "Started"))
	waitState(t, ns, "payments", resiliencev1alpha1.StateClosed, 0, 0, 1)
	report(t, ns, "app-0", tripped("payments"))
	waitState(t, ns, "payments", resiliencev1alpha1.StateOpen, 1, 0, 1)

	var out string
	testutil.Eventually(t, wait, "status payments shows the CircuitOpened transition", func() error {
		var err error
		out, _, err = kubectlFusebox(ctx, "-n", ns, "status", "payments")
		if err != nil {
			return err
		}
		if !regexp.MustCompile(`(?m)^\s+\S+\s+Warning\s+CircuitOpened\s+.*app-0`).MatchString(out) {
			return fmt.Errorf("no CircuitOpened line naming app-0:\n%s", out)
		}
		return nil
	})
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^State:\s+Open$`),
		regexp.MustCompile(`(?m)^Mode:\s+Enforce$`),
		regexp.MustCompile(`(?m)^Pods:\s+1 open, 0 half-open, 1 closed \(2 reporting`),
		regexp.MustCompile(`(?m)^\s+POD\s+STATE\s+SINCE\s+REASON\s+TRIGGER\s+RATE\s+CONSECUTIVE OPENS$`),
		regexp.MustCompile(`(?m)^\s+app-0\s+Open\s+\S+\s+Tripped\s+-\s+60% of 40\s+-$`),
		regexp.MustCompile(`(?m)^\s+app-1\s+Closed\s+\S+\s+Started\s+-\s+-\s+-$`),
		regexp.MustCompile(`(?m)^\s+LAST SEEN\s+TYPE\s+REASON\s+MESSAGE$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("status payments: no line matching %s in:\n%s", want, out)
		}
	}
	// Members come in the operator's order: open first.
	if strings.Index(out, "app-0") > strings.Index(out, "app-1") {
		t.Errorf("members: want app-0 (open) before app-1 (closed):\n%s", out)
	}

	_, _, err := kubectlFusebox(ctx, "-n", ns, "status", "nothing")
	if err == nil || err.Error() != fmt.Sprintf(`circuitbreaker "nothing" not found in namespace %q`, ns) {
		t.Errorf("unknown breaker: got %v", err)
	}
	if _, _, err := kubectlFusebox(ctx, "-A", "status", "payments"); err == nil || !strings.Contains(err.Error(), "-n") {
		t.Errorf("-A with a name: want an error pointing at -n, got %v", err)
	}
}

// The detail view of what the operator does not fill in yet on this branch
// (trigger, slow-call rate, consecutive opens, an override set by someone).
func TestDetailShowsEveryMemberColumn(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cb := &resiliencev1alpha1.CircuitBreaker{}
	cb.Name, cb.Namespace = "search", "shop"
	cb.Annotations = map[string]string{resiliencev1alpha1.AnnotationOverriddenBy: "alice@example.com"}
	cb.Spec.Mode = resiliencev1alpha1.ModeEnforce
	cb.Spec.Override = &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedClosed, Until: metaTime(now.Add(90 * time.Minute)), Reason: "load test"}
	cb.Status.State = resiliencev1alpha1.StateOpen
	cb.Status.Members = []resiliencev1alpha1.MemberStatus{{
		Pod: "app-3", PodCircuit: resiliencev1alpha1.PodCircuit{State: resiliencev1alpha1.StateOpen, Since: metaTime(now.Add(-2 * time.Minute)),
			Trigger: "SlowCallRate", FailureRatePercent: ptr.To[int32](10), SlowCallRatePercent: ptr.To[int32](80), Calls: ptr.To[int64](50), ConsecutiveOpens: 3}, Reason: "Tripped",
	}}
	var b strings.Builder
	if err := writeDetail(&b, cb, nil, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Mode:\s+ForcedClosed \(override; spec.mode Enforce\)$`),
		regexp.MustCompile(`(?m)^Override:\s+ForcedClosed until 2026-11-30T13:30:00Z \(90m left\), set by alice@example.com: load test$`),
		regexp.MustCompile(`(?m)^  POD     STATE   SINCE   REASON    TRIGGER        RATE                 CONSECUTIVE OPENS$`),
		regexp.MustCompile(`(?m)^  app-3   Open    2m      Tripped   SlowCallRate   10% slow 80% of 50   3$`),
		regexp.MustCompile(`(?m)^Transitions:  <none>$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("want a line matching %s in:\n%s", want, out)
		}
	}
}

func TestOpenCloseRelease(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "")
	createBreaker(t, ns, "payments", nil)

	before := time.Now()
	out, _, err := kubectlFusebox(ctx, "-n", ns, "open", "payments", "--for", "15m", "--reason", "INC-7: provider down")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "circuitbreaker/payments held ForcedOpen until ") {
		t.Errorf("open printed %q", out)
	}
	ov := getBreaker(t, ns, "payments").Spec.Override
	if ov == nil || ov.Mode != resiliencev1alpha1.ModeForcedOpen || ov.Reason != "INC-7: provider down" {
		t.Fatalf("after open: override %+v", ov)
	}
	lo, hi, until := before.Add(15*time.Minute).Add(-time.Second), time.Now().Add(15*time.Minute), ov.Until.Time
	if until.Before(lo) || until.After(hi) {
		t.Errorf("until %s: want now + 15m, between %s and %s", until, lo, hi)
	}

	// Days, as incidents are spoken of.
	out, _, err = kubectlFusebox(ctx, "-n", ns, "close", "payments", "--for", "1d12h", "--reason", "false positives")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, " (1d12h): false positives\n") {
		t.Errorf("close --for 1d12h printed %q", out)
	}
	cb := getBreaker(t, ns, "payments")
	if ov := cb.Spec.Override; ov == nil || ov.Mode != resiliencev1alpha1.ModeForcedClosed || ov.Reason != "false positives" ||
		time.Until(ov.Until.Time) < 36*time.Hour-time.Minute || time.Until(ov.Until.Time) > 36*time.Hour {
		t.Errorf("after close: override %+v, want until now + 36h", ov)
	}
	if cb.Spec.Mode != resiliencev1alpha1.ModeEnforce {
		t.Errorf("spec.mode %s: the override must leave it as it was", cb.Spec.Mode)
	}

	out, _, err = kubectlFusebox(ctx, "-n", ns, "release", "payments")
	if err != nil {
		t.Fatal(err)
	}
	if out != "circuitbreaker/payments released: mode Enforce applies\n" {
		t.Errorf("release printed %q", out)
	}
	if ov := getBreaker(t, ns, "payments").Spec.Override; ov != nil {
		t.Errorf("after release: override %+v", ov)
	}
	out, _, err = kubectlFusebox(ctx, "-n", ns, "release", "payments")
	if err != nil || !strings.Contains(out, "has no override") {
		t.Errorf("second release: err %v, printed %q", err, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"open", "payments", "--for", "15m"}, "--reason is required"},
		{[]string{"open", "payments", "--for", "15m", "--reason", "  "}, "--reason is required"},
		{[]string{"open", "payments", "--reason", "x"}, "--for is required"},
		{[]string{"close", "payments", "--for", "169h", "--reason", "x"}, "--for 7d1h: an override lasts at most 7d"},
		{[]string{"close", "payments", "--for", "8d", "--reason", "x"}, "--for 8d: an override lasts at most 7d"},
		{[]string{"close", "payments", "--for", "-5m", "--reason", "x"}, "--for -5m: must be positive"},
		{[]string{"open", "payments", "--for", "15m", "--reason", strings.Repeat("x", 257)}, "--reason is 257 characters long: at most 256"},
		{[]string{"open", "nothing", "--for", "15m", "--reason", "x"}, fmt.Sprintf(`circuitbreaker "nothing" not found in namespace %q`, ns)},
		{[]string{"release", "nothing"}, fmt.Sprintf(`circuitbreaker "nothing" not found in namespace %q`, ns)},
		{[]string{"open", "payments", "--for", "tomorrow", "--reason", "x"}, `invalid argument "tomorrow" for "--for" flag: want a duration such as 15m, 2h, 2d or 1d12h`},
	} {
		_, _, err := kubectlFusebox(ctx, append([]string{"-n", ns}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want an error containing %q, got %v", tc.args, tc.want, err)
		}
	}
	if ov := getBreaker(t, ns, "payments").Spec.Override; ov != nil {
		t.Errorf("after refused commands: override %+v, want none", ov)
	}
}

func TestWatchShowsStateChange(t *testing.T) {
	ns := newNamespace(t, "")
	createBreaker(t, ns, "orders", nil)
	report(t, ns, "app-0", entry("orders", resiliencev1alpha1.StateClosed, "Started"))
	waitState(t, ns, "orders", resiliencev1alpha1.StateClosed, 0, 0, 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- start(ctx, &out, &errOut, "-n", ns, "watch") }()
	closedRow := regexp.MustCompile(`(?m)^orders\s+Closed\s+Enforce\s+-\s+-\s+0/0/1\s`)
	testutil.Eventually(t, wait, "watch shows orders Closed", func() error {
		if !closedRow.MatchString(out.String()) {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		return nil
	})

	report(t, ns, "app-0", tripped("orders"))
	change := regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d  ` + regexp.QuoteMeta(ns) + `/orders: Closed -> Open\n(NAME.*\n)orders\s+Open\s+Enforce\s+-\s+-\s+1/0/0\s`)
	testutil.Eventually(t, wait, "watch shows the change to Open, then the new table", func() error {
		if !change.MatchString(out.String()) {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		return nil
	})
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("not a terminal: want no ANSI escapes, got %q", out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watch ended with %v, want nil on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end within 10s of its context")
	}
}

func TestWatchHighlightsOnATerminal(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var out testutil.SyncBuffer
	v := &watchView{o: &Options{Now: func() time.Time { return now }}, ns: "shop", color: true, breakers: map[string]Breaker{}, changed: map[string]stateChange{}, ready: true}
	v.o.Out = &out
	v.set(Breaker{Namespace: "shop", Name: "a", State: "Closed", Mode: "Enforce", SpecMode: "Enforce", Scope: "Pod"}, now)
	v.set(Breaker{Namespace: "shop", Name: "b", State: "Closed", Mode: "Enforce", SpecMode: "Enforce", Scope: "Pod"}, now)
	v.set(Breaker{Namespace: "shop", Name: "b", State: "Open", Mode: "Enforce", SpecMode: "Enforce", Scope: "Pod"}, now)
	if err := v.draw(); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		ansiClear,
		"a      \x1b[32mClosed\x1b[39m   Enforce", // coloured, not highlighted
		ansiBold + "b      \x1b[31mOpen\x1b[39m     Enforce",
		"<- was Closed" + ansiReset,
		"shop/b  Closed -> \x1b[31mOpen",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("want %q in %q", want, s)
		}
	}
}
