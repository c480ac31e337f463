package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
)

// The gate command's exit codes: a script or a CI step reads the phase from them.
const (
	exitSuccessful   = 0
	exitFailed       = 1
	exitInconclusive = 2
	// exitNoJudgement: nothing was judged (no such breaker, no access, a bad flag), so
	// that 1 always means Failed.
	exitNoJudgement = 3
)

// ExitError carries the exit code a command asks for. Err, when set, is what went
// wrong; a nil Err means the command has said all it has to say.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the exit code for what a command returned: 0 for nil, the code an
// ExitError carries, else 1. Silent says there is nothing left to print.
func ExitCode(err error) (code int, silent bool) {
	if err == nil {
		return 0, true
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code, e.Err == nil
	}
	return 1, false
}

func newGateCommand(o *Options) *cobra.Command {
	var revision, baseline, output string
	cmd := &cobra.Command{
		Use:   "gate NAME --revision R [--baseline B]",
		Short: "Judge a revision by its pods' verdicts, as the operator's rollout gate does",
		Long: `Judge revision R of a workload by what its pods' circuit breakers decided,
against baseline B (by default the revision with the most reporting pods other
than R), from the CircuitBreaker's status.revisions, exactly as the operator's
rollout gate does for Argo Rollouts and Flagger (docs/rollouts.md):

  Successful    R's circuit is closed (and it made enough calls to say so)
  Failed        R's circuit is open while B's is not
  Inconclusive  both are open (the dependency fails for everyone), R is too
                quiet, has no reporting pods, or the breaker is forced

A revision is its pods' pod-template-hash (rollouts-pod-template-hash under Argo
Rollouts, controller-revision-hash for a StatefulSet or DaemonSet). Exits 0, 1
or 2 for Successful, Failed and Inconclusive, and 3 when nothing was judged.`,
		Example: `  kubectl fusebox gate payments -n shop --revision 6d4cf56db6
  kubectl fusebox gate payments -n shop --revision 6d4cf56db6 --baseline 7f9c8b5d4 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := o.judge(cmd.Context(), args[0], revision, baseline)
			if err != nil {
				return &ExitError{Code: exitNoJudgement, Err: err}
			}
			if err := printJudgement(o.Out, j, output); err != nil {
				return &ExitError{Code: exitNoJudgement, Err: err}
			}
			switch j.Phase {
			case gate.PhaseSuccessful:
				return nil
			case gate.PhaseFailed:
				return &ExitError{Code: exitFailed}
			default:
				return &ExitError{Code: exitInconclusive}
			}
		},
	}
	cmd.Flags().StringVar(&revision, "revision", "", "The revision to judge: its pods' pod-template-hash (required).")
	cmd.Flags().StringVar(&baseline, "baseline", "", "The revision to compare it with (default: the one with the most reporting pods other than --revision).")
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml, the gate's answer as its endpoint sends it (default: text).")
	return cmd
}

// judge reads the breaker and judges as the gate does.
func (o *Options) judge(ctx context.Context, name, revision, baseline string) (gate.Judgement, error) {
	if revision == "" {
		return gate.Judgement{}, errors.New("--revision is required: the pod-template-hash of the revision to judge")
	}
	ns, err := o.oneNamespace()
	if err != nil {
		return gate.Judgement{}, err
	}
	c, err := o.client()
	if err != nil {
		return gate.Judgement{}, err
	}
	cb := &resiliencev1alpha1.CircuitBreaker{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cb); err != nil {
		return gate.Judgement{}, notFound(err, ns, name)
	}
	j, err := gate.Judge(cb, revision, baseline)
	if err != nil {
		return gate.Judgement{}, fmt.Errorf("--%w", err)
	}
	return j, nil
}

// printJudgement writes j: as the gate's JSON or YAML, or as text, its phase and reason
// then the two revisions' lines.
func printJudgement(w io.Writer, j gate.Judgement, output string) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(j, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(j)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "":
	default:
		return fmt.Errorf("--output %q: want json or yaml (or nothing, for text)", output)
	}
	fmt.Fprintf(w, "%s: %s\n\n", j.Phase, j.Reason)
	tw := printers.GetNewTabWriter(w)
	fmt.Fprintln(tw, "ROLE\tREVISION\tPODS\tSTATE\tOPEN\tCALLS\tFAILURE RATE")
	line := func(role string, r resiliencev1alpha1.RevisionStatus) {
		calls, rate := "-", "-"
		if r.Calls != nil {
			calls = strconv.FormatInt(*r.Calls, 10)
		}
		if r.FailureRatePercent != nil {
			rate = fmt.Sprintf("%d%%", *r.FailureRatePercent)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", role, r.Revision, r.Pods, dash(string(r.State)), r.Open, calls, rate)
	}
	line("revision", j.Revision)
	if j.Baseline != nil {
		line("baseline", *j.Baseline)
	}
	return tw.Flush()
}
