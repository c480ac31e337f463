package plugin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// dashboardPage is the whole web UI: one page, its style and script inline,
// nothing fetched from anywhere but this server.
//
//go:embed dashboard.html
var dashboardPage []byte

const (
	// timelineLength is how many transitions the dashboard keeps and shows.
	timelineLength = 200
	// sseRetry is how long a browser waits before reconnecting, in ms.
	sseRetry = 2000
	// heartbeatEvery keeps idle connections (and proxies) from timing out.
	heartbeatEvery = 15 * time.Second
	// subscriberBuffer is how many messages a slow browser may fall behind
	// before it is cut off; it reconnects and gets a fresh snapshot.
	subscriberBuffer = 256
	// podReadsAtOnce bounds the reads of a breaker's pods in flight: each asks every
	// node agent, so a page clicked in a hurry costs the cluster a few at a time.
	podReadsAtOnce = 2
)

func newDashboardCommand(o *Options) *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web dashboard of the CircuitBreakers on localhost",
		Long: `Serve, on localhost, a web page with every CircuitBreaker of the namespace
(or of every namespace, with -A), kept live by watches: state, pods by state,
quorum, mode and override, and a timeline of transitions read from Events.
A breaker's "Pods" lists every pod that reports it, read from the node agents
on demand, as the pods command does.`,
		Example: `  kubectl fusebox dashboard -n shop
  kubectl fusebox dashboard -A --address 127.0.0.1:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.dashboard(cmd.Context(), address)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "Where to listen; port 0 picks a free one. Keep it on localhost: the page shows what your credentials can read.")
	return cmd
}

func (o *Options) dashboard(ctx context.Context, address string) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("--address %s: %w", address, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHub(ns, o.Now)
	pods, err := o.podsReader()
	if err != nil {
		return err
	}
	h.readPods = pods.read
	errc := make(chan error, 2)
	go func() { errc <- h.followBreakers(ctx, c) }()
	go func() {
		// Without the Events the page still shows every breaker; it says why
		// its timeline stays empty.
		if err := h.followEvents(ctx, c); err != nil && ctx.Err() == nil {
			fmt.Fprintf(o.ErrOut, "warning: no timeline of transitions: reading Events: %v\n", err)
		}
	}()

	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: onlyLoopbackHost(port, h.handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { errc <- srv.Serve(ln) }()
	where := "namespace " + ns
	if ns == "" {
		where = "every namespace"
	}
	fmt.Fprintf(o.Out, "Fusebox dashboard of %s: http://%s/ (Ctrl-C to stop)\n", where, ln.Addr())

	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	cancel()
	shutdown, done := context.WithTimeout(context.Background(), 2*time.Second)
	defer done()
	_ = srv.Shutdown(shutdown)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// message is one server-sent event: its type and its JSON data.
type message struct {
	event string
	data  []byte
}

// snapshot is everything the page shows, sent on every (re)connect.
type snapshot struct {
	Namespace string       `json:"namespace"`
	Breakers  []Breaker    `json:"breakers"`
	Timeline  []Transition `json:"timeline"`
	// Stale says why the view may be behind the cluster; "" when it is live.
	Stale string    `json:"stale,omitempty"`
	Now   time.Time `json:"now"`
}

// hub holds the dashboard's view of the cluster and fans its changes out to
// the connected browsers.
type hub struct {
	ns  string
	now func() time.Time
	// readPods reads a breaker's pods, on demand (GET /pods); nil serves none.
	readPods func(ctx context.Context, ns, name string) (*BreakerPods, error)
	podReads chan struct{} // a slot per read in flight

	mu       sync.Mutex
	breakers map[string]Breaker // by namespace/name
	timeline []Transition       // oldest first, at most timelineLength
	stale    string
	subs     map[chan message]struct{}
}

func newHub(ns string, now func() time.Time) *hub {
	return &hub{ns: ns, now: now, breakers: map[string]Breaker{}, subs: map[chan message]struct{}{}, podReads: make(chan struct{}, podReadsAtOnce)}
}

func (h *hub) followBreakers(ctx context.Context, c client.WithWatch) error {
	f := &follower{
		lw:      listWatch(c, func() client.ObjectList { return &resiliencev1alpha1.CircuitBreakerList{} }, client.ListOptions{Namespace: h.ns}),
		example: &resiliencev1alpha1.CircuitBreaker{},
		apply:   h.applyBreaker,
		lost:    h.lost,
		current: h.current,
	}
	return f.run(ctx)
}

// current tells the browsers their view is whole again: a fresh snapshot,
// with no word of being behind.
func (h *hub) current() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stale = ""
	h.broadcastLocked(h.snapshotLocked())
}

// applyBreaker applies one change of a CircuitBreaker and sends it out.
func (h *hub) applyBreaker(t watch.EventType, obj runtime.Object) {
	cb, ok := obj.(*resiliencev1alpha1.CircuitBreaker)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := cb.Namespace + "/" + cb.Name
	if t == watch.Deleted {
		delete(h.breakers, key)
		h.broadcastLocked(encode("deleted", map[string]string{"namespace": cb.Namespace, "name": cb.Name}))
		return
	}
	b := breakerView(cb, h.now())
	h.breakers[key] = b
	h.broadcastLocked(encode("breaker", b))
}

func (h *hub) followEvents(ctx context.Context, c client.WithWatch) error {
	f := &follower{
		lw: listWatch(c, func() client.ObjectList { return &corev1.EventList{} },
			client.ListOptions{Namespace: h.ns, FieldSelector: fields.SelectorFromSet(fields.Set(eventSelector("")))}),
		example: &corev1.Event{},
		apply: func(typ watch.EventType, obj runtime.Object) {
			e, ok := obj.(*corev1.Event)
			if !ok || typ == watch.Deleted {
				// An Event that expires leaves the timeline it was on as it was.
				return
			}
			t, ok := transitionOf(e)
			if !ok {
				return
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			h.addTransitionLocked(t)
			h.broadcastLocked(encode("transition", t))
		},
		lost:    h.lost,
		current: h.current,
	}
	return f.run(ctx)
}

// addTransitionLocked puts t into the timeline, replacing its earlier sight
// (a repeated Event), keeping it ordered and bounded.
func (h *hub) addTransitionLocked(t Transition) {
	for i := range h.timeline {
		if h.timeline[i].ID == t.ID {
			h.timeline = append(h.timeline[:i], h.timeline[i+1:]...)
			break
		}
	}
	h.timeline = append(h.timeline, t)
	sortTransitions(h.timeline)
	if len(h.timeline) > timelineLength {
		h.timeline = h.timeline[len(h.timeline)-timelineLength:]
	}
}

// lost tells the browsers their view may be behind, until the next list.
func (h *hub) lost(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stale = err.Error()
	h.broadcastLocked(encode("stale", map[string]string{"reason": h.stale}))
}

func (h *hub) snapshotLocked() message {
	s := snapshot{Namespace: h.ns, Breakers: make([]Breaker, 0, len(h.breakers)), Timeline: h.timeline, Stale: h.stale, Now: h.now().UTC()}
	for _, b := range h.breakers {
		s.Breakers = append(s.Breakers, b)
	}
	sortBreakers(s.Breakers)
	if s.Timeline == nil {
		s.Timeline = []Transition{}
	}
	return encode("snapshot", s)
}

// broadcastLocked queues m for every browser; one too far behind is cut off
// (its stream ends, it reconnects and starts again from a snapshot).
func (h *hub) broadcastLocked(m message) {
	for ch := range h.subs {
		select {
		case ch <- m:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// subscribe returns a stream that starts with a snapshot.
func (h *hub) subscribe() chan message {
	ch := make(chan message, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	ch <- h.snapshotLocked()
	h.subs[ch] = struct{}{}
	return ch
}

func (h *hub) unsubscribe(ch chan message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

func encode(event string, v any) message {
	data, err := json.Marshal(v)
	if err != nil {
		// Every value sent is a plain struct of strings, numbers and times.
		panic(fmt.Sprintf("dashboard: encode %s: %v", event, err))
	}
	return message{event: event, data: data}
}

func (h *hub) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		// The page loads nothing from elsewhere; say so to the browser too.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:")
		_, _ = w.Write(dashboardPage)
	})
	mux.HandleFunc("GET /events", h.serveEvents)
	mux.HandleFunc("GET /pods", h.servePods)
	return mux
}

// servePods answers GET /pods?namespace=NS&breaker=NAME: the breaker's pods as `pods
// NAME -o json` prints them, read when asked (the agents keep them; nothing watches
// them), or {"error": "..."}.
func (h *hub) servePods(w http.ResponseWriter, r *http.Request) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("breaker")
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]string{"error": msg})
	}
	switch {
	case ns == "" || name == "":
		fail(http.StatusBadRequest, "want ?namespace=NS&breaker=NAME")
		return
	case h.ns != "" && ns != h.ns:
		// The page shows what the user asked for on the command line, and no more.
		fail(http.StatusForbidden, fmt.Sprintf("this dashboard shows namespace %s only", h.ns))
		return
	case h.readPods == nil:
		fail(http.StatusNotFound, "this dashboard reads no pods")
		return
	}
	select {
	case h.podReads <- struct{}{}:
		defer func() { <-h.podReads }()
	case <-r.Context().Done():
		return
	}
	v, err := h.readPods(r.Context(), ns, name)
	if err != nil {
		fail(http.StatusBadGateway, err.Error())
		return
	}
	v.APIVersion, v.Kind = BreakerPodsAPIVersion, BreakerPodsKind
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// serveEvents is the server-sent event stream: a snapshot, then every change.
func (h *hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	ch := h.subscribe()
	defer h.unsubscribe(ch)
	if _, err := fmt.Fprintf(w, "retry: %d\n\n", sseRetry); err != nil {
		return
	}
	flusher.Flush()
	heartbeat := time.NewTicker(heartbeatEvery)
	defer heartbeat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
		case m, ok := <-ch:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, m.data); err != nil {
				return
			}
		}
		flusher.Flush()
	}
}
