// Package sampleapp is the simulated workload of `make run`: a few pods of a small
// application, each a real pkg/breaker/kube connection, calling a local upstream that fails and
// recovers on a cycle, so that the CircuitBreakers of a local control plane have pods that
// report, open and close.
//
// The pods are simulated: each has a Pod object in the API server, a service account bound
// to the role Fusebox ships for applications, and a BreakerReport written under its own
// pod-bound identity (impersonated, with the pod-name and pod-uid extras a kubelet-issued
// token carries, so the admission policy of config/policy judges every write). No container
// runs: the local control plane has no kubelet, and the Pods stay Pending. The calls are
// made from this process on each pod's behalf, through httpbreaker, with that pod's breakers.
package sampleapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/httpbreaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
	"github.com/fusebox-dev/fusebox/pkg/breaker/registry"
)

// Options say what to simulate. The zero value of each field means its default.
type Options struct {
	// Config reaches the API server as a cluster administrator: it creates the Pods and
	// RBAC objects, and impersonates each pod.
	Config *rest.Config
	// Namespace of the pods; they call every CircuitBreaker of this namespace. Default
	// "default", where config/samples puts its breakers.
	Namespace string
	// App names the application: its Pods are <App>-0, <App>-1, ..., its service account
	// is <App>. Default "checkout".
	App string
	// Pods is how many pods run. Default 3.
	Pods int
	// ClientRole is the file of the ClusterRole Fusebox ships for applications
	// (config/rbac/breaker_client_role.yaml), relative to the working directory.
	ClientRole string
	// Cycle is how the upstream fails and recovers. Default DefaultCycle.
	Cycle Cycle
	// Clock times the cycle; nil means the real clock. A test that has seen what it waits
	// for in the healthy part of the cycle moves it on, rather than wait the rest out.
	// Only the upstream's schedule reads it: the breakers, their reports and the operator
	// keep real time.
	Clock clock.PassiveClock
	// CallEvery is how often each pod calls each of its breakers. Default 100ms.
	CallEvery time.Duration
	// Logger receives what the pods' agents have to say; nil discards it.
	Logger *slog.Logger
	// Say receives one line each time the upstream starts or stops failing; nil for none.
	Say func(line string)
}

// Cycle is the upstream's schedule, repeated from the moment the workload starts: for
// Failing, starting Healthy into each Period, it answers 503 to every pod but the last;
// the rest of the time it answers 200 to all.
type Cycle struct {
	Healthy, Failing, Period time.Duration
}

// DefaultCycle fails 15 s after the start for 20 s, then every minute. Against the samples'
// policies (a 10 s window of at least 20 calls and 30 s open for payments-api; 5 s and 20 s
// for inventory) each breaker opens during the failure and closes within the minute.
var DefaultCycle = Cycle{Healthy: 15 * time.Second, Failing: 20 * time.Second, Period: time.Minute}

// failing tells whether the upstream fails at elapsed time since the start.
func (c Cycle) failing(elapsed time.Duration) bool {
	at := elapsed % c.Period
	return at >= c.Healthy && at < c.Healthy+c.Failing
}

// Workload is a running simulated workload.
type Workload struct {
	// Pods are the names of the simulated pods; all but the last see the upstream fail.
	Pods []string
	// Upstream is the local address the pods call.
	Upstream string

	o       Options
	started time.Time                // on o.Clock
	names   atomic.Pointer[[]string] // the namespace's CircuitBreakers, which every pod calls
	done    chan struct{}
}

// Start creates the workload's objects in the API server, starts its upstream and its
// pods, and returns; everything runs until ctx is done, then Done is closed.
func Start(ctx context.Context, o Options) (*Workload, error) {
	o = withDefaults(o)
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	cl, err := client.New(o.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if err := grantClientRole(ctx, cl, o); err != nil {
		return nil, err
	}
	w := &Workload{o: o, started: o.Clock.Now(), done: make(chan struct{})}
	w.names.Store(&[]string{})
	if err := w.listBreakers(ctx, cl); err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w.Upstream = "http://" + ln.Addr().String()
	var pods []*corev1.Pod
	for i := range o.Pods {
		p, err := createPod(ctx, cl, o, fmt.Sprintf("%s-%d", o.App, i))
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		pods = append(pods, p)
		w.Pods = append(w.Pods, p.Name)
	}
	srv := &http.Server{Handler: w.upstream(), ReadHeaderTimeout: 5 * time.Second}

	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	for _, p := range pods {
		agent, err := kube.Connect(ctx, kube.Options{
			Config: asPod(o.Config, p), Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Logger: o.Logger,
		})
		if err != nil {
			_ = srv.Close()
			return nil, fmt.Errorf("connect pod %s: %w", p.Name, err)
		}
		wg.Go(func() { w.callLoop(ctx, p.Name, agent.Registry()) })
		wg.Go(func() { <-agent.Done() })
	}
	wg.Go(func() { w.follow(ctx, cl) })
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		wg.Wait()
		close(w.done)
	}()
	return w, nil
}

// Done is closed once every goroutine of the workload has returned.
func (w *Workload) Done() <-chan struct{} { return w.done }

// Describe says, in a few lines, what runs and that it is simulated.
func (w *Workload) Describe() string {
	c := w.o.Cycle
	last := w.Pods[len(w.Pods)-1]
	return fmt.Sprintf("a simulated workload: Pods %s in namespace %s (Pod objects only: no kubelet runs them, they stay Pending),\n"+
		"each a real pkg/breaker/kube connection with its own BreakerReport, calling every CircuitBreaker of the namespace\n"+
		"through httpbreaker against a local upstream at %s. The upstream fails (503) for all but %s\n"+
		"for %s of every %s, the first time %s from now.",
		strings.Join(w.Pods, ", "), w.o.Namespace, w.Upstream, last, c.Failing, c.Period, c.Healthy)
}

func withDefaults(o Options) Options {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.App == "" {
		o.App = "checkout"
	}
	if o.Pods <= 0 {
		o.Pods = 3
	}
	if o.ClientRole == "" {
		o.ClientRole = "config/rbac/breaker_client_role.yaml"
	}
	if o.Cycle == (Cycle{}) {
		o.Cycle = DefaultCycle
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.CallEvery <= 0 {
		o.CallEvery = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Say == nil {
		o.Say = func(string) {}
	}
	return o
}

// grantClientRole gives the app's service account what config/default gives an
// application: the fusebox-breaker-client ClusterRole, bound in the namespace.
func grantClientRole(ctx context.Context, cl client.Client, o Options) error {
	raw, err := os.ReadFile(o.ClientRole)
	if err != nil {
		return err
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &role); err != nil {
		return fmt.Errorf("%s: %w", o.ClientRole, err)
	}
	role.Name = "fusebox-" + role.Name // config/default's namePrefix
	objs := []client.Object{
		&role,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.App}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.App + "-breaker-client"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: o.Namespace, Name: o.App}},
		},
	}
	for _, obj := range objs {
		if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

func createPod(ctx context.Context, cl client.Client, o Options, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: o.Namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": o.App},
			Annotations: map[string]string{
				"description": "simulated by make run (internal/sampleapp): no kubelet runs it; its calls and its BreakerReport come from that process",
			},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: o.App,
			Containers:         []corev1.Container{{Name: "app", Image: "fusebox.dev/simulated/" + o.App}},
		},
	}
	if err := cl.Create(ctx, p); err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return p, nil
}

// asPod is cfg acting as the pod would with its service account token: the API server
// sees the pod's service account, with the pod-name and pod-uid extras.
func asPod(cfg *rest.Config, p *corev1.Pod) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + p.Namespace + ":" + p.Spec.ServiceAccountName,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + p.Namespace, "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {p.Name},
			"authentication.kubernetes.io/pod-uid":  {string(p.UID)},
		},
	}
	return c
}

// upstream answers 503 to every pod but the last while the cycle says it fails.
func (w *Workload) upstream() http.Handler {
	healthy := w.Pods[len(w.Pods)-1]
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Pod") != healthy && w.o.Cycle.failing(w.o.Clock.Since(w.started)) {
			http.Error(rw, "the sample upstream is failing", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
}

// follow keeps the list of breakers current, so that a CircuitBreaker created later gets
// pods too, and says when the upstream starts and stops failing.
func (w *Workload) follow(ctx context.Context, cl client.Client) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wasFailing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := w.listBreakers(ctx, cl); err != nil && ctx.Err() == nil {
			w.o.Logger.Warn("list CircuitBreakers", "error", err)
		}
		if failing := w.o.Cycle.failing(w.o.Clock.Since(w.started)); failing != wasFailing {
			wasFailing = failing
			if failing {
				w.o.Say(fmt.Sprintf("the sample upstream fails for %s for %s", strings.Join(w.Pods[:len(w.Pods)-1], " and "), w.o.Cycle.Failing))
			} else {
				w.o.Say("the sample upstream is healthy again")
			}
		}
	}
}

func (w *Workload) listBreakers(ctx context.Context, cl client.Client) error {
	var list resiliencev1alpha1.CircuitBreakerList
	if err := cl.List(ctx, &list, client.InNamespace(w.o.Namespace)); err != nil {
		return err
	}
	names := make([]string, 0, len(list.Items))
	for _, cb := range list.Items {
		names = append(names, cb.Name)
	}
	slices.Sort(names)
	w.names.Store(&names)
	return nil
}

// callLoop is the application of one pod: every CallEvery, one call through each breaker.
func (w *Workload) callLoop(ctx context.Context, pod string, reg *registry.Registry) {
	clients := map[string]*http.Client{}
	base := &http.Transport{MaxIdleConnsPerHost: 4}
	defer base.CloseIdleConnections()
	tick := time.NewTicker(w.o.CallEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, name := range *w.names.Load() {
			c := clients[name]
			if c == nil {
				c = &http.Client{Transport: httpbreaker.NewTransport(reg.Get(name), base), Timeout: time.Second}
				clients[name] = c
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.Upstream+"/"+name, nil)
			if err != nil {
				continue
			}
			req.Header.Set("X-Pod", pod)
			resp, err := c.Do(req)
			if err != nil {
				if !errors.Is(err, breaker.ErrOpen) && ctx.Err() == nil {
					w.o.Logger.Debug("call", "pod", pod, "breaker", name, "error", err)
				}
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	}
}
