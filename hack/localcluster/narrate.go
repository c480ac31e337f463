package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// narrate prints, until ctx is done, every change of the status of the namespace's
// CircuitBreakers as the API server has it: the state, each reporting pod's, and why it is
// open or half-open. It is what a newcomer watches while the sample upstream fails and
// recovers, without a second terminal; kubectl get cb -w shows the same, tersely.
func narrate(ctx context.Context, cl client.Client, namespace string, out io.Writer) {
	last := map[string]string{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var list resiliencev1alpha1.CircuitBreakerList
		if err := cl.List(ctx, &list, client.InNamespace(namespace)); err == nil {
			for i := range list.Items {
				cb := &list.Items[i]
				if line := statusLine(cb); line != last[cb.Name] {
					last[cb.Name] = line
					fmt.Fprintf(out, "localcluster: %s %s\n", time.Now().Format(time.TimeOnly), line)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// statusLine is one breaker's status in a line: its name, scope and state, each pod's
// state, and the Open condition's message while the circuit is not closed.
func statusLine(cb *resiliencev1alpha1.CircuitBreaker) string {
	state := string(cb.Status.State)
	if state == "" {
		state = "(no pod reports yet)"
	}
	scope := cb.Spec.Scope
	if scope == "" {
		scope = resiliencev1alpha1.ScopePod
	}
	var pods []string
	for _, m := range cb.Status.Members {
		pods = append(pods, m.Pod+"="+string(m.State))
	}
	slices.Sort(pods)
	line := fmt.Sprintf("%-16s %-5s %-8s %s", cb.Name, scope, state, strings.Join(pods, " "))
	if c := meta.FindStatusCondition(cb.Status.Conditions, resiliencev1alpha1.ConditionOpen); c != nil &&
		cb.Status.State != resiliencev1alpha1.StateClosed && c.Status != metav1.ConditionUnknown {
		line += " | " + c.Message
	}
	return strings.TrimRight(line, " ")
}
