package fuseboxd_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fusebox-dev/fusebox/internal/fuseboxd"
)

// GET /v1/breakers/{name} shows the candidate the published document carries, and what
// it did in shadow on the calls the daemon's clients made: a blip the enforced policy
// rides out opens it, and it refuses none of the calls it would have refused.
func TestDescribeShowsTheCandidate(t *testing.T) {
	candidate := `{"candidate":{"openTimeout":"10s","window":"10s","failureRatio":0.2,"minimumThroughput":4,"successThreshold":1,"halfOpenPermittedCalls":1}}`
	d := startDaemon(t, fuseboxd.Options{}, map[string]string{"payments": testConfig("payments", 3, candidate)})
	d.waitFor("the candidate", func() bool {
		code, _, body := d.do("GET", "/v1/breakers/payments", "")
		return code == http.StatusOK && json.Valid(body) && describedCandidate(t, body) != nil
	})
	for _, outcome := range []string{"success", "success", "success", "failure", "success", "success"} {
		d.call("payments", outcome)
	}
	code, _, body := d.do("GET", "/v1/breakers/payments", "")
	if code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, body)
	}
	c := describedCandidate(t, body)
	if d.describe("payments").State != "closed" || c == nil || c.State != "Open" || c.Opens != 1 || c.WouldRefuse != 2 {
		t.Fatalf("after a blip: %s", body)
	}
	var doc struct {
		Policy struct {
			Candidate map[string]any `json:"candidate"`
		} `json:"policy"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Policy.Candidate["failureRatio"] != 0.2 {
		t.Errorf("the candidate's policy under policy.candidate: %s", body)
	}

	// Without a candidate in the document, none is shown.
	d.writeConfig("payments", testConfig("payments", 4, ""))
	d.waitFor("the candidate to go", func() bool {
		_, _, body := d.do("GET", "/v1/breakers/payments", "")
		return describedCandidate(t, body) == nil
	})
}

type shownCandidate struct {
	State       string `json:"state"`
	Opens       int64  `json:"opens"`
	WouldRefuse int64  `json:"wouldRefuse"`
}

func describedCandidate(t *testing.T, body []byte) *shownCandidate {
	t.Helper()
	var out struct {
		Candidate *shownCandidate `json:"candidate"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out.Candidate
}
