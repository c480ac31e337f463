package circuitbreaker

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

func defaultingHandler() admission.Handler {
	scheme := runtime.NewScheme()
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
	return &admission.Webhook{Handler: schemaFirst{
		decoder: admission.NewDecoder(scheme),
		next:    admission.WithDefaulter(scheme, Defaulter{}),
	}}
}

func request(op admissionv1.Operation, raw string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "1",
		Operation: op,
		Object:    runtime.RawExtension{Raw: []byte(raw)},
	}}
}

func TestDefaultingWebhook(t *testing.T) {
	h := defaultingHandler()
	ctx := context.Background()

	// A duration the decoder cannot read is the schema's to refuse, with a
	// message that names the field.
	resp := h.Handle(ctx, request(admissionv1.Create, `{"apiVersion":"resilience.fusebox.dev/v1alpha1","kind":"CircuitBreaker","metadata":{"name":"x"},"spec":{"openTimeout":"30"}}`))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("undecodable object: allowed=%v patches=%v, want allowed unchanged", resp.Allowed, resp.Patches)
	}

	for name, raw := range map[string]string{"no object": "", "not JSON": "{spec:"} {
		resp := h.Handle(ctx, request(admissionv1.Create, raw))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != 400 || resp.Result.Message == "" {
			t.Errorf("%s: %+v, want a 400 denial with a message", name, resp.AdmissionResponse)
		}
	}

	resp = h.Handle(ctx, request(admissionv1.Create, `{"apiVersion":"resilience.fusebox.dev/v1alpha1","kind":"CircuitBreaker","metadata":{"name":"x"},"spec":{"window":"5s"}}`))
	if !resp.Allowed || len(resp.Patches) != 9 {
		t.Errorf("sparse object: allowed=%v patches=%v, want the nine other fields defaulted", resp.Allowed, resp.Patches)
	}
}
