package circuitbreaker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// Paths the webhooks are served on: controller-runtime's conventional paths for
// the type (the markers below and config/webhook/manifests.yaml use them).
const (
	DefaultingPath = "/mutate-resilience-fusebox-dev-v1alpha1-circuitbreaker"
	ValidatingPath = "/validate-resilience-fusebox-dev-v1alpha1-circuitbreaker"
)

// The defaulting webhook may fail open: the CRD's schema defaults the same
// fields, so the only cost of skipping it is that nothing is skipped. The
// validating webhook fails closed, like the schema it completes.
//
// +kubebuilder:webhook:path=/mutate-resilience-fusebox-dev-v1alpha1-circuitbreaker,mutating=true,failurePolicy=ignore,sideEffects=None,groups=resilience.fusebox.dev,resources=circuitbreakers,verbs=create;update,versions=v1alpha1,name=default.circuitbreakers.resilience.fusebox.dev,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-resilience-fusebox-dev-v1alpha1-circuitbreaker,mutating=false,failurePolicy=fail,sideEffects=None,groups=resilience.fusebox.dev,resources=circuitbreakers,verbs=create;update,versions=v1alpha1,name=validate.circuitbreakers.resilience.fusebox.dev,admissionReviewVersions=v1,timeoutSeconds=10

// SetupWithManager registers the defaulting, overridden-by and validating
// webhooks of CircuitBreakers on mgr's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &resiliencev1alpha1.CircuitBreaker{}).
		WithValidator(Validator{}).
		Complete(); err != nil {
		return err
	}
	// The defaulter is the builder's typed Defaulter too, but registered by
	// hand to put schemaFirst in front of it: see there.
	mgr.GetWebhookServer().Register(DefaultingPath, &admission.Webhook{
		Handler: schemaFirst{
			decoder: admission.NewDecoder(mgr.GetScheme()),
			next:    admission.WithDefaulter(mgr.GetScheme(), Defaulter{}),
		},
	})
	mgr.GetWebhookServer().Register(OverriddenByPath, &admission.Webhook{Handler: OverriddenBy{}})
	return nil
}

// schemaFirst passes through, unchanged, an object that is JSON but does not
// decode into a CircuitBreaker (openTimeout: "30", say).
//
// Mutating admission runs before the API server validates the object against
// the CRD's schema. A defaulter that cannot decode the object would deny it
// with the decoder's message, `time: missing unit in duration "30"`, which
// names no field; letting it through leaves the refusal to the schema, whose
// message names the field and the rule (docs/design.md §3). A request that carries no
// object, or one that is not JSON, is still denied: that is a broken request,
// not a bad object.
type schemaFirst struct {
	decoder admission.Decoder
	next    admission.Handler
}

func (h schemaFirst) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return h.next.Handle(ctx, req)
	}
	if len(req.Object.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("fusebox: the admission request carries no object"))
	}
	if !json.Valid(req.Object.Raw) {
		return admission.Errored(http.StatusBadRequest, errors.New("fusebox: the admission request's object is not JSON"))
	}
	if err := h.decoder.Decode(req, &resiliencev1alpha1.CircuitBreaker{}); err != nil {
		return admission.Allowed("left to the schema: " + err.Error())
	}
	return specOnly(h.next.Handle(ctx, req))
}

// specOnly drops the patch operations outside the spec. The defaulter's patch
// is a diff of the request against the re-encoded object, which adds an empty
// status the request did not have; the API server would ignore it, but a
// defaulting webhook has no business there.
func specOnly(resp admission.Response) admission.Response {
	resp.Patches = slices.DeleteFunc(resp.Patches, func(op jsonpatch.JsonPatchOperation) bool {
		return op.Path == "/status" || strings.HasPrefix(op.Path, "/status/")
	})
	if len(resp.Patches) == 0 {
		resp.PatchType = nil
	}
	return resp
}
