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
)

// Handler returns the API's routes (docs/design.md §8).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/breakers/{name}/permits", s.acquire)
	mux.HandleFunc("POST /v1/permits/{permit}", s.settle)
	mux.HandleFunc("GET /v1/breakers/{name}", s.describe)
	mux.HandleFunc("POST /v1/breakers/{name}/trip", s.trip)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, status{"ok"}) })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

type status struct {
	Status string `json:"status"`
}

type acquireRequest struct {
	LeaseMs *int64 `json:"leaseMs"`
}

type acquireResponse struct {
	Permit  string `json:"permit"`
	State   string `json:"state"`
	LeaseMs int64  `json:"leaseMs"`
}

type refusal struct {
	State        string `json:"state"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retryAfterMs"`
}

// unknownRetryAfter is what a refused client is told to wait when the breaker cannot say
// (a saturated half-open period, a forced-open mode): long enough not to spin.
const unknownRetryAfter = time.Second

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var req acquireRequest
	if !readJSON(w, r, &req, true) {
		return
	}
	b, ok := s.breaker(w, r.PathValue("name"))
	if !ok {
		return
	}
	lease := b.Policy().OpenTimeout
	if req.LeaseMs != nil {
		if *req.LeaseMs <= 0 {
			writeError(w, http.StatusBadRequest, "leaseMs must be a positive number of milliseconds")
			return
		}
		lease = time.Duration(min(*req.LeaseMs, MaxLease.Milliseconds())) * time.Millisecond
	}
	lease = min(lease, MaxLease)

	done, err := b.Allow()
	if err != nil {
		s.refuse(w, b, err)
		return
	}
	id, ok := s.permits.add(done, lease, s.now())
	if !ok {
		// Too many permits outstanding (clients leaking them), or shutting down: the
		// call never happens, which is what a cancelled call says.
		done(context.Canceled)
		writeError(w, http.StatusServiceUnavailable, "too many outstanding permits, or shutting down; settle the ones you hold")
		return
	}
	writeJSON(w, http.StatusCreated, acquireResponse{Permit: id, State: b.State().String(), LeaseMs: lease.Milliseconds()})
}

func (s *Server) refuse(w http.ResponseWriter, b *breaker.Breaker, err error) {
	ref := refusal{State: b.State().String(), Reason: "open"}
	var oe *breaker.OpenError
	if errors.As(err, &oe) {
		ref.Reason = oe.Reason.String()
	}
	wait, ok := b.RetryAfter()
	if !ok || wait <= 0 {
		wait = unknownRetryAfter
	}
	ref.RetryAfterMs = int64(math.Ceil(float64(wait) / float64(time.Millisecond)))
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	writeJSON(w, http.StatusTooManyRequests, ref)
}

type settleRequest struct {
	Outcome    string `json:"outcome"`
	DurationMs *int64 `json:"durationMs"`
}

// errIgnored is the outcome "ignored": the call says nothing about the dependency, as a
// cancelled call does in the library (§5.6).
var errIgnored = context.Canceled

// errFailed is the outcome "failure"; the registry's classifier counts it as a failure.
var errFailed = errors.New("fuseboxd: the client reported a failure")

func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req settleRequest
	if !readJSON(w, r, &req, false) {
		return
	}
	var outcome error
	switch req.Outcome {
	case "success":
	case "failure":
		outcome = errFailed
	case "ignored":
		outcome = errIgnored
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("outcome %q: want \"success\", \"failure\" or \"ignored\"", req.Outcome))
		return
	}
	if req.DurationMs != nil && *req.DurationMs < 0 {
		writeError(w, http.StatusBadRequest, "durationMs must not be negative")
		return
	}
	done, ok := s.permits.take(r.PathValue("permit"))
	if !ok {
		writeError(w, http.StatusGone, "unknown permit: never issued, already settled, or its lease ran out")
		return
	}
	done(outcome)
	w.WriteHeader(http.StatusNoContent)
}

type description struct {
	Name       string          `json:"name"`
	State      string          `json:"state"`
	Mode       string          `json:"mode"`
	Counts     counts          `json:"counts"`
	Policy     json.RawMessage `json:"policy"`
	Generation int64           `json:"generation"`
}

type counts struct {
	Calls     int64 `json:"calls"`
	Failures  int64 `json:"failures"`
	Successes int64 `json:"successes"`
	Slow      int64 `json:"slow"`
}

func (s *Server) describe(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, ok := s.breaker(w, name)
	if !ok {
		return
	}
	cfg, _ := s.published(name)
	pub := breakerconfig.FromPolicy(name, cfg.Generation, b.Policy(), cfg.Scope)
	if pub.Scope == "" {
		pub.Scope = breakerconfig.ScopePod
	}
	policy, err := policyJSON(pub)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	c := b.Counts()
	writeJSON(w, http.StatusOK, description{
		Name: name, State: b.State().String(), Mode: pub.Mode,
		Counts:     counts{Calls: c.Calls, Failures: c.Failures, Successes: c.Successes, Slow: c.Slow},
		Policy:     policy,
		Generation: cfg.Generation,
	})
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

func (s *Server) trip(w http.ResponseWriter, r *http.Request) {
	b, ok := s.breaker(w, r.PathValue("name"))
	if !ok {
		return
	}
	b.Trip()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		writeJSON(w, http.StatusServiceUnavailable, status{"breaker config not loaded yet"})
		return
	}
	writeJSON(w, http.StatusOK, status{"ok"})
}

// breaker returns the breaker named name, creating it with the default policy if
// nothing is published under that name (as Registry.Get does), or writes why not.
func (s *Server) breaker(w http.ResponseWriter, name string) (*breaker.Breaker, bool) {
	if b, ok := s.reg.Lookup(name); ok {
		return b, true
	}
	// Breaker names are CircuitBreaker names (DNS subdomains); anything else could
	// never be published and would only grow the registry.
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("breaker name %q: %s", name, strings.Join(errs, "; ")))
		return nil, false
	}
	if _, ok := s.reg.LookupGroup(name); ok {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is a breaker Group, which this API does not serve", name))
		return nil, false
	}
	if _, published := s.published(name); !published && len(s.reg.Names()) >= s.maxBreakers {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("breaker %q is not published and %d breakers exist already", name, s.maxBreakers))
		return nil, false
	}
	return s.reg.Get(name), true
}

// readJSON decodes the request body into v, or writes a 400 or 413 and returns false.
// With optional, an empty body leaves v as it is.
func readJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxBody))
			return false
		}
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return false
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "malformed JSON body: more than one value")
		return false
	}
	return true
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
