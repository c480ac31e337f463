package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// screenshotEnv names where TestDashboardInChromium saves its screenshot
// (`make dashboard-screenshot` points it at docs/images/dashboard.png).
const screenshotEnv = "DASHBOARD_SCREENSHOT"

// chromium finds the browser; without one the test skips, except in CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const why = "no chromium on PATH: the dashboard is tested in a real headless browser (apt-get install -y chromium; .ci/run installs it)"
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip("SKIPPED: " + why)
	return ""
}

var dashboardURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)

// TestDashboardInChromium serves the dashboard of a namespace and loads it in
// headless Chromium: it shows the breakers, and a card turns Open when a pod
// trips, pushed by the server-sent events.
func TestDashboardInChromium(t *testing.T) {
	// Parallel with the other long test (the candidate across ten pods): each has its
	// own namespace, and most of their time is Chromium's start and the operator's work.
	t.Parallel()
	browser := chromium(t)
	ns := newNamespace(t, "shop")
	// A namespace worth a screenshot: a Pod breaker with three pods, a Fleet
	// one with a quorum, one held closed by an override, one no pod runs yet.
	createBreaker(t, ns, "payments-api", nil)
	createBreaker(t, ns, "inventory", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Scope = resiliencev1alpha1.ScopeFleet
		s.FleetQuorumPercent = ptr.To[int32](50)
		fleetPolicies(s)
		s.Concurrency = &resiliencev1alpha1.Concurrency{MaxInFlight: 30}
	})
	createBreaker(t, ns, "search", nil)
	createBreaker(t, ns, "recommendations", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Mode = resiliencev1alpha1.ModeMetricsOnly
	})
	// Held open by its spec, before any pod runs it: what every pod will do is
	// known, so the card says that rather than "No reports".
	createBreaker(t, ns, "legacy-billing", func(s *resiliencev1alpha1.CircuitBreakerSpec) {
		s.Mode = resiliencev1alpha1.ModeForcedOpen
	})
	setOverride(t, ns, "search", resiliencev1alpha1.ModeForcedClosed, time.Now().Add(45*time.Minute), "INC-4211: search index rebuild, errors expected")
	// The override made search's generation 2; the pods run it.
	searchClosed := entry("search", resiliencev1alpha1.StateClosed, "Forced")
	searchClosed.ConfigGeneration = getBreaker(t, ns, "search").Generation
	for _, pod := range []string{"checkout-0", "checkout-1", "checkout-2"} {
		report(t, ns, pod,
			entry("payments-api", resiliencev1alpha1.StateClosed, "Started"),
			withConcurrency(withTraffic(entry("inventory", resiliencev1alpha1.StateClosed, "Started"), 100, 50, 10, 20), 4, 2),
			searchClosed)
	}
	waitState(t, ns, "payments-api", resiliencev1alpha1.StateClosed, 0, 0, 3)
	waitState(t, ns, "search", resiliencev1alpha1.StateClosed, 0, 0, 3)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.SyncBuffer
	served := make(chan error, 1)
	go func() { served <- start(ctx, &out, &errOut, "-n", ns, "dashboard") }()
	var url string
	testutil.Eventually(t, wait, "the dashboard prints its URL", func() error {
		if url = dashboardURL.FindString(out.String()); url == "" {
			return fmt.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
		}
		return nil
	})

	started := time.Now()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // as root, in a container
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1360, 860),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	// The first action starts the browser, for as long as browserCtx lives:
	// no timeout on it; the waits below get theirs.
	if err := chromedp.Do(browserCtx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("Chromium (%s) loading %s: %v", browser, url, err)
	}
	within, cancelWithin := context.WithTimeout(browserCtx, 2*wait)
	defer cancelWithin()
	// The page redraws its cards every second: a node found by one DevTools
	// call may be gone by the next, so a property is read in one evaluation.
	property := func(sel, prop string) string {
		t.Helper()
		quoted, err := json.Marshal(sel)
		if err != nil {
			t.Fatal(err)
		}
		s, err := chromedp.Run(within, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {}).%s ?? ""`, quoted, prop)))
		if err != nil {
			t.Fatalf("%s of %s: %v", prop, sel, err)
		}
		return s
	}
	text := func(sel string) string { t.Helper(); return property(sel, "innerText") }
	class := func(sel string) string { t.Helper(); return property(sel, "className") }
	waitVisible := func(what, sel string) {
		t.Helper()
		if err := chromedp.Do(within, chromedp.WaitVisible(sel)); err != nil {
			t.Fatalf("%s (%s): %v (dashboard stderr: %s)", what, sel, err, errOut.String())
		}
	}

	card := func(name string) string { return fmt.Sprintf(`article.card[data-breaker="%s/%s"]`, ns, name) }
	waitVisible("payments-api shows Closed", card("payments-api")+`[data-state="Closed"]`)
	waitVisible("recommendations shows", card("recommendations"))
	t.Logf("page up in Chromium %s after launch", time.Since(started).Round(time.Millisecond))
	title, err := chromedp.Run(within, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if connection := text(`#conn`); title != "Fusebox" || connection != "live" {
		t.Errorf("title %q, connection %q: want Fusebox, live", title, connection)
	}
	if held := text(card("search") + ` [data-role="override"]`); !strings.Contains(held, "Held closed") || !strings.Contains(held, "left") || !strings.Contains(held, "INC-4211") {
		t.Errorf("search's override box says %q", held)
	}
	// Forced modes, by spec or by override, are drawn as what they are.
	waitVisible("legacy-billing shows its forced mode", card("legacy-billing")+`.forced[data-mode="ForcedOpen"][data-state="Unknown"]`)
	if state := text(card("legacy-billing") + ` [data-role="state"]`); state != "Forced open" {
		t.Errorf("legacy-billing (ForcedOpen, no reports): state badge %q, want Forced open", state)
	}
	waitVisible("search shows its override's mode", card("search")+`.forced[data-mode="ForcedClosed"][data-state="Closed"]`)
	if state, forced := text(card("search")+` [data-role="state"]`), text(card("search")+` [data-role="forced"]`); state != "Closed" || forced != "Forced closed" {
		t.Errorf("search (override ForcedClosed, pods Closed): state %q, forced %q; want Closed, Forced closed", state, forced)
	}
	// The fleet's ratios: 30 retries of 270 first attempts, 60 of 300 requests throttled.
	if facts := text(card("inventory") + ` dl`); !strings.Contains(facts, "11% of first attempts (budget 20% + 10/s)") ||
		!strings.Contains(facts, "20% of requests (k 2)") {
		t.Errorf("inventory's card does not show the fleet's retry and throttle ratios: %q", facts)
	}
	// The fleet's limit of 30 in three shares of 10; each pod's peak 4 and 2 refusals.
	if c := text(card("inventory") + ` [data-role="concurrency"]`); c != "12 of 30 in flight at the pods' peaks · 10 a pod × 3 · 6 refused" {
		t.Errorf("inventory's card shows its concurrency as %q", c)
	}
	if cls := class(card("payments-api")); cls == "" || strings.Contains(cls, "forced") {
		t.Errorf("payments-api (Enforce): class %q, want a card with no forced mark", cls)
	}

	// A pod trips: its report says Open, the operator opens the resource, the
	// watch feeds the page.
	report(t, ns, "checkout-1",
		tripped("payments-api"),
		entry("inventory", resiliencev1alpha1.StateClosed, "Started"),
		searchClosed)
	waitVisible("payments-api turns Open", card("payments-api")+`[data-state="Open"]`)
	if state, pods := text(card("payments-api")+` [data-role="state"]`), text(card("payments-api")+` [data-role="pods"]`); state != "Open" || !strings.HasPrefix(pods, "1 open · 0 half-open · 2 closed") {
		t.Errorf("payments-api card: state %q, pods %q", state, pods)
	}
	waitVisible("the timeline shows CircuitOpened", fmt.Sprintf(`#timeline li[data-reason="CircuitOpened"][data-breaker="%s/payments-api"]`, ns))
	if timeline := text(`#timeline`); !strings.Contains(timeline, "checkout-1") {
		t.Errorf("timeline does not name the pod that tripped: %q", timeline)
	}
	// Issue 35: why it is open, and each pod, on the card; the timeline's times in UTC,
	// as the messages beside them write theirs; names wrapped between words.
	if why := text(card("payments-api") + ` [data-role="why"]`); !strings.Contains(why, "Pod checkout-1 opened the circuit") {
		t.Errorf("payments-api's card says why %q, want the Open condition's message", why)
	}
	if members := text(card("payments-api") + ` [data-role="members"]`); !strings.Contains(members, "checkout-0") || !strings.Contains(members, "checkout-2") {
		t.Errorf("payments-api's card lists pods %q", members)
	}
	if open := property(card("payments-api")+` [data-role="members"] li[data-state="Open"]`, "innerText"); open != "checkout-1" {
		t.Errorf("the open pod on payments-api's card: %q, want checkout-1", open)
	}
	if when := text(`#timeline li[data-reason="CircuitOpened"] .when`); !regexp.MustCompile(`^\d\d:\d\d:\d\dZ · `).MatchString(when) {
		t.Errorf("timeline time %q, want UTC as hh:mm:ssZ", when)
	}
	wrap, err := chromedp.Run(within, chromedp.Evaluate[string](`(() => { const s = getComputedStyle(document.querySelector("article.card h2")); return s.overflowWrap + " " + s.wordBreak; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if wrap != "anywhere normal" {
		t.Errorf("breaker names wrap as %q, want anywhere normal (between words first)", wrap)
	}

	// A reconnect (the server's or the network's) starts from a full snapshot.
	if err := chromedp.Do(within, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	waitVisible("payments-api is Open after a reload", card("payments-api")+`[data-state="Open"]`)

	if err := chromedp.Do(within, chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(within, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 600 {
		t.Errorf("screenshot is %v, want the 1360x860 window", b)
	}
	if path := os.Getenv(screenshotEnv); path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s", path)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("dashboard ended with %v, want nil on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dashboard did not end within 10s of its context")
	}
}
