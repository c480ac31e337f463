package circuitbreaker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func override(until time.Duration, reason string) *resiliencev1alpha1.Override {
	return &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedOpen, Until: metav1.NewTime(now.Add(until)), Reason: reason}
}

func withOverride(o *resiliencev1alpha1.Override) *resiliencev1alpha1.CircuitBreaker {
	return &resiliencev1alpha1.CircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: resiliencev1alpha1.CircuitBreakerSpec{Override: o}}
}

func TestValidateOverride(t *testing.T) {
	v := Validator{Now: func() time.Time { return now }}
	for _, tc := range []struct {
		name   string
		o      *resiliencev1alpha1.Override
		fields []string
		detail string
	}{
		{"until in the past", override(-time.Minute, "INC-1"), []string{"spec.override.until"}, "must be in the future"},
		{"until now", override(0, "INC-1"), []string{"spec.override.until"}, "must be in the future"},
		{"until past seven days", override(resiliencev1alpha1.MaxOverrideDuration+time.Second, "INC-1"), []string{"spec.override.until"}, "at most 7 days ahead (no later than 2026-12-07T12:00:00Z)"},
		{"no until", &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeForcedOpen, Reason: "INC-1"}, []string{"spec.override.until"}, "Required"},
		{"blank reason", override(time.Hour, " \t"), []string{"spec.override.reason"}, "say why"},
		{"empty reason and past until", override(-time.Hour, ""), []string{"spec.override.until", "spec.override.reason"}, ""},
		{"mode Enforce", &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeEnforce, Until: metav1.NewTime(now.Add(time.Hour)), Reason: "INC-1"},
			[]string{"spec.override.mode"}, `supported values: "ForcedOpen", "ForcedClosed"`},
		{"mode MetricsOnly", &resiliencev1alpha1.Override{Mode: resiliencev1alpha1.ModeMetricsOnly, Until: metav1.NewTime(now.Add(time.Hour)), Reason: "INC-1"},
			[]string{"spec.override.mode"}, `supported values: "ForcedOpen", "ForcedClosed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.ValidateCreate(context.Background(), withOverride(tc.o))
			if got := causes(t, err); strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("fields %v, want %v (%v)", got, tc.fields, err)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("error %q does not say %q", err, tc.detail)
			}
		})
	}
	for name, o := range map[string]*resiliencev1alpha1.Override{
		"a second ahead":     override(time.Second, "INC-1"),
		"exactly seven days": override(resiliencev1alpha1.MaxOverrideDuration, "INC-1"),
	} {
		if _, err := v.ValidateCreate(context.Background(), withOverride(o)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An override that ran out stays in the object; updates that leave it alone are accepted,
// and any change to it is judged whole.
func TestValidateOverrideRatchets(t *testing.T) {
	v := Validator{Now: func() time.Time { return now }}
	old := withOverride(override(-time.Hour, "INC-1"))
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"team": "payments"}
	relabelled.Spec.Window = dur("20s")
	if _, err := v.ValidateUpdate(context.Background(), old, relabelled); err != nil {
		t.Errorf("update that leaves an expired override alone: %v", err)
	}
	reworded := old.DeepCopy()
	reworded.Spec.Override.Reason = "INC-2"
	_, err := v.ValidateUpdate(context.Background(), old, reworded)
	if got := causes(t, err); len(got) != 1 || got[0] != "spec.override.until" {
		t.Errorf("changed override with a past until: %v", got)
	}
	removed := old.DeepCopy()
	removed.Spec.Override = nil
	if _, err := v.ValidateUpdate(context.Background(), old, removed); err != nil {
		t.Errorf("removing an override: %v", err)
	}
	extended := old.DeepCopy()
	extended.Spec.Override.Until = metav1.NewTime(now.Add(time.Hour))
	if _, err := v.ValidateUpdate(context.Background(), old, extended); err != nil {
		t.Errorf("extending an expired override into the future: %v", err)
	}
}

func cbJSON(t *testing.T, o *resiliencev1alpha1.Override, annotations map[string]string) []byte {
	t.Helper()
	cb := withOverride(o)
	cb.Annotations = annotations
	raw, err := json.Marshal(cb)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// admit runs OverriddenBy and returns the object's annotations after its patch.
func admit(t *testing.T, op admissionv1.Operation, user string, old, obj []byte) (map[string]string, admission.Response) {
	t.Helper()
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: op, UserInfo: authenticationv1.UserInfo{Username: user},
		Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
	}}
	resp := (&admission.Webhook{Handler: OverriddenBy{}}).Handle(context.Background(), req)
	if !resp.Allowed {
		return nil, resp
	}
	patched := obj
	if len(resp.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("patch %s: %v", resp.Patch, err)
		}
		if patched, err = p.Apply(obj); err != nil {
			t.Fatalf("apply %s: %v", resp.Patch, err)
		}
	}
	o, err := decodeObject(patched)
	if err != nil {
		t.Fatal(err)
	}
	return o.Metadata.Annotations, resp
}

func TestOverriddenBy(t *testing.T) {
	const key = resiliencev1alpha1.AnnotationOverriddenBy
	held := override(time.Hour, "INC-1")
	longer := override(2*time.Hour, "INC-1")
	for _, tc := range []struct {
		name     string
		op       admissionv1.Operation
		old, obj []byte
		want     map[string]string
	}{
		{"create with an override records the user", admissionv1.Create, nil,
			cbJSON(t, held, nil), map[string]string{key: "alice"}},
		{"create replaces a forged value", admissionv1.Create, nil,
			cbJSON(t, held, map[string]string{key: "mallory", "team": "a"}), map[string]string{key: "alice", "team": "a"}},
		{"create without an override drops a forged value", admissionv1.Create, nil,
			cbJSON(t, nil, map[string]string{key: "mallory"}), map[string]string{}},
		{"a changed override records the user", admissionv1.Update,
			cbJSON(t, held, map[string]string{key: "bob"}), cbJSON(t, longer, map[string]string{key: "bob"}), map[string]string{key: "alice"}},
		{"an unchanged override keeps who set it", admissionv1.Update,
			cbJSON(t, held, map[string]string{key: "bob"}), cbJSON(t, held, map[string]string{key: "bob", "team": "a"}), map[string]string{key: "bob", "team": "a"}},
		{"an unchanged override restores a rewritten value", admissionv1.Update,
			cbJSON(t, held, map[string]string{key: "bob"}), cbJSON(t, held, map[string]string{key: "mallory"}), map[string]string{key: "bob"}},
		{"an unchanged override restores a removed value", admissionv1.Update,
			cbJSON(t, held, map[string]string{key: "bob"}), cbJSON(t, held, nil), map[string]string{key: "bob"}},
		{"an unchanged override set before the webhook stays unattributed", admissionv1.Update,
			cbJSON(t, held, nil), cbJSON(t, held, map[string]string{key: "mallory"}), map[string]string{}},
		{"removing the override removes who set it", admissionv1.Update,
			cbJSON(t, held, map[string]string{key: "bob"}), cbJSON(t, nil, map[string]string{key: "bob"}), map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, resp := admit(t, tc.op, "alice", tc.old, tc.obj)
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if got == nil {
				got = map[string]string{}
			}
			if len(got) != len(tc.want) {
				t.Errorf("annotations %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("annotations %v, want %v", got, tc.want)
				}
			}
		})
	}

	// An object the schema will refuse for another field is still handled.
	got, resp := admit(t, admissionv1.Create, "alice", nil,
		[]byte(`{"metadata":{"name":"x"},"spec":{"openTimeout":"30","override":{"mode":"ForcedOpen","until":"soon","reason":"r"}}}`))
	if !resp.Allowed || got[key] != "alice" {
		t.Errorf("undecodable CircuitBreaker: %v %+v", got, resp.Result)
	}
	if _, resp := admit(t, admissionv1.Create, "alice", nil, []byte(`{spec:`)); resp.Allowed || resp.Result.Code != 400 {
		t.Errorf("not JSON: %+v, want a 400 denial", resp.AdmissionResponse)
	}
}
