package gateserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
)

// Path is the gate's route, in net/http's pattern syntax.
const Path = "/v1/namespaces/{namespace}/circuitbreakers/{name}/gate"

// maxBodySize bounds a POST's body: Flagger's payload is a few hundred bytes.
const maxBodySize = 64 << 10

// Server is the gate's HTTPS server, a manager.Runnable. Every replica of the operator
// serves it, leader or not: each reads the same CircuitBreakers from its own cache.
type Server struct {
	opts   Options
	reader client.Reader
	access *access
	log    logr.Logger
}

var (
	_ manager.Runnable               = (*Server)(nil)
	_ manager.LeaderElectionRunnable = (*Server)(nil)
)

// New returns the gate's server. reader reads CircuitBreakers and Pods (the manager's
// cache); cfg and httpClient reach the API server for TokenReviews and
// SubjectAccessReviews, which the operator's role allows (config/rbac).
func New(cfg *rest.Config, httpClient *http.Client, reader client.Reader, opts Options) (*Server, error) {
	a, err := newAccess(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Server{opts: opts, reader: reader, access: a, log: logf.Log.WithName("gate")}, nil
}

// NeedLeaderElection is false: a gate answers from any replica.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	cfg, err := s.tlsConfig(ctx)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", s.opts.BindAddress)
	if err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	s.log.Info("Serving the rollout gate", "address", l.Addr().String(), "path", Path)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(l, cfg)) }()
	select {
	case err := <-done:
		return fmt.Errorf("gate: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("gate: shutdown: %w", err)
	}
	return nil
}

// tlsConfig serves the certificate of CertDir, reloaded as it changes, or else a
// self-signed one. HTTP/2 is not offered: its stream handling has had denial-of-service
// bugs (CVE-2023-44487, CVE-2023-39325), and a gate's one small answer gains nothing
// from it.
func (s *Server) tlsConfig(ctx context.Context) (*tls.Config, error) {
	cfg := &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	if s.opts.CertDir != "" {
		crt, key := filepath.Join(s.opts.CertDir, "tls.crt"), filepath.Join(s.opts.CertDir, "tls.key")
		if exists(crt) && exists(key) {
			w, err := certwatcher.New(crt, key)
			if err != nil {
				return nil, fmt.Errorf("gate: certificate in %s: %w", s.opts.CertDir, err)
			}
			go func() {
				if err := w.Start(ctx); err != nil {
					s.log.Error(err, "Watching the gate's certificate failed", "dir", s.opts.CertDir)
				}
			}()
			cfg.GetCertificate = w.GetCertificate
			return cfg, nil
		}
		s.log.Info("No tls.crt and tls.key in the gate's certificate directory: serving a self-signed certificate", "dir", s.opts.CertDir)
	}
	crt, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("localhost", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		return nil, fmt.Errorf("gate: self-signed certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("gate: self-signed certificate: %w", err)
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Handler routes the gate's path; every other path is 404 and every other method 405,
// in JSON like every answer.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			s.serveGet(w, r)
		case http.MethodPost:
			s.servePost(w, r)
		default:
			w.Header().Set("Allow", "GET, POST")
			writeError(w, http.StatusMethodNotAllowed, "%s: the gate answers GET (Argo Rollouts' web provider, kubectl fusebox gate) and POST (Flagger's webhooks)", r.Method)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "no such path: the gate is GET or POST /v1/namespaces/NAMESPACE/circuitbreakers/NAME/gate?revision=R[&baseline=B]")
	})
	return mux
}

// serveGet answers a judgement, 200 whatever its phase: the caller reads the phase.
func (s *Server) serveGet(w http.ResponseWriter, r *http.Request) {
	u, ok := s.authenticated(w, r, "")
	if !ok {
		return
	}
	q := r.URL.Query()
	j, code, err := s.judge(r.Context(), u, r.PathValue("namespace"), r.PathValue("name"), question{revision: q.Get("revision"), baseline: q.Get("baseline")})
	if err != nil {
		writeError(w, code, "%s", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// authenticated returns who sent r, or answers 401 and returns false. A token the API
// server refuses and an API server that cannot be asked look alike to the authenticator
// (both are errors), so both are 401, with what it said.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request, token string) (user.Info, bool) {
	u, ok, err := s.access.authenticate(r, token)
	if err == nil && ok {
		return u, true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="fusebox-gate"`)
	msg := "a bearer token the API server accepts is required (Authorization: Bearer, or metadata.token in a Flagger webhook's body)"
	if err != nil {
		s.log.V(1).Info("Gate request not authenticated", "error", err.Error())
		msg += ": " + err.Error()
	}
	writeError(w, http.StatusUnauthorized, "%s", msg)
	return nil, false
}

// question is what the caller asks about: a revision, or a selector of its pods, and a
// baseline ("" for the default).
type question struct {
	revision, baseline, selector string
}

// judge answers u's question about the CircuitBreaker namespace/name, or an error with
// the status code that says whose it is.
func (s *Server) judge(ctx context.Context, u user.Info, namespace, name string, q question) (gate.Judgement, int, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return gate.Judgement{}, http.StatusBadRequest, fmt.Errorf("namespace %q: %s", namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return gate.Judgement{}, http.StatusBadRequest, fmt.Errorf("circuitbreaker name %q: %s", name, errs[0])
	}
	// Asked before anything is read, so that a caller without access learns nothing,
	// not even whether the breaker exists.
	allowed, reason, err := s.access.mayGet(ctx, u, namespace, name)
	if err != nil && !allowed {
		s.log.Error(err, "Authorizing a gate request failed", "user", u.GetName())
		return gate.Judgement{}, http.StatusInternalServerError, errors.New("the API server could not authorize the request: try again")
	}
	if !allowed {
		s.log.V(1).Info("Gate request refused", "user", u.GetName(), "namespace", namespace, "name", name, "reason", reason)
		return gate.Judgement{}, http.StatusForbidden, fmt.Errorf("%s may not get circuitbreakers.%s %q in namespace %q: bind a role that may (the fusebox-gate-reader ClusterRole)",
			u.GetName(), resiliencev1alpha1.GroupVersion.Group, name, namespace)
	}
	if q.revision == "" && q.selector != "" {
		rev, err := s.revisionOf(ctx, namespace, q.selector)
		if err != nil {
			return gate.Judgement{}, http.StatusBadRequest, err
		}
		if rev == "" {
			return gate.Judgement{Phase: gate.PhaseInconclusive, Reason: fmt.Sprintf(
				"no running pod in namespace %s matches selector %q with a revision label: nothing to judge yet", namespace, q.selector)}, 0, nil
		}
		q.revision = rev
	}
	cb := &resiliencev1alpha1.CircuitBreaker{}
	if err := s.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cb); err != nil {
		if apierrors.IsNotFound(err) {
			return gate.Judgement{}, http.StatusNotFound, fmt.Errorf("circuitbreaker %q not found in namespace %q", name, namespace)
		}
		s.log.Error(err, "Reading a CircuitBreaker for the gate failed", "namespace", namespace, "name", name)
		return gate.Judgement{}, http.StatusInternalServerError, errors.New("the operator could not read the breaker: try again")
	}
	j, err := gate.Judge(cb, q.revision, q.baseline)
	if err != nil {
		return gate.Judgement{}, http.StatusBadRequest, err
	}
	s.log.V(1).Info("Gate judged", "user", u.GetName(), "namespace", namespace, "name", name,
		"revision", j.Revision.Revision, "phase", j.Phase, "reason", j.Reason)
	return j, 0, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is every refusal's body.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorBody{Error: fmt.Sprintf(format, args...)})
}
