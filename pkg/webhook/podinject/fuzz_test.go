package podinject

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
)

// FuzzInjector: whatever the pod, either handler answers without panicking; a
// patch it returns applies to the request's own object, and admitting the
// patched object again patches nothing and warns the same.
func FuzzInjector(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"annotations":{"fusebox.dev/inject":"true"}},"spec":{"containers":[{"name":"a"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/inject":"true"}},"spec":{"volumes":null,"containers":[{"name":"a","env":[],"volumeMounts":null}],"initContainers":[{"name":"s","restartPolicy":"Always"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/inject":"true"}},"spec":{"volumes":[{"name":"fusebox-breakers","emptyDir":{}}],"containers":[{"name":"a","env":[{"name":"POD_NAME","value":"x"}],"volumeMounts":[{"name":"v","mountPath":"/etc/fusebox/."}]}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/inject":"maybe"}},"spec":{"containers":[{}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/sidecar":"true"}},"spec":{"containers":[{"name":"a"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/sidecar":"true","fusebox.dev/inject":"true"}},"spec":{"containers":[{"name":"a"},{"name":"b","volumeMounts":[]}],"initContainers":[{"name":"s","restartPolicy":"Always"},{"name":"i"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/sidecar":"true"}},"spec":{"volumes":[{"name":"fusebox-socket","hostPath":{"path":"/x"}}],"containers":[{"name":"a","volumeMounts":[{"name":"v","mountPath":"/var/run/fusebox/"}]}],"initContainers":[{"name":"fuseboxd","image":"mine"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/node-agent":"true"}},"spec":{"containers":[{"name":"a"}],"initContainers":[{"name":"s","restartPolicy":"Always"}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/node-agent":"true","fusebox.dev/sidecar":"true","fusebox.dev/inject":"true"}},"spec":{"volumes":[{"name":"fusebox-node-agent-token","projected":{"sources":[]}}],"containers":[{"name":"a","volumeMounts":[{"name":"t","mountPath":"/var/run/fusebox/node-agent"}]}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/node-agent":"maybe"}},"spec":{"containers":[{"name":"a","env":[{"name":"FUSEBOX_NODE_AGENT","value":"x"}]}]}}`,
		`{"metadata":{"annotations":{"fusebox.dev/sidecar":"true"}},"spec":{"containers":[{"name":"fuseboxd"}]}}`,
		`{"spec":{"containers":[{"name":"a"}]}}`,
		`[]`, `null`, `{"spec":null}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Both handlers: the annotations' and a labelled namespace's.
		for _, inj := range []Injector{{}, {NamespaceOptedIn: true}} {
			resp := inj.Handle(context.Background(), createRequest(raw))
			if !resp.Allowed {
				if resp.Result == nil || resp.Result.Message == "" {
					t.Fatalf("denial without a reason: %+v", resp.AdmissionResponse)
				}
				continue
			}
			if len(resp.Patches) == 0 {
				continue
			}
			ops, _ := json.Marshal(resp.Patches)
			patch, err := jsonpatchapply.DecodePatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := patch.Apply(raw)
			if err != nil {
				t.Fatalf("patch %s does not apply to %s: %v", ops, raw, err)
			}
			again := inj.Handle(context.Background(), createRequest(patched))
			if !again.Allowed || len(again.Patches) != 0 || !slices.Equal(again.Warnings, resp.Warnings) {
				t.Fatalf("second pass over %s: allowed=%v patches=%v warnings=%q, first warnings %q", patched, again.Allowed, again.Patches, again.Warnings, resp.Warnings)
			}
		}
	})
}
