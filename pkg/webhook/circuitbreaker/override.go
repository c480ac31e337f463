package circuitbreaker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// OverriddenByPath is where the webhook that records who set an override is served.
const OverriddenByPath = "/mutate-resilience-fusebox-dev-v1alpha1-circuitbreaker-overridden-by"

// The overridden-by webhook fails closed, unlike the defaulter: skipping it would let a
// client's own fusebox.dev/overridden-by stand, and the annotation is an audit record.
// Its match condition sends it only the writes that carry an override or the annotation,
// so breakers without overrides do not depend on it.
//
// +kubebuilder:webhook:path=/mutate-resilience-fusebox-dev-v1alpha1-circuitbreaker-overridden-by,mutating=true,failurePolicy=fail,sideEffects=None,groups=resilience.fusebox.dev,resources=circuitbreakers,verbs=create;update,versions=v1alpha1,name=overridden-by.circuitbreakers.resilience.fusebox.dev,admissionReviewVersions=v1,reinvocationPolicy=Never,timeoutSeconds=5,patch=`{"matchConditions":[{"name":"override-or-annotation","expression":"(has(object.spec) && has(object.spec.override)) || (has(object.metadata.annotations) && 'fusebox.dev/overridden-by' in object.metadata.annotations)"}]}`

// OverriddenBy is the mutating admission handler that writes who set a CircuitBreaker's
// spec.override into the annotation fusebox.dev/overridden-by, from the user the API
// server authenticated:
//
//   - a write that creates or changes the override records the request's user, replacing
//     whatever the client wrote;
//   - a write that leaves the override as it was keeps the stored value (or its absence),
//     so a client cannot rewrite the record of someone else's override;
//   - a write that removes the override, or an object without one, loses the annotation:
//     it names who holds the circuit, and nobody does. The OverrideStarted Event keeps
//     who did, for as long as Events are kept.
//
// It reads the object as plain JSON, not as a CircuitBreaker, so that an object the
// schema will refuse for another field is still handled rather than refused here.
type OverriddenBy struct{}

var _ admission.Handler = OverriddenBy{}

// object is the part of a CircuitBreaker the handler reads.
type object struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Override json.RawMessage `json:"override"`
	} `json:"spec"`
}

// Handle implements admission.Handler.
func (OverriddenBy) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj, err := decodeObject(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("fusebox: the admission request's object: %w", err))
	}
	current, present := obj.Metadata.Annotations[resiliencev1alpha1.AnnotationOverriddenBy]
	want, keep := "", false // the annotation the object must carry; keep: none
	switch {
	case !hasOverride(obj):
	case req.Operation == admissionv1.Update && sameOverride(req.OldObject.Raw, obj):
		old, err := decodeObject(req.OldObject.Raw)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("fusebox: the admission request's old object: %w", err))
		}
		want, keep = old.Metadata.Annotations[resiliencev1alpha1.AnnotationOverriddenBy]
	default:
		want, keep = req.UserInfo.Username, true
	}
	switch {
	case keep && present && current == want:
		return admission.Allowed("")
	case keep && obj.Metadata.Annotations == nil:
		return admission.Patched("", jsonpatch.NewOperation("add", "/metadata/annotations",
			map[string]string{resiliencev1alpha1.AnnotationOverriddenBy: want}))
	case keep:
		return admission.Patched("", jsonpatch.NewOperation("add", annotationPath, want))
	case present:
		return admission.Patched("", jsonpatch.NewOperation("remove", annotationPath, nil))
	}
	return admission.Allowed("")
}

// annotationPath is the JSON pointer of the annotation ("/" in its key escaped as "~1").
var annotationPath = "/metadata/annotations/" + strings.ReplaceAll(resiliencev1alpha1.AnnotationOverriddenBy, "/", "~1")

func decodeObject(raw []byte) (object, error) {
	var o object
	if len(raw) == 0 {
		return o, errors.New("missing")
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return o, err
	}
	return o, nil
}

func hasOverride(o object) bool {
	return len(o.Spec.Override) > 0 && !bytes.Equal(o.Spec.Override, []byte("null"))
}

// sameOverride reports whether the old object's override is the new one's, as JSON
// values: the same mode, until and reason (a until written another way counts as a change,
// made by whoever wrote it).
func sameOverride(oldRaw []byte, obj object) bool {
	old, err := decodeObject(oldRaw)
	if err != nil || !hasOverride(old) {
		return false
	}
	var a, b any
	if json.Unmarshal(old.Spec.Override, &a) != nil || json.Unmarshal(obj.Spec.Override, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// validateOverride refuses an override that would hold nothing or hold too long: an until
// not after now, or more than MaxOverrideDuration ahead, a mode other than ForcedOpen or
// ForcedClosed, and a reason that is blank. The schema refuses a missing field and a
// reason over 256 characters.
//
// With old set (an update), an override the update leaves as it was is not judged: an
// override that ran out stays in the object, and the object must stay editable.
func validateOverride(o, old *resiliencev1alpha1.Override, now time.Time, path *field.Path) field.ErrorList {
	if o == nil || (old != nil && old.Mode == o.Mode && old.Reason == o.Reason && old.Until.Equal(&o.Until)) {
		return nil
	}
	var errs field.ErrorList
	// The schema's enum says the same; this holds for a CRD installed before it did.
	if o.Mode != resiliencev1alpha1.ModeForcedOpen && o.Mode != resiliencev1alpha1.ModeForcedClosed {
		errs = append(errs, field.NotSupported(path.Child("mode"), o.Mode,
			[]resiliencev1alpha1.Mode{resiliencev1alpha1.ModeForcedOpen, resiliencev1alpha1.ModeForcedClosed}))
	}
	until := o.Until.Time
	latest := now.Add(resiliencev1alpha1.MaxOverrideDuration)
	switch {
	case until.IsZero():
		errs = append(errs, field.Required(path.Child("until"), "when the override ends, in RFC 3339 (e.g. "+
			now.Add(time.Hour).UTC().Format(time.RFC3339)+")"))
	case !until.After(now):
		errs = append(errs, field.Invalid(path.Child("until"), until.UTC().Format(time.RFC3339),
			fmt.Sprintf("must be in the future (it is now %s): an override that has ended holds nothing; to end one early, remove spec.override",
				now.UTC().Format(time.RFC3339))))
	case until.After(latest):
		errs = append(errs, field.Invalid(path.Child("until"), until.UTC().Format(time.RFC3339),
			fmt.Sprintf("must be at most %s ahead (no later than %s): set a new override when this one ends",
				humanDays(resiliencev1alpha1.MaxOverrideDuration), latest.UTC().Format(time.RFC3339))))
	}
	if strings.TrimSpace(o.Reason) == "" {
		errs = append(errs, field.Required(path.Child("reason"), "say why the circuit is held (an incident reference, say), for whoever looks during the incident"))
	}
	return errs
}

func humanDays(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}
