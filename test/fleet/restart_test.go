package fleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// restartAtScale creates FLEET_RESTART_BREAKERS CircuitBreakers across
// FLEET_RESTART_NAMESPACES namespaces, waits until every one is Ready, then restarts the
// operator and measures how long it takes to be Ready (/readyz) and current (every
// namespace reconciled once, its work queue empty), and counts the CircuitBreaker and
// ConfigMap writes it makes meanwhile and until the API server has seen none for
// quietFor: nothing changed, so there must be none.
func (h *harness) restartAtScale() []row {
	total, nss := h.s.restartBreakers, h.s.restartNamespaces
	logf("restart: creating %d CircuitBreakers across %d namespaces", total, nss)
	t0 := time.Now()
	for i := range nss {
		if _, err := h.cs.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restart-%d", i)}}, metav1.CreateOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				o := breakerObject(fmt.Sprintf("cb-%d", i))
				o.SetNamespace(fmt.Sprintf("restart-%d", i%nss))
				if _, err := h.dc.Resource(circuitBreakersGVR).Namespace(o.GetNamespace()).Create(h.ctx, o, metav1.CreateOptions{}); err != nil {
					logf("restart: create %s: %v", o.GetName(), err)
				}
			}
		})
	}
	wg.Wait()
	created := time.Since(t0)
	all := total + h.breakersInFleetNamespace()
	ready, readyIn := h.waitAllReady(all, time.Now().Add(h.s.waitCap))
	logf("restart: %d CircuitBreakers created in %s, %d of %d Ready after %s", total, fmtDur(created), ready, all, fmtDur(readyIn))
	quiet := h.settleAPI(time.Now().Add(h.s.settleCap))

	api0 := h.apiWrites()
	h.mgr.stop()
	start := time.Now()
	mgr, err := startManager(h.managerBin, h.operatorKubeconfig, h.managerLog+".restarted", h.s.managerMemory)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mgr = mgr
	readyAt := time.Since(start)
	current, currentOK := h.waitCurrent(nss+1, start, start.Add(h.s.waitCap))
	settled := h.settleAPI(time.Now().Add(h.s.settleCap))
	w := h.apiWrites().minus(api0)
	var objectWrites float64
	for k, v := range w {
		if k != "" && !isReportWrite(k) {
			objectWrites += v.count
		}
	}
	scale := fmt.Sprintf("%d Ready CircuitBreakers across %d namespaces (+%d in %s), %d reporting pods", total, nss, all-total, namespace, len(h.pods))
	return []row{
		{
			scenario: "restarted operator → Ready (`/readyz`), " + scale,
			target:   "≤ 30 s",
			measured: fmtDur(readyAt),
			meets:    yesNo(readyAt <= 30*time.Second),
			notes:    fmt.Sprintf("before the restart: created in %s, %d of %d Ready after %s, %s", fmtDur(created), ready, all, fmtDur(readyIn), quiet),
		},
		{
			scenario: "… → current (every namespace reconciled once, work queues empty)",
			target:   "≤ 30 s",
			measured: func() string {
				if !currentOK {
					return "> " + fmtDur(h.s.waitCap) + ", not reached"
				}
				return fmtDur(current)
			}(),
			meets: yesNo(currentOK && current <= 30*time.Second),
			notes: "from the process start; `controller_runtime_reconcile_total`, `workqueue_depth` of the new process",
		},
		{
			scenario: "… CircuitBreaker and ConfigMap writes by the restarted operator (nothing changed)",
			target:   "0",
			measured: fmt.Sprintf("%.0f", objectWrites),
			meets:    yesNo(objectWrites == 0),
			notes:    "API server, from the stop until quiet: " + w.String() + "; " + settled,
		},
	}
}

// isReportWrite reports whether an apiWrites key ("VERB resource") is a write of a pod's
// or a node's report.
func isReportWrite(k string) bool {
	_, res, _ := strings.Cut(k, " ")
	return res == breakerReportsGVR.Resource || res == nodeBreakerReportsGVR.Resource
}

func (h *harness) breakersInFleetNamespace() int {
	l, err := h.dc.Resource(circuitBreakersGVR).Namespace(namespace).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	return len(l.Items)
}

// waitAllReady polls every CircuitBreaker until want are Ready=True.
func (h *harness) waitAllReady(want int, deadline time.Time) (int, time.Duration) {
	start := time.Now()
	for {
		l, err := h.dc.Resource(circuitBreakersGVR).List(h.ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for i := range l.Items {
				if condition(&l.Items[i], "Ready") == "True" {
					ready++
				}
			}
		}
		if ready >= want || time.Now().After(deadline) {
			return ready, time.Since(start)
		}
		time.Sleep(2 * time.Second)
	}
}

// settleAPI waits until the API server has counted no write of the counted kinds for
// quietFor.
func (h *harness) settleAPI(deadline time.Time) string {
	start := time.Now()
	last, lastChange := h.apiWrites(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		cur := h.apiWrites()
		if len(cur.minus(last)) > 0 {
			last, lastChange = cur, time.Now()
		} else if time.Since(lastChange) >= quietFor {
			return fmt.Sprintf("API server quiet after %s", fmtDur(time.Since(start)))
		}
	}
	return "API server still counting writes at the settle cap"
}

// waitCurrent waits until the manager has reconciled namespaces keys and its work queues
// are empty.
func (h *harness) waitCurrent(namespaces int, start, deadline time.Time) (time.Duration, bool) {
	for time.Now().Before(deadline) {
		var reconciled, depth float64
		seen := false
		ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.mgr.metricsURL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = samples(resp.Body, func(name, labels string, v float64) {
				switch name {
				case "controller_runtime_reconcile_total":
					reconciled += v
					seen = true
				case "workqueue_depth":
					depth += v
				}
			})
			resp.Body.Close()
		}
		cancel()
		if seen && reconciled >= float64(namespaces) && depth == 0 {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), false
}
