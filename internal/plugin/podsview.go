package plugin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/fusebox-dev/fusebox/internal/counting"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// BreakerPodsKind and BreakerPodsAPIVersion name what `pods NAME -o json|yaml` prints:
// the plugin's own view, not a resource the API server serves.
const (
	BreakerPodsKind       = "BreakerPods"
	BreakerPodsAPIVersion = "plugin.fusebox.dev/v1alpha1"
)

// BreakerPods is every pod that reports one breaker, most relevant first, and the node
// agents that did not answer: what `pods NAME` prints and the dashboard shows.
type BreakerPods struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        BreakerRef `json:"metadata"`
	// Generation is the CircuitBreaker's: a pod on another config generation is behind.
	Generation int64     `json:"generation"`
	Pods       []PodLine `json:"pods"`
	// Unanswered are the node agents that did not answer, each with the reason.
	Unanswered []UnansweredAgent `json:"unanswered,omitempty"`
	// Agents is how many node agents were asked.
	Agents int `json:"agents"`
	// Notes say what could not be read and so is missing from Pods.
	Notes []string `json:"notes,omitempty"`
}

// BreakerRef names the breaker.
type BreakerRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// How a pod's line reached the plugin.
const (
	// ViaNodeAgent: the pod reports through its node's agent, which served its line.
	ViaNodeAgent = "NodeAgent"
	// ViaBreakerReport: the pod reports on its own, in its BreakerReport.
	ViaBreakerReport = "BreakerReport"
)

// PodLine is one pod's line for the breaker, as it reported it.
type PodLine struct {
	Pod string `json:"pod"`
	UID string `json:"uid,omitempty"`
	// Node is the pod's node: its agent's, or for a pod reporting on its own its
	// spec.nodeName when the pod could be read.
	Node     string `json:"node,omitempty"`
	Revision string `json:"revision,omitempty"`
	// Via is ViaNodeAgent or ViaBreakerReport; Agent names the agent's pod.
	Via   string `json:"via"`
	Agent string `json:"agent,omitempty"`
	// Circuit is the pod's entry for the breaker.
	Circuit breakerconfig.ReportEntry `json:"circuit"`
}

// UnansweredAgent is a node agent that did not answer, and why.
type UnansweredAgent struct {
	Agent  string `json:"agent"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
}

// sortPods orders the lines by standing (counting.Standing: as status.members ranks pods), then the most recent first, then by pod name
// (and node, for a name seen on two nodes while a pod moves).
func sortPods(lines []PodLine, generation int64) {
	slices.SortStableFunc(lines, func(a, b PodLine) int {
		return cmp.Or(
			cmp.Compare(counting.Standing(&a.Circuit, generation), counting.Standing(&b.Circuit, generation)),
			b.Circuit.Since.Compare(a.Circuit.Since.Time),
			cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Node, b.Node))
	})
}

// podsHeader is the pods table's header.
const podsHeader = "NODE\tPOD\tREVISION\tSTATE\tREASON\tSINCE\tCALLS\tFAILURE%\tCONFIG"

// maxConfigErrorShown bounds a refusal in the table; -o yaml has it whole.
const maxConfigErrorShown = 60

// writePods writes v as a table, then a line per node agent that did not answer.
// Nothing to list is said on errOut, as `status` says it.
func writePods(out, errOut io.Writer, v *BreakerPods, now time.Time) error {
	if len(v.Pods) == 0 {
		fmt.Fprintf(errOut, "No pod reports circuitbreaker %s in namespace %s.\n", v.Metadata.Name, v.Metadata.Namespace)
	} else {
		w := printers.GetNewTabWriter(out)
		fmt.Fprintln(w, podsHeader)
		for i := range v.Pods {
			l := &v.Pods[i]
			e := &l.Circuit
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				nodeText(l), l.Pod, dash(l.Revision), dash(e.State), dash(e.Reason), age(e.Since.Time, now),
				callsText(e.Calls), failureText(e.FailureRatePercent), configText(e, v.Generation))
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if len(v.Unanswered) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\n%d of %d node agents did not answer; their pods are not listed:\n", len(v.Unanswered), v.Agents)
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "  NODE\tAGENT\tREASON")
	for _, u := range v.Unanswered {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", dash(u.Node), u.Agent, u.Reason)
	}
	return w.Flush()
}

// nodeText is the NODE cell: a pod reporting on its own is marked as such.
func nodeText(l *PodLine) string {
	if l.Via != ViaBreakerReport {
		return dash(l.Node)
	}
	if l.Node == "" {
		return "(own report)"
	}
	return l.Node + " (own report)"
}

func callsText(c *int64) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatInt(*c, 10)
}

func failureText(p *int32) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p)) + "%"
}

// configText is the CONFIG cell: the generation the pod runs, what it is behind, or the
// refusal of the latest.
func configText(e *breakerconfig.ReportEntry, generation int64) string {
	switch {
	case e.ConfigError != "":
		msg := []rune(e.ConfigError)
		if len(msg) > maxConfigErrorShown {
			msg = append(msg[:maxConfigErrorShown-1], '…')
		}
		return "refused: " + string(msg)
	case e.ConfigGeneration == 0:
		return "-"
	case e.ConfigGeneration != generation:
		return fmt.Sprintf("%d (latest %d)", e.ConfigGeneration, generation)
	}
	return strconv.FormatInt(e.ConfigGeneration, 10)
}

// printPods prints v with one of kubectl's printers, as an object of its own kind.
func printPods(p printers.ResourcePrinter, v *BreakerPods, w io.Writer) error {
	v.APIVersion, v.Kind = BreakerPodsAPIVersion, BreakerPodsKind
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		return err
	}
	return p.PrintObj(u, w)
}
