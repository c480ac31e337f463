package fuseboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// answer is one response of the API, whichever server writes it.
type answer struct {
	code int
	// retryAfter is the Retry-After header, in seconds; zero means none.
	retryAfter int64
	// body is the JSON document and a newline, as json.Encoder writes it; nil for 204.
	body []byte
}

type status struct {
	Status string `json:"status"`
}

type refusal struct {
	State        string `json:"state"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// unknownRetryAfter is what a refused client is told to wait when the breaker cannot say
// (a saturated half-open period, a forced-open mode): long enough not to spin.
const unknownRetryAfter = time.Second

// acquire answers POST /v1/breakers/{name}/permits for from, appending a 201's body
// to buf.
func (s *Server) acquire(name, body []byte, from client, buf []byte) answer {
	req, err := decodeAcquire(body)
	if err != nil {
		return errorAnswer(http.StatusBadRequest, err.Error())
	}
	e, b, refused := s.breakerNamed(name)
	if b == nil {
		return refused
	}
	lease := b.Policy().OpenTimeout
	if req.hasLease {
		if req.leaseMs <= 0 {
			return errorAnswer(http.StatusBadRequest, "leaseMs must be a positive number of milliseconds")
		}
		lease = time.Duration(min(req.leaseMs, MaxLease.Milliseconds())) * time.Millisecond
	}
	lease = min(lease, MaxLease)

	// Allow waits up to the policy's maxWait for a slot of a concurrency limit, which the
	// answer's write deadline leaves room for (serveWire, MaxLimitWait).
	done, err := b.Allow()
	if err != nil {
		return refuse(b, err)
	}
	// A permit of a breaker with a concurrency limit holds a slot, which a lapse must give
	// back (permits.expire). Read after Allow: a limit set meanwhile counts.
	id, short := s.permits.add(done, lease, s.now(), from, &e.permits, b.Policy().MaxInFlight > 0)
	if short != noShortage {
		// The call never happens, which is what a cancelled call says: a probe's slot
		// is free again at once.
		done(context.Canceled)
		return s.refuseShort(e, b, short, from)
	}
	// {"permit":"<id>","state":"<state>","leaseMs":N}: the id is base32 and the state one
	// of State.String()'s words, neither of which JSON escapes.
	buf = append(buf, `{"permit":"`...)
	buf = append(buf, id...)
	buf = append(buf, `","state":"`...)
	buf = append(buf, b.State().String()...)
	buf = append(buf, `","leaseMs":`...)
	buf = strconv.AppendInt(buf, lease.Milliseconds(), 10)
	buf = append(buf, "}\n"...)
	return answer{code: http.StatusCreated, body: buf}
}

// Refusal reasons: the breaker's (its circuit open, held open by ForcedOpen, half-open
// with its probes all taken, adaptive throttling, or its concurrency limit reached), and
// those of an acquire a cap of the daemon refused: the client's permits, the daemon's, or
// its connections ran out.
const (
	reasonOpen          = "open"
	reasonForcedOpen    = "forced_open"
	reasonProbes        = "half_open_saturated"
	reasonThrottled     = "throttled"
	reasonConcurrency   = "concurrency"
	reasonClientPermits = "client_permits_exhausted"
	reasonPermits       = "permits_exhausted"
	reasonConnections   = "connections_exhausted"
)

// refuseShort answers an acquire that add refused. A cap reached is a refusal like the
// breaker's own, 429 with the breaker's state, which clients take as a short-circuit
// and run their fallback: a client that leaks permits or holds connections must not
// make the others read "unreachable" and fail open, which would switch the breaker off
// for the whole pod.
func (s *Server) refuseShort(e *breakerEntry, b *breaker.Breaker, short shortage, from client) answer {
	switch short {
	case clientAtCap:
		if s.warnings.due(clientAtCap) {
			s.log.Warn("A client holds as many permits as it may; its acquires are refused until it settles some or they lapse",
				"client", from.String(), "breaker", e.name, "maxPermitsPerClient", s.permits.maxPerClient)
		}
		return s.refuseAtCap(e, b, reasonClientPermits)
	case tableAtCap:
		if s.warnings.due(tableAtCap) {
			s.log.Warn("The daemon holds as many permits as it may; every acquire is refused until some are settled or lapse",
				"breaker", e.name, "maxPermits", s.permits.max)
		}
		return s.refuseAtCap(e, b, reasonPermits)
	}
	return errorAnswer(http.StatusServiceUnavailable, "shutting down")
}

// refuseAtCap is the refusal of an acquire on b that a cap stopped.
func (s *Server) refuseAtCap(e *breakerEntry, b *breaker.Breaker, reason string) answer {
	e.permits.refusedAtCap.Add(1)
	a := jsonAnswer(http.StatusTooManyRequests, refusal{
		State: b.State().String(), Reason: reason, RetryAfterMs: unknownRetryAfter.Milliseconds(),
	})
	a.retryAfter = int64(unknownRetryAfter / time.Second)
	return a
}

// concurrencyRetryAfter is what a client refused by a concurrency limit is told to wait:
// a slot frees as soon as a call in flight ends, which a short call does within
// milliseconds, so the hint is short; the header says 1, its least.
const concurrencyRetryAfter = 100 * time.Millisecond

func refuse(b *breaker.Breaker, err error) answer {
	wait, timed := b.RetryAfter()
	st := b.State()
	ref := refusal{State: st.String(), Reason: refusalReason(err, timed, st)}
	switch {
	case ref.Reason == reasonConcurrency:
		wait = concurrencyRetryAfter
	case !timed || wait <= 0:
		wait = unknownRetryAfter
	}
	ref.RetryAfterMs = int64(math.Ceil(float64(wait) / float64(time.Millisecond)))
	a := jsonAnswer(http.StatusTooManyRequests, ref)
	a.retryAfter = int64(math.Ceil(wait.Seconds()))
	return a
}

// refusalReason says why b refused a call with err, read right after: its concurrency limit
// or throttled (the error says so); open while its open period is timed (RetryAfter), else held open by ForcedOpen;
// and otherwise refused by the half-open probe cap, or by it just before the circuit
// closed.
func refusalReason(err error, timed bool, st breaker.State) string {
	switch {
	case errors.Is(err, breaker.ErrConcurrencyLimited):
		// Not a short-circuit of the circuit, which admitted the call: clients still run
		// their fallback for it, as for every 429.
		return reasonConcurrency
	case errors.Is(err, breaker.ErrThrottled):
		return reasonThrottled
	case timed:
		return reasonOpen
	case st == breaker.Open:
		return reasonForcedOpen
	}
	return reasonProbes
}

// errIgnored is the outcome "ignored": the call says nothing about the dependency, as a
// cancelled call does in the library (§5.6).
var errIgnored = context.Canceled

// errFailed is the outcome "failure"; the registry's classifier counts it as a failure.
var errFailed = errors.New("fuseboxd: the client reported a failure")

// settle answers POST /v1/permits/{permit}.
func (s *Server) settle(permit, body []byte) answer {
	req, err := decodeSettle(body)
	if err != nil {
		return errorAnswer(http.StatusBadRequest, err.Error())
	}
	var outcome error
	switch req.outcome {
	case "success":
	case "failure":
		outcome = errFailed
	case "ignored":
		outcome = errIgnored
	default:
		return errorAnswer(http.StatusBadRequest, fmt.Sprintf("outcome %q: want \"success\", \"failure\" or \"ignored\"", req.outcome))
	}
	if req.hasDuration && req.durationMs < 0 {
		return errorAnswer(http.StatusBadRequest, "durationMs must not be negative")
	}
	done, ok := s.permits.take(permit)
	if !ok {
		return errorAnswer(http.StatusGone, "unknown permit: never issued, already settled, or its lease ran out")
	}
	done(outcome)
	return answer{code: http.StatusNoContent}
}

type description struct {
	Name       string          `json:"name"`
	State      string          `json:"state"`
	Mode       string          `json:"mode"`
	Counts     counts          `json:"counts"`
	Permits    permitFigures   `json:"permits"`
	Policy     json.RawMessage `json:"policy"`
	Generation int64           `json:"generation"`
	// Candidate is what the breaker's candidate policy (its policy under "policy",
	// "candidate") did in shadow, as a report entry says it; absent without one.
	Candidate *breakerconfig.CandidateEntry `json:"candidate,omitempty"`
	// Concurrency is what the breaker's concurrency limit holds; absent without one.
	Concurrency *concurrencyFigures `json:"concurrency,omitempty"`
}

// concurrencyFigures are a concurrency limit's figures as JSON (docs/design.md §12): the
// limit in force (the pod's share, or its adaptive limit under it), the most calls in
// flight at once over the window, the calls it refused, and the adaptive limiter's
// baseline latency ("" before it has one).
type concurrencyFigures struct {
	Limit        int    `json:"limit"`
	InFlightPeak int64  `json:"inFlightPeak"`
	Limited      int64  `json:"limited"`
	Baseline     string `json:"baseline,omitempty"`
}

// concurrencyOf is b's concurrency figures, nil without a limit.
func concurrencyOf(b *breaker.Breaker) *concurrencyFigures {
	if b.Policy().MaxInFlight <= 0 {
		return nil
	}
	t := b.Traffic()
	f := &concurrencyFigures{Limit: t.Limit, InFlightPeak: t.InFlightPeak, Limited: t.Limited}
	if t.Baseline > 0 {
		f.Baseline = t.Baseline.String()
	}
	return f
}

// permitFigures are permitCounts as JSON: what a leaking client holds and leaves behind.
type permitFigures struct {
	Held         int64 `json:"held"`
	Lapsed       int64 `json:"lapsed"`
	RefusedAtCap int64 `json:"refusedAtCap"`
}

type counts struct {
	Calls     int64 `json:"calls"`
	Failures  int64 `json:"failures"`
	Successes int64 `json:"successes"`
	Slow      int64 `json:"slow"`
}

// describe answers GET /v1/breakers/{name}.
func (s *Server) describe(name string) answer {
	b, refused := s.breaker(name)
	if b == nil {
		return refused
	}
	cfg, _ := s.published(name)
	pub := kube.ConfigOf(name, cfg.Generation, b.Policy(), cfg.Scope)
	if pub.Scope == "" {
		pub.Scope = breakerconfig.ScopePod
	}
	st, judged := b.Candidate()
	if judged {
		// The candidate the agent set from the published document.
		pub.Candidate = cfg.Candidate
	}
	if pub.Concurrency != nil && cfg.Concurrency != nil {
		// The division as published: the policy's MaxInFlight is this pod's limit, which
		// "concurrency" below shows in force.
		pub.Concurrency = cfg.Concurrency
	}
	policy, err := policyJSON(pub)
	if err != nil {
		return errorAnswer(http.StatusInternalServerError, err.Error())
	}
	c := b.Counts()
	var p permitFigures
	if e := s.entry(name); e != nil {
		p = permitFigures{Held: e.permits.held.Load(), Lapsed: e.permits.lapsed.Load(), RefusedAtCap: e.permits.refusedAtCap.Load()}
	}
	return jsonAnswer(http.StatusOK, description{
		Name: name, State: b.State().String(), Mode: pub.Mode,
		Counts:      counts{Calls: c.Calls, Failures: c.Failures, Successes: c.Successes, Slow: c.Slow},
		Permits:     p,
		Policy:      policy,
		Generation:  cfg.Generation,
		Candidate:   candidateOf(st, judged),
		Concurrency: concurrencyOf(b),
	})
}

func candidateOf(st breaker.CandidateStats, judged bool) *breakerconfig.CandidateEntry {
	if !judged {
		return nil
	}
	return kube.CandidateEntryOf(st)
}

// policyJSON is the published document's policy fields, with the §4 names and
// spellings, without what identifies the document (name, generation, uid) or the fleet's
// verdict.
func policyJSON(c breakerconfig.Config) (json.RawMessage, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	for _, k := range []string{"name", "generation", "uid", "verdict"} {
		delete(fields, k)
	}
	return json.Marshal(fields)
}

// trip answers POST /v1/breakers/{name}/trip.
func (s *Server) trip(name string) answer {
	b, refused := s.breaker(name)
	if b == nil {
		return refused
	}
	b.Trip()
	return answer{code: http.StatusNoContent}
}

var healthy = jsonAnswer(http.StatusOK, status{"ok"})

func (s *Server) readyz() answer {
	if !s.ready() {
		return jsonAnswer(http.StatusServiceUnavailable, status{"breaker config not loaded yet"})
	}
	return healthy
}

// breakerEntry is what the daemon keeps of a breaker beside the registry: its name,
// interned so that the wire finds a breaker a worker names on every call without
// allocating a string, and its permits' counts.
type breakerEntry struct {
	name    string
	permits permitCounts
}

// entry returns the entry of the breaker named name, made on first use; nil if the
// registry has no such breaker, so that entries are bounded as the registry is
// (Options.MaxBreakers and the published names).
func (s *Server) entry(name string) *breakerEntry {
	s.namesMu.RLock()
	e := s.names[name]
	s.namesMu.RUnlock()
	if e != nil {
		return e
	}
	if _, exists := s.reg.Lookup(name); !exists {
		return nil
	}
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	if e = s.names[name]; e == nil {
		e = &breakerEntry{name: name}
		s.names[name] = e
	}
	return e
}

// breakerNamed is breaker for a name as the wire has it, and the breaker's entry., and the breaker's entry.
func (s *Server) breakerNamed(name []byte) (*breakerEntry, *breaker.Breaker, answer) {
	s.namesMu.RLock()
	e := s.names[string(name)]
	s.namesMu.RUnlock()
	if e != nil {
		if b, ok := s.reg.Lookup(e.name); ok {
			return e, b, answer{}
		}
	}
	n := string(name)
	b, refused := s.breaker(n)
	if b == nil {
		return nil, nil, refused
	}
	return s.entry(n), b, answer{}
}

// breaker returns the breaker named name, creating it with the default policy if
// nothing is published under that name (as Registry.Get does); or nil and the answer
// that says why not.
func (s *Server) breaker(name string) (*breaker.Breaker, answer) {
	if b, ok := s.reg.Lookup(name); ok {
		return b, answer{}
	}
	// Breaker names are CircuitBreaker names (DNS subdomains); anything else could
	// never be published and would only grow the registry.
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, errorAnswer(http.StatusBadRequest, fmt.Sprintf("breaker name %q: %s", name, strings.Join(errs, "; ")))
	}
	if _, ok := s.reg.LookupGroup(name); ok {
		return nil, errorAnswer(http.StatusBadRequest, fmt.Sprintf("%q is a breaker Group, which this API does not serve", name))
	}
	if _, published := s.published(name); !published && len(s.reg.Names()) >= s.maxBreakers {
		return nil, errorAnswer(http.StatusBadRequest, fmt.Sprintf("breaker %q is not published and %d breakers exist already", name, s.maxBreakers))
	}
	return s.reg.Get(name), answer{}
}

// readBody reads the request body, or writes a 413 (over MaxBody) or a 400 and returns
// false.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeAnswer(w, errorAnswer(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxBody)))
			return nil, false
		}
		writeAnswer(w, errorAnswer(http.StatusBadRequest, "reading the request body: "+err.Error()))
		return nil, false
	}
	return body, true
}

type errorBody struct {
	Error string `json:"error"`
}

func errorAnswer(code int, msg string) answer {
	return jsonAnswer(code, errorBody{msg})
}

func jsonAnswer(code int, v any) answer {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return answer{code: http.StatusInternalServerError, body: []byte(`{"error":"encoding the answer failed"}` + "\n")}
	}
	return answer{code: code, body: buf.Bytes()}
}

// writeAnswer writes a on net/http.
func writeAnswer(w http.ResponseWriter, a answer) {
	if a.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(a.retryAfter, 10))
	}
	if a.body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.code)
	_, _ = w.Write(a.body)
}
