package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// The alert rules in docs/monitoring pass `promtool check rules`, and their
// unit tests (prometheus-rules.test.yaml) pass `promtool test rules`: each
// alert fires when it should and stays silent when it should not. promtool
// is in Debian's prometheus package; .ci/run installs it.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found; `apt-get install prometheus` brings it (.ci/run does)")
		}
		t.Skip("SKIPPED: promtool not found; `apt-get install prometheus` brings it")
	}
	data, err := os.ReadFile("../../docs/monitoring/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The file is a PrometheusRule; promtool reads its spec, plain groups.
	var rule struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	groups, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus-rules.groups.yaml"), groups, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("../../docs/monitoring/prometheus-rules.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus-rules.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "prometheus-rules.groups.yaml"},
		{"test", "rules", "prometheus-rules.test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
