package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/policy"
)

// Candidate policies (docs/design.md §11): `candidate NAME` sets what the candidate did in
// shadow beside what the enforced policy did over the same span, and `promote NAME`
// makes the candidate the spec in one update guarded by the resourceVersion read. The
// operator writes status often, and a status write moves the resourceVersion too; so a
// conflict whose only cause is status (the spec's generation unchanged) is read again
// and retried, and only an edit of the spec fails the promotion.

func newCandidateCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "candidate NAME",
		Short: "Compare a breaker's candidate policy, judged in shadow, with the enforced one",
		Long: `Show what spec.candidate did across the pods, judged in shadow on the calls
they ran (it refuses none), beside what the enforced policy did over the same
span: opens, time open, calls refused against calls the candidate would have
refused. The generation shown is the one to give promote --generation.`,
		Example: `  kubectl fusebox candidate payments -n shop`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.showCandidate(cmd.Context(), args[0])
		},
	}
}

func newPromoteCommand(o *Options) *cobra.Command {
	var generation int64
	cmd := &cobra.Command{
		Use:   "promote NAME",
		Short: "Make a breaker's candidate policy the enforced one",
		Long: `Move spec.candidate into the spec: each field the candidate sets replaces the
spec's, and the candidate is removed, in one update guarded by the
resourceVersion, so an edit of the spec made meanwhile makes it fail rather than
be lost (the operator's status writes do not). With --generation it promotes only
the spec you looked at.`,
		Example: `  kubectl fusebox candidate payments -n shop
  kubectl fusebox promote payments -n shop --generation 7`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.promote(cmd.Context(), args[0], generation)
		},
	}
	cmd.Flags().Int64Var(&generation, "generation", 0, "Promote only if the CircuitBreaker's spec is still at this generation (as `candidate` shows it).")
	return cmd
}

// getBreakerNamed reads the breaker name of the command's namespace.
func (o *Options) getBreakerNamed(ctx context.Context, name string) (*resiliencev1alpha1.CircuitBreaker, string, error) {
	ns, err := o.oneNamespace()
	if err != nil {
		return nil, "", err
	}
	c, err := o.client()
	if err != nil {
		return nil, "", err
	}
	cb := &resiliencev1alpha1.CircuitBreaker{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cb); err != nil {
		return nil, "", notFound(err, ns, name)
	}
	return cb, ns, nil
}

func (o *Options) showCandidate(ctx context.Context, name string) error {
	cb, _, err := o.getBreakerNamed(ctx, name)
	if err != nil {
		return err
	}
	if cb.Spec.Candidate == nil {
		fmt.Fprintf(o.Out, "circuitbreaker/%s has no candidate policy (spec.candidate)\n", name)
		return nil
	}
	writeCandidate(o.Out, cb, o.Now())
	return nil
}

// writeCandidate writes the comparison of cb's candidate with its enforced policy.
func writeCandidate(out io.Writer, cb *resiliencev1alpha1.CircuitBreaker, now time.Time) {
	fmt.Fprintf(out, "circuitbreaker/%s (generation %d)\n", cb.Name, cb.Generation)
	fmt.Fprintf(out, "Candidate: %s\n", strings.Join(policyChanges(cb.Spec), ", "))
	st := cb.Status.Candidate
	if st == nil || st.Pods == 0 || st.State == "" {
		fmt.Fprintln(out, "No pod judges this candidate yet: the pods report it once they run the configuration of this generation.")
		return
	}
	span := "since the pods began judging it"
	if st.StartTime != nil {
		span = fmt.Sprintf("since %s (%s ago, the median pod's start)", st.StartTime.UTC().Format(time.RFC3339), age(st.StartTime.Time, now))
	}
	fmt.Fprintf(out, "Judged in shadow on %d pods, %s; it refused no call.\n\n", st.Pods, span)
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	enforced := st.Enforced
	if enforced == nil {
		enforced = &resiliencev1alpha1.CandidateBaseline{}
	}
	state := string(st.State)
	if st.Since != nil {
		state += fmt.Sprintf(" for %s", age(st.Since.Time, now))
	}
	fmt.Fprintln(w, "\tENFORCED\tCANDIDATE")
	fmt.Fprintf(w, "State\t%s\t%s (%d of %d pods open, %d half-open)\n", orDash(string(cb.Status.State)), state, st.Open, st.Pods, st.HalfOpen)
	fmt.Fprintf(w, "Opens\t%d\t%d\n", enforced.Opens, st.Opens)
	fmt.Fprintf(w, "Time open\t%s\t%s\n", durationOrDash(enforced.TimeOpen), durationOrDash(st.TimeOpen))
	fmt.Fprintf(w, "Calls refused\t%d refused\t%d would refuse\n", enforced.Refused, st.WouldRefuse)
	_ = w.Flush()
	fmt.Fprintln(out, "\nCounts are summed over the pods (each pod's at most four times the median pod's); times are the median pod's.")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func durationOrDash(d *metav1.Duration) string {
	if d == nil {
		return "-"
	}
	return formatDuration(d.Duration)
}

// policyChanges says what the candidate changes of the spec, field by field.
func policyChanges(s resiliencev1alpha1.CircuitBreakerSpec) []string {
	c := s.Candidate
	if c == nil {
		return nil
	}
	var out []string
	duration := func(field string, was, now *metav1.Duration) {
		if now != nil {
			out = append(out, fmt.Sprintf("%s %s → %s", field, durationOrDefault(was), formatDuration(now.Duration)))
		}
	}
	count := func(field string, was, now *int32) {
		if now != nil {
			from := "default"
			if was != nil {
				from = fmt.Sprint(*was)
			}
			out = append(out, fmt.Sprintf("%s %s → %d", field, from, *now))
		}
	}
	duration("openTimeout", s.OpenTimeout, c.OpenTimeout)
	duration("window", s.Window, c.Window)
	count("failureRatePercent", s.FailureRatePercent, c.FailureRatePercent)
	count("minimumThroughput", s.MinimumThroughput, c.MinimumThroughput)
	count("successThreshold", s.SuccessThreshold, c.SuccessThreshold)
	count("halfOpenPermittedCalls", s.HalfOpenPermittedCalls, c.HalfOpenPermittedCalls)
	duration("slowCallDuration", s.SlowCallDuration, c.SlowCallDuration)
	count("slowCallRatePercent", s.SlowCallRatePercent, c.SlowCallRatePercent)
	duration("maxOpenTimeout", s.MaxOpenTimeout, c.MaxOpenTimeout)
	if len(out) == 0 {
		out = append(out, "changes nothing of the spec")
	}
	return out
}

func durationOrDefault(d *metav1.Duration) string {
	if d == nil {
		return "unset"
	}
	return formatDuration(d.Duration)
}

// promote moves the breaker's candidate into its spec with one update, which the API
// server refuses if the object changed since it was read (or since version, if given).
func (o *Options) promote(ctx context.Context, name string, generation int64) error {
	c, err := o.client()
	if err != nil {
		return err
	}
	cb, ns, err := o.getBreakerNamed(ctx, name)
	if err != nil {
		return err
	}
	if generation != 0 && cb.Generation != generation {
		return fmt.Errorf("circuitbreaker/%s's spec changed since generation %d (it is at %d now): someone edited it; look again with `kubectl fusebox candidate %s` and promote what you see", name, generation, cb.Generation, name)
	}
	read := cb.Generation
	for attempt := 1; ; attempt++ {
		if cb.Spec.Candidate == nil {
			return fmt.Errorf("circuitbreaker/%s has no candidate policy (spec.candidate) to promote", name)
		}
		changes := policyChanges(cb.Spec)
		cb.Spec = policy.CandidateSpec(cb.Spec)
		// Update carries the resourceVersion read: a write made since makes it a conflict.
		err := c.Update(ctx, cb)
		if err == nil {
			fmt.Fprintf(o.Out, "circuitbreaker/%s: the candidate is the enforced policy now (%s); spec.candidate removed\n", name, strings.Join(changes, ", "))
			return nil
		}
		if !apierrors.IsConflict(err) {
			return notFound(err, ns, name)
		}
		if cb, _, err = o.getBreakerNamed(ctx, name); err != nil {
			return err
		}
		// The operator's status writes move the resourceVersion but not the generation:
		// only a changed spec is someone else's edit.
		if cb.Generation != read || attempt == maxPromoteAttempts {
			return fmt.Errorf("circuitbreaker/%s was changed by someone else after it was read, so nothing was promoted: look again with `kubectl fusebox candidate %s -n %s` and promote again", name, name, ns)
		}
	}
}

// maxPromoteAttempts bounds the updates promote tries while only status moves under it.
const maxPromoteAttempts = 5

// candidateView is what the plugin shows of cb's candidate; nil without one.
func candidateView(cb *resiliencev1alpha1.CircuitBreaker) *Candidate {
	if cb.Spec.Candidate == nil {
		return nil
	}
	v := &Candidate{}
	if st := cb.Status.Candidate; st != nil {
		v.State, v.Pods, v.Opens, v.WouldRefuse = string(st.State), st.Pods, st.Opens, st.WouldRefuse
		if e := st.Enforced; e != nil {
			v.EnforcedOpens, v.Refused = e.Opens, e.Refused
		}
	}
	return v
}
