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
// policies installed), rewrites its report as fast as the API server takes it, every one
// of its breakers flipping between Open and Closed at each write: b.N writes. It runs the
// flap twice on one envtest control plane, first with no operator (what the flapping
// client itself costs this process) and then with the operator's manager in process, and
// reports what the operator did under it:
//
//	flaps/s               report writes a second the pod managed
//	cb-writes/s           CircuitBreaker writes a second, all breakers
//	cb-writes/s/breaker   the most writes of one breaker within any one second
//	events/s/breaker      the most Events about one breaker within any one second
//	cm-writes/s           ConfigMap writes a second
//	operator-cpu-s/s      the operator's CPU seconds per second of flapping (the
//	                      process's CPU with it minus the same flap's without it)
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
	rc, err := env.Start()
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
			must(b, admin.Create(ctx, &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
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
	flapN := func(as client.Client, rep *resiliencev1alpha1.BreakerReport, n int) time.Duration {
		b.Helper()
		began := time.Now()
		for i := range n {
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
	alone := flapN(as, rep, b.N)
	clientCPU := cpuSeconds() - cpu
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
	const ns = "flap-operated"
	as, rep = setUp(ns)
	time.Sleep(3 * time.Second) // the first publish and status writes, then quiet

	wctx, stop := context.WithCancel(ctx)
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

	b.StartTimer()
	cpu = cpuSeconds()
	operated := flapN(as, rep, b.N)
	b.StopTimer()
	time.Sleep(2 * time.Second) // the coalesced follow-ups
	withCPU := cpuSeconds() - cpu
	cbw.Stop()
	evw.Stop()
	cmw.Stop()
	stop()
	for range 3 {
		<-done
	}

	mostWrites, _, totalWrites := writes.busiest()
	mostEvents, _, _ := events.busiest()
	seconds := operated.Seconds()
	b.ReportMetric(float64(b.N)/seconds, "flaps/s")
	b.ReportMetric(float64(totalWrites)/seconds, "cb-writes/s")
	b.ReportMetric(float64(mostWrites), "cb-writes/s/breaker")
	b.ReportMetric(float64(mostEvents), "events/s/breaker")
	b.ReportMetric(float64(cmWrites)/seconds, "cm-writes/s")
	b.ReportMetric((withCPU-clientCPU)/seconds, "operator-cpu-s/s")
	b.Logf("%d flaps of %d breakers: alone %s (%.2f CPU s), operated %s (%.2f CPU s incl. 2 s after)",
		b.N, breakers, alone.Round(time.Millisecond), clientCPU, operated.Round(time.Millisecond), withCPU)
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
