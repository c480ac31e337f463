package controller

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/testenv"
)

// cpuSeconds is the CPU time this process has used, user and system.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkFlappingPod: one pod, under its own identity (impersonated, with the admission
// policies installed), rewrites its report, every one of its 20 breakers (scope Fleet)
// flipping between an earned Open and an earned Closed at each write. On one envtest
// control plane it flaps b.N times with no operator (what the flapping client itself
// costs this process), then, with the operator's manager in process, b.N times as fast as
// the API server takes it, and b.N/4 times paced just slower than the status controller's
// coalescing of report events (units prefixed "paced-"). It reports what the operator did:
//
//	flaps/s               report writes a second the pod managed
//	cb-writes/s           CircuitBreaker writes a second, all breakers
//	cb-writes/s/breaker   the most writes of one breaker within any one second
//	events/s/breaker      the most Events about one breaker within any one second
//	cm-writes/s           ConfigMap writes a second
//	operator-cpu-s/s      the operator's CPU seconds per second of flapping (the
//	                      process's CPU minus the flapping client's, per flap as
//	                      measured alone)
//
// Run: KUBEBUILDER_ASSETS=... go test -run '^$' -bench FlappingPod -benchtime 400x ./internal/controller
func BenchmarkFlappingPod(b *testing.B) {
	const breakers = 20
	if b.N < 10 {
		// The framework's first, probing run: a control plane per run is costly, and the
		// measured one is -benchtime's (use NNNx).
		return
	}
	env, err := testenv.New("../..")
	if err != nil {
		b.Skip(err) // no control plane: make envtest builds one
	}
	rc, err := testenv.Start(env)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	if err := testenv.InstallPolicies(rc, "../.."); err != nil {
		b.Fatal(err)
	}
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	admin, err := client.NewWithWatch(rc, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// One namespace per phase, the same breakers in each.
	setUp := func(ns string) (client.Client, *resiliencev1alpha1.BreakerReport) {
		b.Helper()
		must(b, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		var entries []resiliencev1alpha1.BreakerReportEntry
		for i := range breakers {
			name := fmt.Sprintf("dep-%02d", i)
			// Fleet: the pod's flips also flip the published verdict (1s open periods,
			// shorter than the skew, so every earned Closed counts).
			must(b, admin.Create(ctx, &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: resiliencev1alpha1.CircuitBreakerSpec{Scope: resiliencev1alpha1.ScopeFleet, OpenTimeout: &metav1.Duration{Duration: time.Second}}}))
			entries = append(entries, line(name, resiliencev1alpha1.StateClosed, started, time.Now()))
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rogue"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		must(b, admin.Create(ctx, pod))
		as, err := podClient(ctx, admin, rc, ns, pod)
		must(b, err)
		rep := &resiliencev1alpha1.BreakerReport{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
			Breakers: entries,
		}
		// The policy takes a moment to be enforced after it is installed.
		deadline := time.Now().Add(time.Minute)
		for err = as.Create(ctx, rep); err != nil && time.Now().Before(deadline); err = as.Create(ctx, rep) {
			time.Sleep(100 * time.Millisecond)
		}
		must(b, err)
		return as, rep
	}
	// flapN writes the report n times, flipping every entry each time.
	flapN := func(as client.Client, rep *resiliencev1alpha1.BreakerReport, n int, pace time.Duration) time.Duration {
		b.Helper()
		began := time.Now()
		for i := range n {
			time.Sleep(time.Until(began.Add(time.Duration(i) * pace)))
			state, reason := resiliencev1alpha1.StateOpen, tripped
			if i%2 == 1 {
				state, reason = resiliencev1alpha1.StateClosed, succeeded
			}
			now := metav1.NewTime(time.Now())
			for j := range rep.Breakers {
				rep.Breakers[j].State, rep.Breakers[j].Reason, rep.Breakers[j].Since = state, reason, now
			}
			must(b, as.Update(ctx, rep))
		}
		return time.Since(began)
	}

	// Without the operator: what the flapping client costs this process.
	as, rep := setUp("flap-alone")
	b.ResetTimer()
	cpu := cpuSeconds()
	alone := flapN(as, rep, b.N, 0)
	clientCPU := (cpuSeconds() - cpu) / float64(b.N) // per flap
	b.StopTimer()

	// With the operator.
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{ByObject: CacheByObject()},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}, // the suite may have run in this process
	})
	must(b, err)
	must(b, NewReconciler(mgr, NewMetrics(prometheus.NewRegistry())).SetupWithManager(mgr))
	go func() { _ = mgr.Start(ctx) }()

	// measure flaps n times in a namespace of its own, a write every pace at most, and
	// reports what the operator did under it, each unit prefixed.
	measure := func(ns, prefix string, n int, pace time.Duration) {
		as, rep := setUp(ns)
		time.Sleep(3 * time.Second) // the first publish and status writes, then quiet
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		writes, events := &writeLog{}, &writeLog{}
		cmWrites := 0
		cbw, err := admin.Watch(wctx, &resiliencev1alpha1.CircuitBreakerList{}, client.InNamespace(ns))
		must(b, err)
		evw, err := admin.Watch(wctx, &eventsv1.EventList{}, client.InNamespace(ns))
		must(b, err)
		cmw, err := admin.Watch(wctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
		must(b, err)
		done := make(chan struct{}, 3)
		go func() {
			for e := range cbw.ResultChan() {
				if cb, ok := e.Object.(*resiliencev1alpha1.CircuitBreaker); ok && e.Type == watch.Modified {
					writes.add(cb.Name, time.Now())
				}
			}
			done <- struct{}{}
		}()
		go func() {
			for e := range evw.ResultChan() {
				recordEvent(events, e)
			}
			done <- struct{}{}
		}()
		go func() {
			for e := range cmw.ResultChan() {
				if e.Type == watch.Modified {
					cmWrites++
				}
			}
			done <- struct{}{}
		}()

		cpu := cpuSeconds()
		operated := flapN(as, rep, n, pace)
		time.Sleep(2 * time.Second) // the coalesced follow-ups
		withCPU := cpuSeconds() - cpu
		cbw.Stop()
		evw.Stop()
		cmw.Stop()
		for range 3 {
			<-done
		}
		mostWrites, _, totalWrites := writes.busiest()
		mostEvents, _, _ := events.busiest()
		seconds := operated.Seconds()
		b.ReportMetric(float64(n)/seconds, prefix+"flaps/s")
		b.ReportMetric(float64(totalWrites)/seconds, prefix+"cb-writes/s")
		b.ReportMetric(float64(mostWrites), prefix+"cb-writes/s/breaker")
		b.ReportMetric(float64(mostEvents), prefix+"events/s/breaker")
		b.ReportMetric(float64(cmWrites)/seconds, prefix+"cm-writes/s")
		b.ReportMetric((withCPU-clientCPU*float64(n))/seconds, prefix+"operator-cpu-s/s")
		b.Logf("%s%d flaps of %d breakers in %s (%.2f CPU s incl. 2 s after; the client alone %.2f)",
			prefix, n, breakers, operated.Round(time.Millisecond), withCPU, clientCPU*float64(n))
	}
	b.StartTimer()
	measure("flap-fast", "", b.N, 0)
	b.StopTimer()
	// Paced just slower than the status controller's coalescing of report events
	// (reportCoalesce): each flip is a reconcile of its own.
	measure("flap-paced", "paced-", max(10, b.N/4), reportCoalesce+50*time.Millisecond)
	b.Logf("alone: %d flaps in %s", b.N, alone.Round(time.Millisecond))
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
