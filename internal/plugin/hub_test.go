package plugin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// sseEvent reads the next event of a server-sent event stream.
func sseEvent(t *testing.T, r *bufio.Reader) (event, data string) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "retry: "):
			event = "retry"
		}
	}
}

// The stream a browser gets: a reconnect delay, a snapshot of everything,
// then each change; a repeated Event replaces its line in the timeline.
func TestEventStreamStartsWithSnapshotThenChanges(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := newHub("shop", func() time.Time { return now })
	cb := &resiliencev1alpha1.CircuitBreaker{}
	cb.Namespace, cb.Name = "shop", "payments"
	cb.Status.State = resiliencev1alpha1.StateClosed
	h.breakers["shop/payments"] = breakerView(cb, now)
	h.addTransitionLocked(Transition{ID: "shop/e1", Breaker: "payments", Reason: "CircuitOpened", Time: now.Add(-time.Minute), Count: 1})
	h.addTransitionLocked(Transition{ID: "shop/e1", Breaker: "payments", Reason: "CircuitOpened", Time: now, Count: 2})

	srv := httptest.NewServer(h.handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if ev, _ := sseEvent(t, r); ev != "retry" {
		t.Fatalf("first: %s, want the retry delay", ev)
	}
	ev, data := sseEvent(t, r)
	var s snapshot
	if err := json.Unmarshal([]byte(data), &s); ev != "snapshot" || err != nil {
		t.Fatalf("second: %s %s (%v), want a snapshot", ev, data, err)
	}
	if len(s.Breakers) != 1 || s.Breakers[0].State != "Closed" || len(s.Timeline) != 1 || s.Timeline[0].Count != 2 {
		t.Errorf("snapshot: %s", data)
	}

	open := cb.DeepCopy()
	open.Status.State = resiliencev1alpha1.StateOpen
	applyBreaker(h, watch.Modified, open)
	ev, data = sseEvent(t, r)
	var b Breaker
	if err := json.Unmarshal([]byte(data), &b); ev != "breaker" || err != nil || b.State != "Open" {
		t.Errorf("after the change: %s %s (%v), want the breaker Open", ev, data, err)
	}
	applyBreaker(h, watch.Deleted, open)
	if ev, data = sseEvent(t, r); ev != "deleted" || data != `{"name":"payments","namespace":"shop"}` {
		t.Errorf("after the delete: %s %s", ev, data)
	}

	page, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer page.Body.Close()
	if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("page CSP %q: want nothing loaded from elsewhere", csp)
	}
}

// A browser that stops reading is cut off rather than slowing the others.
func TestSlowSubscriberIsCutOff(t *testing.T) {
	h := newHub("shop", time.Now)
	ch := h.subscribe()
	h.mu.Lock()
	for range subscriberBuffer + 1 {
		h.broadcastLocked(message{event: "breaker", data: []byte("{}")})
	}
	subscribed := len(h.subs)
	h.mu.Unlock()
	if subscribed != 0 {
		t.Errorf("%d subscribers after overflowing the buffer, want 0", subscribed)
	}
	n := 0
	for range ch {
		n++
	}
	if n != subscriberBuffer {
		t.Errorf("%d messages delivered before the cut, want %d", n, subscriberBuffer)
	}
	h.unsubscribe(ch) // the handler's deferred call after the cut: no double close
}

// applyBreaker feeds h a watch event, as its follower does.
func applyBreaker(h *hub, t watch.EventType, cb *resiliencev1alpha1.CircuitBreaker) {
	h.applyBreaker(t, runtime.Object(cb))
}

// GET /pods reads a breaker's pods when asked, of the dashboard's namespace only: a page
// of one namespace's dashboard cannot make it read another's through the user's
// credentials.
func TestPodsEndpointKeepsToTheDashboardsNamespace(t *testing.T) {
	h := newHub("shop", time.Now)
	var asked []string
	h.readPods = func(_ context.Context, ns, name string) (*BreakerPods, error) {
		asked = append(asked, ns+"/"+name)
		return &BreakerPods{Metadata: BreakerRef{Namespace: ns, Name: name}, Pods: []PodLine{}, Agents: 2}, nil
	}
	srv := httptest.NewServer(h.handler())
	defer srv.Close()
	for _, tc := range []struct {
		query  string
		status int
		says   string
	}{
		{"?namespace=shop&breaker=payments", http.StatusOK, `"kind":"BreakerPods"`},
		{"?namespace=bank&breaker=payments", http.StatusForbidden, "this dashboard shows namespace shop only"},
		{"?breaker=payments", http.StatusBadRequest, "want ?namespace=NS&breaker=NAME"},
	} {
		resp, err := http.Get(srv.URL + "/pods" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.says) {
			t.Errorf("GET /pods%s: %d %s, want %d saying %s", tc.query, resp.StatusCode, body, tc.status, tc.says)
		}
	}
	if len(asked) != 1 || asked[0] != "shop/payments" {
		t.Errorf("pods read: %v, want shop/payments alone", asked)
	}
}
