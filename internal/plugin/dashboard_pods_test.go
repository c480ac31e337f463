package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fusebox-dev/fusebox/internal/testutil"
)

// The dashboard's view of a breaker's pods: the "Pods" of its card reads them from the
// node agents when clicked, and shows them open first, with the agent that did not
// answer named; a click on another page's namespace is refused by the server.
func TestDashboardShowsABreakersPodsInChromium(t *testing.T) {
	browser := chromium(t)
	s := newPodsScene(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.SyncBuffer
	served := make(chan error, 1)
	go func() {
		served <- startWith(ctx, directFetcher(s.live, s.hung), &out, &errOut, "-n", s.ns, "dashboard")
	}()
	var url string
	testutil.Eventually(t, 30*time.Second, "the dashboard prints its URL", func() error {
		if url = dashboardURL.FindString(out.String()); url == "" {
			return fmt.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
		}
		return nil
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1360, 860))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(browserCtx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("Chromium (%s) loading %s: %v", browser, url, err)
	}
	within, cancelWithin := context.WithTimeout(browserCtx, 2*wait)
	defer cancelWithin()
	// The page redraws every second: what is read is read in one evaluation.
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(within, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	waitVisible := func(what, sel string) {
		t.Helper()
		if err := chromedp.Do(within, chromedp.WaitVisible(sel)); err != nil {
			t.Fatalf("%s (%s): %v (dashboard stderr: %s)", what, sel, err, errOut.String())
		}
	}

	card := fmt.Sprintf(`article.card[data-breaker="%s/payments"]`, s.ns)
	waitVisible("the card of payments", card)
	if hidden := eval(`String(document.getElementById("podview").hidden)`); hidden != "true" {
		t.Errorf("the pods' view shows before a breaker is picked (hidden=%s)", hidden)
	}
	if err := chromedp.Do(within, chromedp.Click(card+` button[data-role="pods"]`)); err != nil {
		t.Fatal(err)
	}
	waitVisible("the pods of payments", `#podview table[data-role="pods"] tr[data-pod]`)
	var rows []struct{ Pod, State, Standing, Via, Text string }
	raw := eval(`JSON.stringify([...document.querySelectorAll('#podview tr[data-pod]')].map(r =>
		({pod: r.dataset.pod, state: r.dataset.state, standing: r.dataset.standing, via: r.dataset.via, text: r.innerText})))`)
	if err := json.Unmarshal([]byte(raw), &rows); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	var order, standings []string
	for _, r := range rows {
		order, standings = append(order, r.Pod), append(standings, r.Standing)
	}
	if got, want := strings.Join(order, " "), strings.Join(s.order, " "); got != want {
		t.Errorf("the page lists:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(standings, " "), "open open halfopen refusing behind behind closed"; got != want {
		t.Errorf("standings:\n got %s\nwant %s", got, want)
	}
	if len(rows) > 0 && (!strings.Contains(rows[0].Text, s.live.node.Name) || !strings.Contains(rows[0].Text, "75%")) {
		t.Errorf("the first row says %q, want its node and failure rate", rows[0].Text)
	}
	for _, r := range rows {
		if r.Pod == "self-reporting" && (r.Via != ViaBreakerReport || !strings.Contains(r.Text, "own report")) {
			t.Errorf("the pod reporting on its own: %+v, want it marked", r)
		}
	}
	unanswered := eval(fmt.Sprintf(`(document.querySelector('#podview [data-role="unanswered"] li[data-agent="%s"]') || {}).innerText ?? ""`, s.hung.pod.Name))
	if !strings.Contains(unanswered, "did not answer within 2s") || !strings.Contains(unanswered, s.hung.node.Name) {
		t.Errorf("the hung agent is named %q, want its node and that it did not answer within 2s", unanswered)
	}
	if summary := eval(`document.querySelector("#podview .summary").innerText`); !strings.Contains(summary, "1 of 3 node agents answered") {
		t.Errorf("summary %q", summary)
	}
	if selected := eval(`document.querySelector("article.card.selected")?.dataset.breaker ?? ""`); selected != s.ns+"/payments" {
		t.Errorf("the selected card is %q", selected)
	}

	// The server reads the pods of the dashboard's namespace only, whatever a page asks.
	status, err := chromedp.Run(within, chromedp.Evaluate[string](`fetch("pods?namespace=kube-system&breaker=payments").then(r => String(r.status))`, chromedp.EvalAwaitPromise))
	if err != nil || status != "403" {
		t.Errorf("pods of another namespace: %s (%v), want 403", status, err)
	}

	// Closing hides the view.
	if err := chromedp.Do(within, chromedp.Click(card+` button[data-role="pods"]`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(within, chromedp.WaitNotVisible(`#podview`)); err != nil {
		t.Errorf("the pods' view stays after a second click: %v", err)
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
