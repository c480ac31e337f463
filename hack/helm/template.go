package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// values are the defaults the chart's values.yaml states, read from config/.
type values struct {
	found             bool
	repository, tag   string
	replicas          int64
	resources         any
	admissionPolicies []string
	flowControl       []string
	nodeAgent         nodeAgentValues
}

// isFlowControl: a FlowSchema or PriorityLevelConfiguration of config/flowcontrol.
func isFlowControl(o object) bool {
	return strings.HasPrefix(str(o, "apiVersion"), "flowcontrol.apiserver.k8s.io/")
}

// Placeholders stand where a value is not a string, so that the YAML
// encoder leaves them alone; they become template actions after encoding.
const (
	replicasToken  = "FUSEBOX_HELM_REPLICAS"
	resourcesToken = "FUSEBOX_HELM_RESOURCES"
)

// yamlValues are the placeholders that stand for a whole value of the chart's,
// each the value of a key on a line of its own: "KEY: TOKEN" becomes
// "KEY: {{- toYaml .Values.PATH | nindent N }}".
var yamlValues = map[string]string{
	resourcesToken:            ".Values.resources",
	nodeAgentResourcesToken:   ".Values.nodeAgent.resources",
	nodeAgentTolerationsToken: ".Values.nodeAgent.tolerations",
}

var valueLine = regexp.MustCompile(`(?m)^( *)([A-Za-z]+): (FUSEBOX_HELM_[A-Z_]+)$`)

// replaceValueLines turns the lines of text that hold a placeholder of
// yamlValues, or of lineTemplates, into their template actions.
func replaceValueLines(text string) string {
	return valueLine.ReplaceAllStringFunc(text, func(line string) string {
		m := valueLine.FindStringSubmatch(line)
		indent, field, token := m[1], m[2], m[3]
		if path, ok := yamlValues[token]; ok {
			return fmt.Sprintf("%s%s: {{- toYaml %s | nindent %d }}", indent, field, path, len(indent)+2)
		}
		if t, ok := lineTemplates[token]; ok {
			return t(indent, field)
		}
		return line // left for the check that no placeholder remains
	})
}

// template turns one rendered object into chart template text.
func template(src object, defaults *values) (string, error) {
	o, err := deepCopy(src)
	if err != nil {
		return "", err
	}
	// The release's namespace wherever config/default wrote its own: metadata,
	// RBAC subjects, webhook clientConfig, the pod webhook's namespace
	// exclusions, cert-manager's DNS names and CA injection annotation.
	o = replaceStrings(o, func(s string) string {
		return strings.ReplaceAll(s, deployedNamespace, "{{ .Release.Namespace }}")
	}).(object)
	meta, _ := o["metadata"].(map[string]any)
	if isFlowControl(o) {
		// Cluster-scoped, which kustomize's namespace transformer does not
		// know of these kinds: the namespace it wrote means nothing.
		delete(meta, "namespace")
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	labels["app.kubernetes.io/managed-by"] = "{{ .Release.Service }}"
	labels["helm.sh/chart"] = "{{ include `fusebox.chart` . }}"

	switch kind(o) {
	case "Deployment":
		if err := templateDeployment(o, defaults); err != nil {
			return "", err
		}
	case "DaemonSet":
		if err := templateDaemonSet(o, defaults); err != nil {
			return "", err
		}
	}
	data, err := yaml.Marshal(o)
	if err != nil {
		return "", err
	}
	text := string(data)
	text = strings.ReplaceAll(text, replicasToken, "{{ .Values.replicas }}")
	text = replaceValueLines(text)
	if strings.Contains(text, "FUSEBOX_HELM_") {
		return "", fmt.Errorf("%s: a placeholder was left in the template", key(src))
	}
	return "---\n" + text, nil
}

// templateDeployment puts the values on the manager's Deployment: image,
// replicas, resources, leader election and secure metrics.
func templateDeployment(o object, defaults *values) error {
	spec, _ := o["spec"].(map[string]any)
	podSpec, _ := nested(spec, "template", "spec").(map[string]any)
	containers, _ := podSpec["containers"].([]any)
	var c map[string]any
	for _, x := range containers {
		if m, _ := x.(map[string]any); m["name"] == managerContainer {
			c = m
		}
	}
	if c == nil {
		return fmt.Errorf("%s: no container %q", key(o), managerContainer)
	}
	image, _ := c["image"].(string)
	repo, tag, ok := strings.Cut(image, ":")
	if !ok || strings.Contains(tag, "/") {
		return fmt.Errorf("%s: image %q has no tag", key(o), image)
	}
	replicas, _ := spec["replicas"].(float64)
	if !defaults.found {
		defaults.found, defaults.repository, defaults.tag, defaults.replicas, defaults.resources = true, repo, tag, int64(replicas), c["resources"]
	}
	c["image"] = "{{ include `fusebox.image` . }}"
	c["imagePullPolicy"] = "{{ .Values.image.pullPolicy }}"
	c["resources"] = resourcesToken
	spec["replicas"] = replicasToken

	args, _ := c["args"].([]any)
	want := map[string]string{
		"--leader-elect":   "--leader-elect={{ .Values.leaderElection.enabled }}",
		"--metrics-secure": "--metrics-secure={{ .Values.metrics.secure }}",
	}
	for i, a := range args {
		flag, _ := a.(string)
		if t, ok := want[flag]; ok {
			args[i] = t
			delete(want, flag)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("%s: the manager's args %v lack %v, which the chart's values set", key(o), args, keys(want))
	}
	// config/ leaves the sidecar image to the manager's default; the chart names it, so
	// that it follows the chart's version as the manager's image does.
	c["args"] = append(args, "--fuseboxd-image={{ include `fusebox.fuseboxdImage` . }}")
	return nil
}

func nested(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func replaceStrings(v any, f func(string) string) any {
	switch t := v.(type) {
	case string:
		return f(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[f(k)] = replaceStrings(x, f)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = replaceStrings(x, f)
		}
		return out
	default:
		return v
	}
}

func deepCopy(o object) (object, error) {
	data, err := yaml.Marshal(o)
	if err != nil {
		return nil, err
	}
	var out object
	return out, yaml.Unmarshal(data, &out)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
