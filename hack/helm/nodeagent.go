package main

import (
	"fmt"
	"strings"
)

// The node agent (config/nodeagent): its objects are behind nodeAgent.enabled, and
// its DaemonSet takes the nodeAgent values.

// nodeAgentComponent is the app.kubernetes.io/component label every object of
// config/nodeagent carries; the operator finds agent pods by it too.
const (
	componentLabel     = "app.kubernetes.io/component"
	nodeAgentComponent = "node-agent"
	nodeAgentContainer = "agent"
)

const (
	nodeAgentResourcesToken   = "FUSEBOX_HELM_NODE_AGENT_RESOURCES"
	nodeAgentTolerationsToken = "FUSEBOX_HELM_NODE_AGENT_TOLERATIONS"
	nodeAgentPriorityToken    = "FUSEBOX_HELM_NODE_AGENT_PRIORITY"
)

// lineTemplates are the placeholders whose line becomes a block of template text,
// given the line's indent and key: a field present only when its value is set.
var lineTemplates = map[string]func(indent, field string) string{
	nodeAgentPriorityToken: func(indent, field string) string {
		return fmt.Sprintf("%[1]s{{- with .Values.nodeAgent.priorityClassName }}\n%[1]s%[2]s: {{ . | quote }}\n%[1]s{{- end }}", indent, field)
	},
}

// nodeAgentValues are the nodeAgent defaults values.yaml states, read from the
// DaemonSet of config/nodeagent.
type nodeAgentValues struct {
	found                  bool
	resources, tolerations any
	objects                []string
}

// isNodeAgent: an object of config/nodeagent.
func isNodeAgent(o object) bool {
	return str(o, "metadata", "labels", componentLabel) == nodeAgentComponent
}

// templateDaemonSet puts the nodeAgent values on the agent's DaemonSet: image,
// resources, tolerations and priority class.
func templateDaemonSet(o object, defaults *values) error {
	if !isNodeAgent(o) {
		return fmt.Errorf("%s: a DaemonSet that is not the node agent's (label %s=%s); hack/helm knows no values for it", key(o), componentLabel, nodeAgentComponent)
	}
	podSpec, _ := nested(o, "spec", "template", "spec").(map[string]any)
	containers, _ := podSpec["containers"].([]any)
	var c map[string]any
	for _, x := range containers {
		if m, _ := x.(map[string]any); m["name"] == nodeAgentContainer {
			c = m
		}
	}
	if c == nil {
		return fmt.Errorf("%s: no container %q", key(o), nodeAgentContainer)
	}
	if image, _ := c["image"].(string); !strings.HasSuffix(strings.SplitN(image, ":", 2)[0], "/fuseboxd") {
		return fmt.Errorf("%s: image %q is not fuseboxd, which the chart's nodeAgent.image defaults to", key(o), image)
	}
	if _, set := podSpec["priorityClassName"]; set {
		return fmt.Errorf("%s: config/ sets priorityClassName, which the chart's nodeAgent.priorityClassName leaves unset by default", key(o))
	}
	if !defaults.nodeAgent.found {
		defaults.nodeAgent.found, defaults.nodeAgent.resources, defaults.nodeAgent.tolerations = true, c["resources"], podSpec["tolerations"]
	}
	c["image"] = "{{ include `fusebox.nodeAgentImage` . }}"
	c["imagePullPolicy"] = "{{ .Values.nodeAgent.image.pullPolicy }}"
	c["resources"] = nodeAgentResourcesToken
	podSpec["tolerations"] = nodeAgentTolerationsToken
	podSpec["priorityClassName"] = nodeAgentPriorityToken
	return nil
}
