package kube_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
	"github.com/fusebox-dev/fusebox/pkg/breaker/kube"
)

// steadyQuiet is how long converged instances are watched for writes: longer than any
// period one of the agent's timers runs on. The longest is the traffic check's, a window
// and up to a quarter more (12.5 s for these breakers' 10 s window); the others (the
// earned hold, the Group summaries' re-read, the retries' backoff, capped at 4 and 8 s)
// are shorter. A write on a timer would show within it.
var steadyQuiet = testPolicy().Window*5/4 + 2*time.Second

func TestSteadyStateWritesNothing(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	names := []string{"alpha", "beta"}
	data := map[string]string{}
	for _, n := range names {
		createBreaker(t, ns, n)
		data[n+".json"] = render(t, n, 1, testPolicy(), "Pod", nil)
	}
	writeConfigMap(t, ns, data)
	clock := newFakeClock()
	var ins []*instance
	for _, pod := range []string{"a", "b", "c"} {
		ins = append(ins, startInstance(t, ns, pod, instanceOptions{clock: clock, breakers: names}))
	}
	ins[0].reg.Get("alpha").Trip()
	eventually(t, propagation, func() error {
		for _, in := range ins {
			for _, n := range names {
				want := resiliencev1alpha1.StateClosed
				if in.pod == "a" && n == "alpha" {
					want = resiliencev1alpha1.StateOpen
				}
				if err := memberIs(ns, n, in.pod, wantEntry(want, 1)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	// Converged. From here on nothing the pods know changes, so nothing may be written:
	// not on a timer, not when the ConfigMap changes in a way that does not concern them.
	writes := make([]int64, len(ins))
	mutations := make([]int64, len(ins))
	applies := make([]int64, len(ins))
	for i, in := range ins {
		idle(t, in.agent)
		writes[i], mutations[i], applies[i] = in.agent.Stats().Writes, in.mutations.Load(), in.agent.Stats().ConfigApplies
	}
	quietUntil := time.Now().Add(steadyQuiet)

	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: ns, Name: breakerconfig.ConfigMapName}
	if err := k8sClient.Get(context.Background(), key, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{"example.com/touched": "yes"}
	if err := k8sClient.Update(context.Background(), &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, propagation, func() error {
		for i, in := range ins {
			if in.agent.Stats().ConfigApplies == applies[i] {
				return fmt.Errorf("pod %s has not seen the ConfigMap change", in.pod)
			}
		}
		return nil
	})

	time.Sleep(time.Until(quietUntil)) // watching for writes that should not happen
	for i, in := range ins {
		if n := in.agent.Stats().Writes - writes[i]; n != 0 {
			t.Errorf("pod %s wrote %d entries in %v of steady state", in.pod, n, steadyQuiet)
		}
		if n := in.mutations.Load() - mutations[i]; n != 0 {
			t.Errorf("pod %s sent %d mutating requests in %v of steady state", in.pod, n, steadyQuiet)
		}
	}
}

// TestAPIServerOutage stops the API server for 10s while instances serve calls. It does
// not run in parallel: the API server is everybody's.
func TestAPIServerOutage(t *testing.T) {
	ns := newNamespace(t)
	for _, n := range []string{"calls", "tripped"} {
		createBreaker(t, ns, n)
	}
	writeConfigMap(t, ns, map[string]string{
		"calls.json":   render(t, "calls", 1, testPolicy(), "Pod", nil),
		"tripped.json": render(t, "tripped", 1, testPolicy(), "Pod", nil),
	})
	goroutines := runtime.NumGoroutine()

	clock := newFakeClock()
	var ins []*instance
	for _, pod := range []string{"a", "b", "c"} {
		ins = append(ins, startInstance(t, ns, pod, instanceOptions{clock: clock, breakers: []string{"calls", "tripped"}}))
	}
	converged := func(trippedPod string) func() error {
		return func() error {
			for _, in := range ins {
				if err := memberIs(ns, "calls", in.pod, wantEntry(resiliencev1alpha1.StateClosed, 1)); err != nil {
					return err
				}
				want := resiliencev1alpha1.StateClosed
				if in.pod == trippedPod {
					want = resiliencev1alpha1.StateOpen
				}
				if err := memberIs(ns, "tripped", in.pod, wantEntry(want, 1)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	eventually(t, propagation, converged(""))
	t.Logf("converged; %d goroutines with the instances running, %d before", runtime.NumGoroutine(), goroutines)

	// Callers on every instance, through the outage and after it.
	var (
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		calls      = make([]atomic.Int64, len(ins))
		callErrors = make(chan error, 100)
	)
	for i, in := range ins {
		b := in.reg.Get("calls")
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := b.Execute(context.Background(), ok)
				calls[i].Add(1)
				if err != nil {
					select {
					case callErrors <- err:
					default:
					}
				}
				time.Sleep(time.Millisecond) // leave the CPUs to the API server's restart
			}
		})
	}

	api := testEnv.ControlPlane.GetAPIServer()
	// Stop gives kube-apiserver StopTimeout to shut down gracefully, then kills it: an
	// error saying so is expected.
	if err := api.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process") {
		t.Fatal(err)
	}
	stopped := time.Now()
	callsBefore := counts(calls)
	// While it is away, a pod's breaker opens: its transition cannot be written yet.
	ins[1].reg.Get("tripped").Trip()
	// Away for 10 s: long enough for the agents' retries to back off to their caps (the
	// report writer's 4 s, the ConfigMap watch's 8 s), so that the return below is
	// caught up from there. The calls are counted at half time too.
	time.Sleep(5*time.Second - time.Since(stopped))
	callsHalfway := counts(calls)
	time.Sleep(10*time.Second - time.Since(stopped))
	failedWhileAway := ins[1].agent.Stats().WriteFailures
	callsAway := counts(calls)
	if err := api.Start(); err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	restarted := time.Now()
	t.Logf("API server away for %v", restarted.Sub(stopped).Round(time.Millisecond))
	eventually(t, 10*time.Second, converged("b"))
	t.Logf("statuses converged %v after the API server's return", time.Since(restarted).Round(time.Millisecond))
	if failedWhileAway == 0 {
		t.Errorf("pod b counted no failed write while the API server was away")
	}

	close(stop)
	wg.Wait()
	close(callErrors)
	for err := range callErrors {
		t.Errorf("a call failed: %v", err)
	}
	// A call never waits on the network: every pod's calls went on while the API server
	// was away, in each half of the outage. A call that waited on the API server would
	// have held its pod's caller until the server's return, so that pod would have made
	// no call from then on. How long a call takes is a benchmark's figure (pkg/breaker/kube's
	// BenchmarkExecuteReported, docs/benchmarks.md), not this test's.
	for i, in := range ins {
		if n := callsHalfway[i] - callsBefore[i]; n == 0 {
			t.Errorf("pod %s made no call in the first 5 s the API server was away", in.pod)
		}
		if n := callsAway[i] - callsHalfway[i]; n == 0 {
			t.Errorf("pod %s made no call in the last 5 s the API server was away: a call waited on it", in.pod)
		}
	}
	t.Logf("%v calls (%v in the first half of the outage, %v in the second)", counts(calls), diff(callsHalfway, callsBefore), diff(callsAway, callsHalfway))

	for _, in := range ins {
		in.cancel()
		<-in.agent.Done()
	}
	t.Logf("instances stopped")
	// The instances' goroutines are gone; a few of the HTTP machinery's may still be
	// winding down.
	const tolerance = 5
	eventually(t, 5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > goroutines+tolerance {
			return fmt.Errorf("%d goroutines after the instances stopped, %d before they started", n, goroutines)
		}
		return nil
	})
}

// counts reads every counter of cs.
func counts(cs []atomic.Int64) []int64 {
	out := make([]int64, len(cs))
	for i := range cs {
		out[i] = cs[i].Load()
	}
	return out
}

// diff is a - b, element by element.
func diff(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func TestUnreachableAtStart(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createBreaker(t, ns, "late")
	p := testPolicy()
	p.OpenTimeout = 5 * time.Second
	writeConfigMap(t, ns, map[string]string{"late.json": render(t, "late", 7, p, "Pod", nil)})

	px := startProxy(t, cfg.Host)
	// Start returns with the API server unreachable. One that waited for it would wait for
	// ever; a minute on, the watchdog brings the server up, so that the test fails saying
	// so rather than hangs.
	watchdog := time.AfterFunc(time.Minute, px.up)
	in := startInstance(t, ns, "a", instanceOptions{
		breakers: []string{"late"},
		modify:   func(o *kube.Options) { o.Config.Host = px.url() },
	})
	if !watchdog.Stop() {
		t.Fatal("Start returned only once the API server could be reached: it waited for it")
	}
	if err := policyIs([]*instance{in}, "late", breaker.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	// It says so.
	eventually(t, propagation, func() error {
		if !strings.Contains(in.logs.String(), "Cannot read the breaker ConfigMap") {
			return fmt.Errorf("no log line about the unreachable API server:\n%s", in.logs)
		}
		return nil
	})
	if err := policyIs([]*instance{in}, "late", breaker.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}

	px.up()
	eventually(t, 20*time.Second, func() error { return policyIs([]*instance{in}, "late", p) })
	eventually(t, propagation, func() error {
		return memberIs(ns, "late", "a", wantEntry(resiliencev1alpha1.StateClosed, 7))
	})
}

// proxy forwards TCP connections to target once it is up; until then nothing listens on
// its address, so connections are refused: an API server that cannot be reached, under
// the test's control.
type proxy struct {
	t      *testing.T
	addr   string // host:port, reserved at start
	target string

	mu    sync.Mutex
	ln    net.Listener // guarded by mu; nil while down
	conns []net.Conn   // guarded by mu
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	// Reserve a port: listen, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, addr: addr, target: u.Host}
	t.Cleanup(func() {
		p.mu.Lock()
		if p.ln != nil {
			p.ln.Close()
		}
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) url() string { return "https://" + p.addr }

// up starts forwarding.
func (p *proxy) up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

func (p *proxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
	wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
	wg.Wait()
}
