package nodeagent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// TestWireBoundsAreTheSchemas: the bounds the agent checks a report against fit the
// NodeBreakerReport schema's: one pod's whole report fits an object of its own.
func TestWireBoundsAreTheSchemas(t *testing.T) {
	if breakerconfig.MaxAgentEntries > resiliencev1alpha1.MaxNodeReportEntries {
		t.Errorf("breakerconfig.MaxAgentEntries %d, over the schema's bound on a node report's entries %d", breakerconfig.MaxAgentEntries, resiliencev1alpha1.MaxNodeReportEntries)
	}
}

// TestObjectIsTheAPIType: the object the agent writes is a NodeBreakerReport as the API
// type reads it, field for field, owned by the Node, its entries what the pods add up to.
func TestObjectIsTheAPIType(t *testing.T) {
	b := newBook("node-a", &recorder{}, nil, nil)
	calls := int64(40)
	e := tripped
	e.Calls = &calls
	entries := counting.Node([]counting.PodLine{
		{Name: "checkout-b", UID: "uid-2", Entries: []breakerconfig.ReportEntry{e}},
		{Name: "checkout-a", UID: "uid-1", Entries: []breakerconfig.ReportEntry{started}},
	})
	raw, err := json.Marshal(b.object("shop", entries, "node-a-uid"))
	if err != nil {
		t.Fatal(err)
	}
	var api resiliencev1alpha1.NodeBreakerReport
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&api); err != nil {
		t.Fatalf("the API type cannot read what the agent writes: %v\n%s", err, raw)
	}
	if api.Name != "node-a" || api.NodeName != "node-a" || api.Namespace != "shop" || api.Kind != breakerconfig.NodeReportKind {
		t.Errorf("object %s/%s of node %s, kind %s", api.Namespace, api.Name, api.NodeName, api.Kind)
	}
	if len(api.OwnerReferences) != 1 || api.OwnerReferences[0].Kind != "Node" || api.OwnerReferences[0].Name != "node-a" || api.OwnerReferences[0].UID != "node-a-uid" {
		t.Errorf("owners %+v, want exactly the Node", api.OwnerReferences)
	}
	if len(api.Breakers) != 1 {
		t.Fatalf("entries %+v, want one: payments at no revision", api.Breakers)
	}
	got := api.Breakers[0]
	if got.Pods != 2 || got.Open != 1 || got.EarnedOpen != 1 || got.Closed != 1 || got.Calls != 40 || len(got.Notable) != 1 ||
		got.Notable[0].Name != "checkout-b" || got.Notable[0].UID != "uid-2" || *got.Notable[0].Calls != 40 {
		t.Errorf("entry %+v", got)
	}
	if !strings.Contains(string(raw), `"openSince":"2026-12-02T09:00:00.000000Z"`) {
		t.Errorf("openSince not written to the microsecond: %s", raw)
	}
}

// token is an unsigned JWT with the given payload: enough for the checks the agent makes
// before asking the API server.
func token(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(payload)) + ".c2ln"
}

func TestReadClaims(t *testing.T) {
	exp := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, token string
		aud         []string
		err         string
	}{
		{"a list of audiences", token(fmt.Sprintf(`{"aud":["a","fusebox.dev/node-agent"],"exp":%d}`, exp.Unix())), []string{"a", "fusebox.dev/node-agent"}, ""},
		{"one audience", token(fmt.Sprintf(`{"aud":"fusebox.dev/node-agent","exp":%d}`, exp.Unix())), []string{"fusebox.dev/node-agent"}, ""},
		{"garbage", "garbage", nil, "not a JWT (want three dot-separated parts, got 1)"},
		{"not base64", "a.b!.c", nil, "not a JWT: payload"},
		{"not JSON", token(`{"aud":`), nil, "not a JWT: payload"},
		{"exp a string", token(`{"exp":"soon"}`), nil, "not a JWT: payload"},
	} {
		c, err := readClaims(tc.token)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !c.expires.Equal(exp) || strings.Join(c.audiences, ",") != strings.Join(tc.aud, ","):
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

// TestJudge: what the agent makes of the API server's answer about a token, and whom the
// pods' endpoints then serve: a service account's token is an identity, a pod's one bound
// to a pod on a node.
func TestJudge(t *testing.T) {
	pod := authenticationv1.UserInfo{Username: "system:serviceaccount:shop:checkout", Extra: map[string]authenticationv1.ExtraValue{
		extraPodName: {"checkout-7d9f"}, extraPodUID: {"pod-uid"}, extraNodeName: {"node-a"}, extraNodeUID: {"node-uid"},
	}}
	noNode := authenticationv1.UserInfo{Username: pod.Username, Extra: map[string]authenticationv1.ExtraValue{extraPodName: {"x"}, extraPodUID: {"y"}}}
	reader := authenticationv1.UserInfo{Username: "system:serviceaccount:fusebox-system:fusebox-node-reader"}
	for _, tc := range []struct {
		name   string
		status authenticationv1.TokenReviewStatus
		code   int    // judge's refusal; 0 for an identity
		asPod  string // what asPod says of the identity; "" for a pod's
	}{
		{"a pod's token", authenticationv1.TokenReviewStatus{Authenticated: true, User: pod, Audiences: []string{breakerconfig.NodeAgentAudience}}, 0, ""},
		{"expired", authenticationv1.TokenReviewStatus{Error: "token has expired"}, http.StatusUnauthorized, "token has expired"},
		{"another audience", authenticationv1.TokenReviewStatus{Authenticated: true, User: pod, Audiences: []string{"https://kubernetes.default.svc"}}, http.StatusUnauthorized, "not for audience"},
		{"a person", authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, http.StatusForbidden, "not a service account"},
		{"a Secret's token", authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: pod.Username}}, 0, "bound to no pod"},
		{"a pod on no node", authenticationv1.TokenReviewStatus{Authenticated: true, User: noNode}, 0, "names no node"},
		{"a reader's token", authenticationv1.TokenReviewStatus{Authenticated: true, User: reader, Audiences: []string{breakerconfig.NodeAgentAudience}}, 0, "bound to no pod"},
	} {
		id, r := judge(tc.status)
		switch {
		case tc.code != 0:
			if r == nil || r.status != tc.code || !strings.Contains(r.msg, tc.asPod) {
				t.Errorf("%s: %v, want %d saying %q", tc.name, r, tc.code, tc.asPod)
			}
		case r != nil:
			t.Errorf("%s: refused: %v", tc.name, r)
		case id.username != tc.status.User.Username:
			t.Errorf("%s: identity %+v, want user %s", tc.name, id, tc.status.User.Username)
		case tc.asPod == "" && (id.namespace != "shop" || id.serviceAccount != "checkout" || id.pod != "checkout-7d9f" || id.podUID != "pod-uid" || id.node != "node-a" || id.asPod() != nil):
			t.Errorf("%s: identity %+v (as a pod: %v)", tc.name, id, id.asPod())
		case tc.asPod != "":
			if p := id.asPod(); p == nil || p.status != http.StatusForbidden || !strings.Contains(p.msg, tc.asPod) {
				t.Errorf("%s: as a pod %v, want 403 saying %q", tc.name, p, tc.asPod)
			}
		}
	}
}

// FuzzReadClaims: whatever arrives as a bearer token, reading its claims never panics,
// and claims are read only from a token of three parts whose second is a JSON object, so
// that nothing else is ever taken for a JWT.
func FuzzReadClaims(f *testing.F) {
	f.Add(token(`{"aud":["fusebox.dev/node-agent"],"exp":1800000000}`))
	f.Add(token(`{"aud":"x","exp":1e3}`))
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		if _, err := readClaims(tok); err != nil {
			return
		}
		parts := strings.Split(tok, ".")
		if len(parts) != 3 {
			t.Fatalf("claims read from %d parts", len(parts))
		}
		raw, err := base64.RawURLEncoding.DecodeString(parts[1])
		var payload map[string]any
		if err != nil || json.Unmarshal(raw, &payload) != nil {
			t.Fatalf("claims read from a payload that is no JSON object: %q", raw)
		}
	})
}
