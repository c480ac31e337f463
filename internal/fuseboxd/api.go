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

// Handler returns the API's routes (docs/design.md §8) on net/http. [Server.Serve] answers
// the frequent requests itself (wire.go) and hands every other one to this handler, so
// that both give the same answers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/breakers/{name}/permits", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeAnswer(w, s.acquire(r.PathValue("name"), body, nil))
		}
	})
	mux.HandleFunc("POST /v1/permits/{permit}", func(w http.ResponseWriter, r *http.Request) {
		if body, ok := readBody(w, r); ok {
			writeAnswer(w, s.settle([]byte(r.PathValue("permit")), body))
		}
	})
	mux.HandleFunc("GET /v1/breakers/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, s.describe(r.PathValue("name")))
	})
	mux.HandleFunc("POST /v1/breakers/{name}/trip", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, s.trip(r.PathValue("name")))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeAnswer(w, healthy) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { writeAnswer(w, s.readyz()) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAnswer(w, errorAnswer(http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)))
	})
	return mux
}

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

// acquire answers POST /v1/breakers/{name}/permits, appending a 201's body to buf.
func (s *Server) acquire(name string, body, buf []byte) answer {
	req, err := decodeAcquire(body)
	if err != nil {
		return errorAnswer(http.StatusBadRequest, err.Error())
	}
	b, refused := s.breaker(name)
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

	done, err := b.Allow()
	if err != nil {
		return refuse(b, err)
	}
	id, ok := s.permits.add(done, lease, s.now())
	if !ok {
		// Too many permits outstanding (clients leaking them), or shutting down: the
		// call never happens, which is what a cancelled call says.
		done(context.Canceled)
		return errorAnswer(http.StatusServiceUnavailable, "too many outstanding permits, or shutting down; settle the ones you hold")
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

func refuse(b *breaker.Breaker, err error) answer {
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
	a := jsonAnswer(http.StatusTooManyRequests, ref)
	a.retryAfter = int64(math.Ceil(wait.Seconds()))
	return a
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
	Policy     json.RawMessage `json:"policy"`
	Generation int64           `json:"generation"`
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
	policy, err := policyJSON(pub)
	if err != nil {
		return errorAnswer(http.StatusInternalServerError, err.Error())
	}
	c := b.Counts()
	return jsonAnswer(http.StatusOK, description{
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
