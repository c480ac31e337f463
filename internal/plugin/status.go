package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// eventsShown is how many of a breaker's last transitions `status NAME` prints.
const eventsShown = 10

func newStatusCommand(o *Options) *cobra.Command {
	// kubectl's own -o: every printer kubectl get has but its tables, which
	// are the plugin's (its default and wide).
	printFlags := genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show CircuitBreakers; with a name, its pods and last transitions",
		Example: `  kubectl fusebox status -A
  kubectl fusebox status -o wide
  kubectl fusebox status payments -n shop
  kubectl fusebox status payments -o yaml
  kubectl fusebox status -o jsonpath='{range .items[*]}{.metadata.name} {.status.state}{"\n"}{end}'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format := ptr.Deref(printFlags.OutputFormat, "")
			var p printers.ResourcePrinter
			if format != "" && format != "wide" {
				var err error
				if p, err = printFlags.ToPrinter(); err != nil {
					return fmt.Errorf("--output %q: want wide or one of %s (or nothing, for a table)",
						format, strings.Join(printFlags.AllowedFormats(), ", "))
				}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return o.statusOne(cmd.Context(), c, args[0], p)
			}
			return o.statusAll(cmd.Context(), c, p, format == "wide")
		},
	}
	printFlags.AddFlags(cmd)
	cmd.Flag("output").Usage = "Output format: wide, json, yaml, name, jsonpath=..., go-template=..., or the others kubectl get takes (default: a table)."
	return cmd
}

// statusAll prints every breaker of the namespace (or of all, with -A): as
// a table, wide or not, when p is nil.
func (o *Options) statusAll(ctx context.Context, c client.Client, p printers.ResourcePrinter, wide bool) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	var list resiliencev1alpha1.CircuitBreakerList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	if p != nil {
		return printList(p, &list, o.Out)
	}
	if len(list.Items) == 0 {
		if ns == "" {
			fmt.Fprintln(o.ErrOut, "No CircuitBreakers found.")
		} else {
			fmt.Fprintf(o.ErrOut, "No CircuitBreakers found in namespace %s.\n", ns)
		}
		return nil
	}
	now := o.Now()
	views := make([]Breaker, 0, len(list.Items))
	for i := range list.Items {
		views = append(views, breakerView(&list.Items[i], now))
	}
	sortBreakers(views)
	w := printers.GetNewTabWriter(o.Out)
	writeTable(w, views, ns == "", wide, now)
	return w.Flush()
}

// sortBreakers orders breakers by namespace, then name.
func sortBreakers(bs []Breaker) {
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].Namespace != bs[j].Namespace {
			return bs[i].Namespace < bs[j].Namespace
		}
		return bs[i].Name < bs[j].Name
	})
}

// tableHeader is the breakers table's header, without NAMESPACE; wideHeader
// is what -o wide adds.
const (
	tableHeader = "NAME\tSTATE\tMODE\tOVERRIDE\tQUORUM\tPODS\tRETRIES\tTHROTTLED\tAGE"
	wideHeader  = "\tSCOPE\tREPORTING\tLATEST CONFIG\tCONSECUTIVE OPENS\tOPEN PERIOD"
)

// writeTable writes the breakers table, tab-separated, for a tabwriter.
func writeTable(w io.Writer, bs []Breaker, withNamespace, wide bool, now time.Time) {
	if withNamespace {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprint(w, tableHeader)
	if wide {
		fmt.Fprint(w, wideHeader)
	}
	fmt.Fprintln(w)
	for _, b := range bs {
		if withNamespace {
			fmt.Fprintf(w, "%s\t", b.Namespace)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			b.Name, stateText(b.State), b.modeText(), b.overrideText(now), b.quorumText(), b.podsText(),
			b.retriesText(), b.throttledText(), age(b.Created, now))
		if wide {
			fmt.Fprintf(w, "\t%s\t%d\t%d\t%s\t%s",
				b.Scope, b.Pods.Reporting, b.Pods.OnLatestConfig, opensText(b.ConsecutiveOpens), dash(b.OpenTimeout))
		}
		fmt.Fprintln(w)
	}
}

// statusOne prints one breaker: its summary, members and last transitions.
func (o *Options) statusOne(ctx context.Context, c client.Client, name string, p printers.ResourcePrinter) error {
	ns, err := o.oneNamespace()
	if err != nil {
		return err
	}
	var cb resiliencev1alpha1.CircuitBreaker
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb); err != nil {
		return notFound(err, ns, name)
	}
	if p != nil {
		return p.PrintObj(&cb, o.Out)
	}
	ts, err := transitions(ctx, c, ns, name)
	if err != nil {
		return fmt.Errorf("events of %s: %w", name, err)
	}
	return writeDetail(o.Out, &cb, ts, o.Now())
}

// writeDetail writes `status NAME`: a summary, the members table and the last
// transitions, each section aligned on its own.
func writeDetail(out io.Writer, cb *resiliencev1alpha1.CircuitBreaker, ts []Transition, now time.Time) error {
	w := printers.GetNewTabWriter(out)
	section := func() error {
		if err := w.Flush(); err != nil {
			return err
		}
		w = printers.GetNewTabWriter(out)
		return nil
	}
	b := breakerView(cb, now)
	fmt.Fprintf(w, "Name:\t%s\n", b.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", b.Namespace)
	fmt.Fprintf(w, "State:\t%s\n", stateText(b.State))
	if b.Why != "" {
		fmt.Fprintf(w, "Why:\t%s\n", b.Why)
	}
	mode := b.Mode
	if b.Override != nil && b.Override.Active {
		mode += fmt.Sprintf(" (override; spec.mode %s)", b.SpecMode)
	}
	fmt.Fprintf(w, "Mode:\t%s\n", mode)
	if ov := b.Override; ov != nil {
		by := ""
		if ov.By != "" {
			by = ", set by " + ov.By
		}
		fmt.Fprintf(w, "Override:\t%s until %s (%s)%s: %s\n", ov.Mode, ov.Until.Format(time.RFC3339), b.overrideText(now), by, ov.Reason)
	} else {
		fmt.Fprintf(w, "Override:\t-\n")
	}
	fmt.Fprintf(w, "Scope:\t%s\n", b.Scope)
	fmt.Fprintf(w, "Quorum:\t%s\n", b.quorumText())
	fmt.Fprintf(w, "Pods:\t%d open, %d half-open, %d closed (%d reporting, %d on the latest config)\n",
		b.Pods.Open, b.Pods.HalfOpen, b.Pods.Closed, b.Pods.Reporting, b.Pods.OnLatestConfig)
	if b.ConsecutiveOpens > 0 {
		fmt.Fprintf(w, "Consecutive opens:\t%d (open period %s)\n", b.ConsecutiveOpens, b.OpenTimeout)
	}
	writeTraffic(w, b.Traffic)
	writeConcurrency(w, b.Concurrency)
	fmt.Fprintf(w, "Age:\t%s\n", age(b.Created, now))
	if err := section(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	if len(cb.Status.Members) == 0 {
		fmt.Fprintln(w, "Members:  <none>")
	} else {
		fmt.Fprintln(w, "Members:")
		fmt.Fprintln(w, "  POD\tSTATE\tSINCE\tREASON\tTRIGGER\tRATE\tCONSECUTIVE OPENS")
		for _, m := range cb.Status.Members {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				m.Pod, m.State, age(m.Since.Time, now), dash(m.Reason), dash(m.Trigger), rateText(m), opensText(m.ConsecutiveOpens))
		}
		if shown := int32(len(cb.Status.Members)); cb.Status.MemberCounts != nil && cb.Status.MemberCounts.Reporting > shown {
			fmt.Fprintf(w, "  (%d of %d reporting pods listed, the most relevant first)\n", shown, cb.Status.MemberCounts.Reporting)
		}
	}
	if err := section(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	if len(ts) == 0 {
		fmt.Fprintln(w, "Transitions:  <none>")
		return w.Flush()
	}
	if len(ts) > eventsShown {
		ts = ts[len(ts)-eventsShown:]
	}
	fmt.Fprintln(w, "Transitions:")
	fmt.Fprintln(w, "  LAST SEEN\tTYPE\tREASON\tMESSAGE")
	for _, t := range ts {
		seen := age(t.Time, now)
		if t.Count > 1 {
			seen += fmt.Sprintf(" (x%d)", t.Count)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", seen, t.Type, t.Reason, strings.ReplaceAll(t.Message, "\n", " "))
	}
	return w.Flush()
}

// writeTraffic writes the fleet policies and what the fleet's windows hold, for a breaker
// that has either policy.
func writeTraffic(w io.Writer, t *Traffic) {
	if t == nil {
		return
	}
	if t.RetryBudget != "" {
		fmt.Fprintf(w, "Retry budget:\t%s, the per-second floor shared by %d pods\n", t.RetryBudget, t.Pods)
		fmt.Fprintf(w, "Retries:\t%s of first attempts (%d retries of %d requests)\n", percentText(t.RetryPercent), t.Retries, t.Requests)
	}
	if t.ThrottleK != 0 {
		fmt.Fprintf(w, "Throttle:\tk = %s\n", strconv.FormatFloat(t.ThrottleK, 'g', -1, 64))
		fmt.Fprintf(w, "Throttled:\t%s of requests (%d of %d; %d accepted)\n", percentText(t.ThrottledPercent), t.Throttled, t.Requests, t.Accepts)
	}
}

// writeConcurrency writes how the fleet's limit on calls in flight is divided and what
// the pods' windows hold of it, for a breaker with spec.concurrency.
func writeConcurrency(w io.Writer, c *resiliencev1alpha1.FleetConcurrency) {
	if c == nil {
		return
	}
	if c.Pods == 0 {
		fmt.Fprintf(w, "Concurrency:\t%d in flight for the fleet, not divided yet (no pod counted)\n", c.MaxInFlight)
		return
	}
	fmt.Fprintf(w, "Concurrency:\t%d in flight for the fleet: %d a pod, over %d pods\n", c.MaxInFlight, c.Share, c.Pods)
	fmt.Fprintf(w, "In flight:\t%d at the pods' peaks added up; %d calls refused by the limit\n", c.InFlight, c.Limited)
}

// rateText is a member's failure rate and, when judged, slow-call rate.
func rateText(m resiliencev1alpha1.MemberStatus) string {
	var parts []string
	if m.FailureRatePercent != nil {
		parts = append(parts, fmt.Sprintf("%d%%", *m.FailureRatePercent))
	}
	if m.SlowCallRatePercent != nil {
		parts = append(parts, fmt.Sprintf("slow %d%%", *m.SlowCallRatePercent))
	}
	if m.Calls != nil && len(parts) > 0 {
		parts = append(parts, fmt.Sprintf("of %d", ptr.Deref(m.Calls, 0)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func opensText(n int32) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// notFound names the breaker a lookup did not find.
func notFound(err error, ns, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("circuitbreaker %q not found in namespace %q", name, ns)
	}
	return err
}

// printList prints list with p as kubectl get does: as an unstructured list
// whose every item carries its kind, which is what the name printer takes
// (it refuses typed lists) and what a reader of the items wants.
func printList(p printers.ResourcePrinter, list *resiliencev1alpha1.CircuitBreakerList, w io.Writer) error {
	list.SetGroupVersionKind(resiliencev1alpha1.GroupVersion.WithKind("CircuitBreakerList"))
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(resiliencev1alpha1.GroupVersion.WithKind("CircuitBreaker"))
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(list)
	if err != nil {
		return err
	}
	var u unstructured.UnstructuredList
	u.SetUnstructuredContent(content)
	return p.PrintObj(&u, w)
}
