package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/internal/gate"
)

func TestPrintJudgement(t *testing.T) {
	j := gate.Judgement{
		Phase:  gate.PhaseFailed,
		Reason: "revision new is open (2 of 2 pods opened it themselves) while baseline old is closed (0 of 4 pods opened it themselves)",
		Revision: resiliencev1alpha1.RevisionStatus{Revision: "new", Pods: 2, State: resiliencev1alpha1.StateOpen, Open: 2,
			Calls: ptr.To[int64](80), FailureRatePercent: ptr.To[int32](75)},
		Baseline: &resiliencev1alpha1.RevisionStatus{Revision: "old", Pods: 4, State: resiliencev1alpha1.StateClosed},
	}
	var text bytes.Buffer
	if err := printJudgement(&text, j, ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Failed: revision new is open",
		"ROLE       REVISION   PODS   STATE    OPEN   CALLS   FAILURE RATE",
		"revision   new        2      Open     2      80      75%",
		"baseline   old        4      Closed   0      -       -",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := printJudgement(&js, j, "json"); err != nil {
		t.Fatal(err)
	}
	var back gate.Judgement
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Phase != j.Phase || back.Baseline == nil || back.Baseline.Revision != "old" {
		t.Errorf("-o json does not read back as the judgement: %v\n%s", err, js.String())
	}
	if err := printJudgement(&js, j, "wide"); err == nil || !strings.Contains(err.Error(), "want json or yaml") {
		t.Errorf("-o wide: %v, want a refusal naming json and yaml", err)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   int
		silent bool
	}{
		{nil, 0, true},
		{&ExitError{Code: exitFailed}, 1, true},
		{&ExitError{Code: exitInconclusive}, 2, true},
		{&ExitError{Code: exitNoJudgement, Err: errors.New("not found")}, 3, false},
		{errors.New("any other"), 1, false},
	} {
		if code, silent := ExitCode(tc.err); code != tc.code || silent != tc.silent {
			t.Errorf("ExitCode(%v) = %d, %v; want %d, %v", tc.err, code, silent, tc.code, tc.silent)
		}
	}
}
