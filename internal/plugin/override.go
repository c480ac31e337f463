package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// maxReasonLength is spec.override.reason's bound in the CRD.
const maxReasonLength = 256

func newOverrideCommand(o *Options, mode resiliencev1alpha1.Mode) *cobra.Command {
	verb, held := "open", "open"
	if mode == resiliencev1alpha1.ModeForcedClosed {
		verb, held = "close", "closed"
	}
	var hold time.Duration
	var reason string
	cmd := &cobra.Command{
		Use:   verb + " NAME --for DURATION --reason TEXT",
		Short: fmt.Sprintf("Hold a breaker %s for a while (spec.override %s)", held, mode),
		Long: fmt.Sprintf(`Hold the circuit %s in every pod until now + --for (at most %s), through
spec.override; then the operator hands it back to spec.mode. The reason is
shown to whoever looks during the incident, and the operator's webhook records
who set the override in the annotation %s.`, held, duration.HumanDuration(resiliencev1alpha1.MaxOverrideDuration), resiliencev1alpha1.AnnotationOverriddenBy),
		Example: fmt.Sprintf(`  kubectl fusebox %s payments -n shop --for 15m --reason "INC-4211: payments provider down"`, verb),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.setOverride(cmd.Context(), args[0], mode, hold, reason)
		},
	}
	cmd.Flags().Var(durationFlag{&hold}, "for", fmt.Sprintf("How long to hold the circuit %s, such as 15m, 2h or 1d12h (required, at most %s).", held, formatDuration(resiliencev1alpha1.MaxOverrideDuration)))
	cmd.Flags().StringVar(&reason, "reason", "", "Why the circuit is held, for whoever looks during the incident (required, 1 to 256 characters).")
	return cmd
}

// checkOverride says what is wrong with --for and --reason, naming the flag.
func checkOverride(hold time.Duration, reason string) error {
	switch {
	case hold == 0:
		return fmt.Errorf("--for is required: how long to hold the circuit, such as 15m or 2d (at most %s)", formatDuration(resiliencev1alpha1.MaxOverrideDuration))
	case hold < 0:
		return fmt.Errorf("--for %s: must be positive", formatDuration(hold))
	case hold > resiliencev1alpha1.MaxOverrideDuration:
		return fmt.Errorf("--for %s: an override lasts at most %s; set a shorter one and renew it if the incident outlasts it",
			formatDuration(hold), formatDuration(resiliencev1alpha1.MaxOverrideDuration))
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("--reason is required: say why the circuit is held, for whoever looks during the incident")
	case len(reason) > maxReasonLength:
		return fmt.Errorf("--reason is %d characters long: at most %d", len(reason), maxReasonLength)
	}
	return nil
}

// mergePatch is a JSON merge patch (RFC 7386) of spec.override: a nil
// override removes it.
func mergePatch(ov *resiliencev1alpha1.Override) (client.Patch, error) {
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"override": ov}})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, raw), nil
}

// setOverride writes spec.override of the breaker name: mode until now + hold.
// Only spec is patched; status is the operator's.
func (o *Options) setOverride(ctx context.Context, name string, mode resiliencev1alpha1.Mode, hold time.Duration, reason string) error {
	if err := checkOverride(hold, reason); err != nil {
		return err
	}
	ns, err := o.oneNamespace()
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	// Whole seconds: until travels as RFC 3339 without fractions, and rounding
	// down keeps it within the 7 days the webhook allows.
	until := o.Now().Add(hold).UTC().Truncate(time.Second)
	ov := &resiliencev1alpha1.Override{Mode: mode, Until: metav1.NewTime(until), Reason: reason}
	patch, err := mergePatch(ov)
	if err != nil {
		return err
	}
	cb := &resiliencev1alpha1.CircuitBreaker{}
	cb.Namespace, cb.Name = ns, name
	if err := c.Patch(ctx, cb, patch); err != nil {
		return notFound(err, ns, name)
	}
	fmt.Fprintf(o.Out, "circuitbreaker/%s held %s until %s (%s): %s\n", name, mode, until.Format(time.RFC3339), formatDuration(hold), reason)
	return nil
}

func newReleaseCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:     "release NAME",
		Short:   "End a breaker's override now: spec.mode applies again",
		Example: `  kubectl fusebox release payments -n shop`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.release(cmd.Context(), args[0])
		},
	}
}

// release removes spec.override of the breaker name.
func (o *Options) release(ctx context.Context, name string) error {
	ns, err := o.oneNamespace()
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	cb := &resiliencev1alpha1.CircuitBreaker{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cb); err != nil {
		return notFound(err, ns, name)
	}
	if cb.Spec.Override == nil {
		fmt.Fprintf(o.Out, "circuitbreaker/%s has no override: mode %s applies\n", name, breakerView(cb, o.Now()).Mode)
		return nil
	}
	patch, err := mergePatch(nil)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, cb, patch); err != nil {
		return notFound(err, ns, name)
	}
	fmt.Fprintf(o.Out, "circuitbreaker/%s released: mode %s applies\n", name, breakerView(cb, o.Now()).SpecMode)
	return nil
}
