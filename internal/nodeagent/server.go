package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// streamWriteTimeout bounds the write of one line of a config stream: a pod that stops
// reading for this long loses its stream, and reconnects when it reads again.
const streamWriteTimeout = 30 * time.Second

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+breakerconfig.AgentHealthPath, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET "+breakerconfig.AgentReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !a.Ready() {
			writeError(w, http.StatusServiceUnavailable, "not ready: the agent is learning its node, syncing its pods or reading back its reports")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("PUT "+breakerconfig.AgentReportPath, a.serveReport)
	mux.HandleFunc("GET "+breakerconfig.AgentConfigPath, a.serveConfig)
	mux.HandleFunc("GET "+breakerconfig.AgentPodsPath, a.servePods)
	for path, method := range map[string]string{breakerconfig.AgentReportPath: "PUT", breakerconfig.AgentConfigPath: "GET", breakerconfig.AgentPodsPath: "GET"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, path, method))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path)
	})
	return mux
}

// serveReport takes a pod's whole report: PUT breakerconfig.AgentReport.
func (a *Agent) serveReport(w http.ResponseWriter, r *http.Request) {
	id, ok := a.identify(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, breakerconfig.MaxAgentReportSize))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			a.refuse(w, refuse(http.StatusRequestEntityTooLarge, "the report is over %d bytes", breakerconfig.MaxAgentReportSize))
			return
		}
		a.refuse(w, refuse(http.StatusBadRequest, "cannot read the report: %v", err))
		return
	}
	rep, err := breakerconfig.ParseAgentReport(body)
	if err != nil {
		a.refuse(w, refuse(http.StatusBadRequest, "invalid report of pod %s: %s", id, oneLine(err)))
		return
	}
	if err := a.book.put(id, rep.Breakers); err != nil {
		a.refuse(w, err)
		return
	}
	writeJSON(w, http.StatusOK, breakerconfig.AgentAck{Agent: a.id})
}

// serveConfig answers the pod's namespace's config: GET one ConfigSnapshot, or with
// ?watch=true a stream of them, one line at once and one per change.
func (a *Agent) serveConfig(w http.ResponseWriter, r *http.Request) {
	id, ok := a.identify(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get(breakerconfig.AgentWatchParam) != "true" {
		s, err := a.configs.snapshot(r.Context(), id.namespace)
		if err != nil {
			a.refuse(w, refuse(http.StatusServiceUnavailable, "cannot read the config of namespace %s: %v", id.namespace, err))
			return
		}
		writeJSON(w, http.StatusOK, s)
		return
	}
	c := a.configs.acquire(id.namespace)
	defer a.configs.release(c)
	a.streams.Add(1)
	defer a.streams.Add(-1)
	w.Header().Set("Content-Type", breakerconfig.AgentStreamType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// The server's read deadline, there for request bodies, would end the stream: the
	// connection's idle read hitting it cancels the request.
	_ = rc.SetReadDeadline(time.Time{})
	// Every write has its deadline: a pod that stops reading loses its stream once the
	// connection's buffers are full and a write waits longer than this.
	send := func(line func() error) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(a.port.streamWrite))
		return line() == nil && rc.Flush() == nil
	}
	// The headers go at once, so that the pod knows it is connected before the first
	// list of a new watch has come back.
	if !send(func() error { return nil }) {
		return
	}
	enc := json.NewEncoder(w)
	// A stream with nothing to say gets a heartbeat, an empty line (a JSON decoder skips
	// it) every AgentHeartbeatInterval: the pod, which reconnects a stream silent for
	// AgentStreamTimeout, knows the agent is there, and the agent's data in flight makes
	// a vanished pod's connection fail (tcpUserTimeout) rather than linger.
	heartbeat := time.NewTimer(a.port.heartbeat)
	defer heartbeat.Stop()
	for {
		s, changed, synced := c.current()
		if synced && !send(func() error { return enc.Encode(s) }) {
			return
		}
		for quiet := true; quiet; {
			heartbeat.Reset(a.port.heartbeat)
			select {
			case <-r.Context().Done():
				return
			case <-changed:
				quiet = false
			case <-heartbeat.C:
				if !send(func() error { _, err := w.Write([]byte{'\n'}); return err }) {
					return
				}
			}
		}
	}
}

// identify returns the identity of a request from a pod bound to the agent's node, or
// answers the refusal and returns false: 503 before the agent is ready, 401 without a
// token the API server vouches for, 403 for another node's pod or one not bound here.
func (a *Agent) identify(w http.ResponseWriter, r *http.Request) (identity, bool) {
	if !a.Ready() {
		w.Header().Set("Retry-After", "1")
		a.refuse(w, refuse(http.StatusServiceUnavailable, "the agent of node %s is starting: ask again shortly", a.node))
		return identity{}, false
	}
	id, err := a.auth.authenticate(r.Context(), r.Header.Get("Authorization"), true)
	if err == nil {
		if r := id.asPod(); r != nil {
			err = r
		}
	}
	if err == nil && id.node != a.node {
		err = refuse(http.StatusForbidden, "the token is of pod %s on node %s: this agent serves node %s only", id, id.node, a.node)
	}
	if err == nil {
		err = a.pods.bound(r.Context(), id)
	}
	if err != nil {
		a.refuse(w, err)
		return identity{}, false
	}
	return id, true
}

// refuse answers err: a refusal with its status, anything else 500.
func (a *Agent) refuse(w http.ResponseWriter, err error) {
	var r *refusal
	if !errors.As(err, &r) {
		a.refused.add(http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	a.refused.add(r.status)
	if r.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fusebox-node"`)
	}
	writeError(w, r.status, r.msg)
}

// oneLine joins the errors err holds with "; ".
func oneLine(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var parts []string
		for _, e := range j.Unwrap() {
			parts = append(parts, e.Error())
		}
		return strings.Join(parts, "; ")
	}
	return err.Error()
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, breakerconfig.AgentError{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
