package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Names config/default gives the deployment; the chart keeps them (webhook
// configuration and Secret names are in RBAC resourceNames and in the
// manager's flag defaults), and installs into the release's namespace.
const (
	deployedNamespace = "fusebox-system"
	breakerClientRole = "fusebox-breaker-client"
	managerContainer  = "manager"
	// boundTokenPolicy refuses report writes by tokens bound to no pod; the chart
	// also gates it (and its binding) behind admissionPolicy.refuseUnboundReportTokens.
	boundTokenPolicy = "fusebox-breakerreport-bound-token"
)

const (
	selfSigned  = "self-signed"
	certManager = "cert-manager"
)

type object = map[string]any

// render runs `kustomize build dir`.
func render(kustomize, dir string) ([]object, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(kustomize, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w\n%s", dir, err, stderr.String())
	}
	var objs []object
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// certManagerVariant copies config/ to a temporary directory and switches its
// default deployment to cert-manager, the way config/default's comments tell
// a person to: drop the [SELFSIGNED] component and uncomment every
// [CERTMANAGER] block. It returns the copy's default directory.
func certManagerVariant(configDir, tmp string) (string, error) {
	dst := filepath.Join(tmp, "config")
	if err := copyTree(configDir, dst); err != nil {
		return "", err
	}
	path := filepath.Join(dst, "default", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	uncommented, blocks := uncommentCertManager(string(data))
	if blocks == 0 {
		return "", fmt.Errorf("%s: no [CERTMANAGER] blocks to uncomment", path)
	}
	var k map[string]any
	if err := yaml.Unmarshal([]byte(uncommented), &k); err != nil {
		return "", fmt.Errorf("%s with the [CERTMANAGER] blocks uncommented: %w", path, err)
	}
	var kept []any
	components, _ := k["components"].([]any)
	for _, c := range components {
		if s, _ := c.(string); strings.HasSuffix(s, "/selfsigned") {
			continue
		}
		kept = append(kept, c)
	}
	if len(kept) == len(components) {
		return "", fmt.Errorf("%s: no self-signed component to remove", path)
	}
	if len(kept) == 0 {
		delete(k, "components")
	} else {
		k["components"] = kept
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		return "", err
	}
	return filepath.Dir(path), os.WriteFile(path, out, 0o644)
}

// uncommentCertManager removes the first "#" of the lines of each block that
// a "## [CERTMANAGER]" line opens (lines starting with a single "#"); a block
// ends at a blank line, a line that is not a comment, or a bare "##".
func uncommentCertManager(s string) (string, int) {
	var out strings.Builder
	in, blocks := false, 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "## [CERTMANAGER]"):
			in = true
			blocks++
		case trimmed == "##" || !strings.HasPrefix(trimmed, "#"):
			in = false
		case in && !strings.HasPrefix(trimmed, "##"):
			line = strings.Replace(line, "#", "", 1)
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.String(), blocks
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = in.Close() }()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
}

func kind(o object) string { return str(o, "kind") }
func name(o object) string { return str(o, "metadata", "name") }
func key(o object) string  { return kind(o) + "/" + name(o) }

func str(o object, path ...string) string {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// variant is one object of the chart: the same in both certificate modes,
// or only in one, or different between them.
type variant struct {
	key                     string
	selfSigned, certManager object
}

// pair matches the objects of the two renders by kind and name, in the
// self-signed render's order, then the cert-manager-only ones.
func pair(a, b []object) []variant {
	byKey := map[string]object{}
	for _, o := range b {
		byKey[key(o)] = o
	}
	var out []variant
	seen := map[string]bool{}
	for _, o := range a {
		out = append(out, variant{key: key(o), selfSigned: o, certManager: byKey[key(o)]})
		seen[key(o)] = true
	}
	for _, o := range b {
		if !seen[key(o)] {
			out = append(out, variant{key: key(o), certManager: o})
		}
	}
	return out
}

// Chart holds the generated files, by path relative to the chart directory.
type Chart map[string][]byte

// generate builds the chart from the two renders of config/.
func generate(selfSignedObjs, certManagerObjs []object) (Chart, error) {
	chart := Chart{}
	defaults := values{}
	var templated int
	for _, v := range pair(selfSignedObjs, certManagerObjs) {
		o := v.selfSigned
		if o == nil {
			o = v.certManager
		}
		switch kind(o) {
		case "Namespace":
			// The release's namespace: `helm install --create-namespace`.
			continue
		case "CustomResourceDefinition":
			// Helm installs crds/ before the templates and never deletes them.
			if v.selfSigned == nil || v.certManager == nil || !reflect.DeepEqual(v.selfSigned, v.certManager) {
				return nil, fmt.Errorf("%s differs between the certificate modes; crds/ cannot say that", v.key)
			}
			data, err := yaml.Marshal(o)
			if err != nil {
				return nil, err
			}
			chart["crds/"+name(o)+".yaml"] = append([]byte(generatedHeader), data...)
			continue
		}

		var body string
		switch {
		case v.certManager == nil:
			t, err := template(v.selfSigned, &defaults)
			if err != nil {
				return nil, err
			}
			body = gate(`eq .Values.webhook.certMode "`+selfSigned+`"`, t)
		case v.selfSigned == nil:
			t, err := template(v.certManager, &defaults)
			if err != nil {
				return nil, err
			}
			body = gate(`eq .Values.webhook.certMode "`+certManager+`"`, t)
		case reflect.DeepEqual(v.selfSigned, v.certManager):
			t, err := template(o, &defaults)
			if err != nil {
				return nil, err
			}
			body = t
		default:
			ts, err := template(v.selfSigned, &defaults)
			if err != nil {
				return nil, err
			}
			tc, err := template(v.certManager, &defaults)
			if err != nil {
				return nil, err
			}
			body = fmt.Sprintf("{{- if eq .Values.webhook.certMode %q }}\n%s{{- else }}\n%s{{- end }}\n", selfSigned, ts, tc)
		}
		switch {
		case isNodeAgent(o):
			body = gate(".Values.nodeAgent.enabled", body)
			defaults.nodeAgent.objects = append(defaults.nodeAgent.objects, key(o))
		case kind(o) == "ClusterRole" && name(o) == breakerClientRole:
			body = gate(".Values.breakerClientRole.enabled", body)
		case strings.HasPrefix(str(o, "apiVersion"), "admissionregistration.k8s.io/") &&
			(strings.HasSuffix(kind(o), "AdmissionPolicy") || strings.HasSuffix(kind(o), "AdmissionPolicyBinding")):
			if name(o) == boundTokenPolicy {
				body = gate(".Values.admissionPolicy.refuseUnboundReportTokens", body)
			}
			body = gate(".Values.admissionPolicy.enabled", body)
			defaults.admissionPolicies = append(defaults.admissionPolicies, key(o))
		case isFlowControl(o):
			body = gate(".Values.flowControl.enabled", body)
			defaults.flowControl = append(defaults.flowControl, key(o))
		}
		file := "templates/" + strings.ToLower(kind(o)) + "-" + strings.TrimPrefix(name(o), "fusebox-") + ".yaml"
		if _, dup := chart[file]; dup {
			return nil, fmt.Errorf("two objects would be written to %s", file)
		}
		chart[file] = []byte(generatedHeader + body)
		templated++
	}
	if !defaults.found {
		return nil, errors.New("config/default renders no Deployment with a manager container")
	}
	if !defaults.nodeAgent.found {
		return nil, errors.New("config/default renders no node agent DaemonSet (config/nodeagent), whose values the chart has")
	}
	if templated == 0 {
		return nil, errors.New("nothing to template")
	}
	chart["Chart.yaml"] = []byte(chartYAML(defaults))
	chart["values.yaml"] = []byte(valuesYAML(defaults))
	chart["values.schema.json"] = []byte(valuesSchema)
	chart["templates/NOTES.txt"] = []byte(notes)
	chart["templates/_helpers.tpl"] = []byte(helpers)
	chart[".helmignore"] = []byte("# Generated by hack/helm (make helm).\n*.orig\n*~\n")
	return chart, nil
}

func gate(cond, body string) string {
	return "{{- if " + cond + " }}\n" + body + "{{- end }}\n"
}

// Write replaces dir's contents with the chart.
func (c Chart) Write(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, p := range c.Paths() {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, c[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Paths lists the chart's files in a stable order.
func (c Chart) Paths() []string {
	out := make([]string, 0, len(c))
	for p := range c {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
