package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

func newPodsCommand(o *Options) *cobra.Command {
	printFlags := genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)
	cmd := &cobra.Command{
		Use:   "pods NAME",
		Short: "List every pod that reports a breaker, open first, from the node agents and the pods' own reports",
		Long: `List every pod that reports breaker NAME, with its state, why, since when, the
window at its last transition and the config it runs: open first, then half-open,
refusing the config, behind it, and closed; the most recent first within each.

A node agent keeps its pods' lines on its node (its NodeBreakerReport carries only
counts): the plugin asks every agent, through the API server's pods/proxy, with a
10-minute token of service account fusebox-node-reader, each for at most 2s. An
agent that does not answer in time, or refuses, is named with the reason. Pods
that report on their own (their BreakerReport) are listed too, marked as such.

It needs the Role fusebox-node-reader in the namespace Fusebox runs in
(--fusebox-namespace) bound to you: docs/plugin.md.`,
		Example: `  kubectl fusebox pods payments -n shop
  kubectl fusebox pods payments -n shop -o yaml
  kubectl fusebox pods payments -n shop -o jsonpath='{range .pods[*]}{.pod}{"\t"}{.circuit.state}{"\n"}{end}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p printers.ResourcePrinter
			switch format := ptr.Deref(printFlags.OutputFormat, ""); format {
			case "":
			case "name", "wide":
				return fmt.Errorf("--output %s: the pods have no -o %[1]s; want json, yaml, jsonpath=... or go-template=... (or nothing, for a table)", format)
			default:
				var err error
				if p, err = printFlags.ToPrinter(); err != nil {
					return fmt.Errorf("--output %q: want one of %s (or nothing, for a table)", format, strings.Join(printFlags.AllowedFormats(), ", "))
				}
			}
			ns, err := o.oneNamespace()
			if err != nil {
				return err
			}
			r, err := o.podsReader()
			if err != nil {
				return err
			}
			v, err := r.read(cmd.Context(), ns, args[0])
			if err != nil {
				return err
			}
			for _, n := range v.Notes {
				fmt.Fprintln(o.ErrOut, "warning:", n)
			}
			if p != nil {
				return printPods(p, v, o.Out)
			}
			return writePods(o.Out, o.ErrOut, v, o.Now())
		},
	}
	printFlags.AddFlags(cmd)
	cmd.Flag("output").Usage = "Output format: json, yaml, jsonpath=..., go-template=... (default: a table)."
	return cmd
}

// podsReader reads the pods of a breaker: from every node agent, and from the pods'
// own BreakerReports. The dashboard keeps one and reuses its token. Safe for concurrent
// use.
type podsReader struct {
	c         client.Client
	cs        kubernetes.Interface
	fuseboxNS string
	fetch     agentFetcher

	mu      sync.Mutex
	token   string    // guarded by mu
	renewAt time.Time // guarded by mu
}

// podsReader is a reader of the cluster the flags name, reaching the agents through
// pods/proxy unless the options carry another fetcher (the tests' direct one).
func (o *Options) podsReader() (*podsReader, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// The agents are asked at once, each within agentTimeout: client-go's default
	// client-side rate limit (5 requests a second) would spend their time in its queue.
	// agentsInFlight bounds them instead, and the API server's own flow control.
	cfg.QPS = -1
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	fetch := o.fetchAgent
	if fetch == nil {
		fetch = proxyFetcher(cs)
	}
	return &podsReader{c: c, cs: cs, fuseboxNS: o.FuseboxNamespace, fetch: fetch}, nil
}

// readerToken returns a token for the agents, requesting one when the last is near its
// end.
func (r *podsReader) readerToken(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.token != "" && time.Now().Before(r.renewAt) {
		return r.token, nil
	}
	token, expires, err := readerToken(ctx, r.cs, r.fuseboxNS)
	if err != nil {
		return "", err
	}
	// Renewed with a third of its life left, so no request carries one that expires
	// on the way.
	r.token, r.renewAt = token, time.Now().Add(time.Until(expires)*2/3)
	return token, nil
}

// read gathers every pod that reports breaker name in namespace ns, most relevant
// first. What it could not read (an agent that did not answer, the pods' own reports
// refused by RBAC) is named in the view; an error means nothing useful could be read.
func (r *podsReader) read(ctx context.Context, ns, name string) (*BreakerPods, error) {
	var cb resiliencev1alpha1.CircuitBreaker
	if err := r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cb); err != nil {
		return nil, notFound(err, ns, name)
	}
	v := &BreakerPods{Metadata: BreakerRef{Namespace: ns, Name: name}, Generation: cb.Generation, Pods: []PodLine{}}
	agents, err := findAgents(ctx, r.c, r.fuseboxNS)
	if err != nil {
		return nil, err
	}
	v.Agents = len(agents)
	if len(agents) > 0 {
		if err := r.readAgents(ctx, v, agents); err != nil {
			return nil, err
		}
	}
	r.readOwnReports(ctx, v)
	if len(agents) == 0 {
		if len(v.Pods) == 0 {
			return nil, fmt.Errorf("%s; and no pod of namespace %s reports circuitbreaker %s on its own", noAgentsHint(r.fuseboxNS), ns, name)
		}
		v.Notes = append(v.Notes, noAgentsHint(r.fuseboxNS)+": only the pods that report on their own are listed")
	}
	sortPods(v.Pods, v.Generation)
	return v, nil
}

// readAgents adds the lines every agent answers with, and the agents that did not.
func (r *podsReader) readAgents(ctx context.Context, v *BreakerPods, agents []corev1.Pod) error {
	token, err := r.readerToken(ctx)
	if err != nil {
		return err
	}
	query := url.Values{breakerconfig.AgentPodsNamespace: {v.Metadata.Namespace}, breakerconfig.AgentPodsBreaker: {v.Metadata.Name}}
	answers := askAgents(ctx, r.fetch, agents, query, token)
	refused := 0
	for _, a := range answers {
		if a.err == nil {
			v.Pods = append(v.Pods, agentLines(a, v.Metadata)...)
			continue
		}
		if apierrors.IsForbidden(a.err) {
			refused++
		}
		v.Unanswered = append(v.Unanswered, UnansweredAgent{Agent: a.agent.Name, Node: a.agent.Spec.NodeName, Reason: a.err.Error()})
	}
	if refused == len(answers) {
		// The same refusal of pods/proxy for every agent is the user's RBAC, not
		// the agents': one error says it.
		return answers[0].err
	}
	slices.SortFunc(v.Unanswered, func(a, b UnansweredAgent) int {
		return strings.Compare(a.Node+"/"+a.Agent, b.Node+"/"+b.Agent)
	})
	return nil
}

// agentLines are the lines of the breaker in one agent's answer.
func agentLines(a agentAnswer, b BreakerRef) []PodLine {
	node := a.pods.Node
	if node == "" {
		node = a.agent.Spec.NodeName
	}
	var out []PodLine
	for _, p := range a.pods.Pods {
		if p.Namespace != b.Namespace {
			continue
		}
		for _, e := range p.Breakers {
			if e.Name == b.Name {
				out = append(out, PodLine{Pod: p.Name, UID: p.UID, Node: node, Revision: p.Revision, Via: ViaNodeAgent, Agent: a.agent.Name, Circuit: e})
			}
		}
	}
	return out
}

// readOwnReports adds the lines of the pods that report on their own, but not of a pod
// an agent listed already: a pod reported both ways counts through its node alone
// (docs/design.md §9), and is listed once.
func (r *podsReader) readOwnReports(ctx context.Context, v *BreakerPods) {
	ns, name := v.Metadata.Namespace, v.Metadata.Name
	var reports resiliencev1alpha1.BreakerReportList
	if err := r.c.List(ctx, &reports, client.InNamespace(ns)); err != nil {
		v.Notes = append(v.Notes, fmt.Sprintf("the pods that report on their own are not listed: reading BreakerReports in namespace %s: %v", ns, err))
		return
	}
	listed := map[string]bool{}
	for _, l := range v.Pods {
		listed[l.Pod] = true
	}
	var own []PodLine
	for _, rep := range reports.Items {
		if listed[rep.Name] {
			continue
		}
		for _, e := range rep.Breakers {
			if e.Name != name {
				continue
			}
			line := PodLine{Pod: rep.Name, Via: ViaBreakerReport}
			if err := sameWire(&e, &line.Circuit); err != nil {
				v.Notes = append(v.Notes, fmt.Sprintf("BreakerReport %s: %v", rep.Name, err))
				continue
			}
			for _, ref := range rep.OwnerReferences {
				if ref.Kind == "Pod" {
					line.UID = string(ref.UID)
				}
			}
			own = append(own, line)
		}
	}
	if len(own) == 0 {
		return
	}
	// The node and revision of a pod reporting on its own are on its Pod, as the
	// operator reads them.
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		v.Notes = append(v.Notes, fmt.Sprintf("the nodes and revisions of the pods that report on their own are not shown: listing pods in namespace %s: %v", ns, err))
	} else {
		byName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		for i := range own {
			if p := byName[own[i].Pod]; p != nil && (own[i].UID == "" || own[i].UID == string(p.UID)) {
				own[i].Node, own[i].Revision = p.Spec.NodeName, resiliencev1alpha1.RevisionOf(p.Labels)
			}
		}
	}
	v.Pods = append(v.Pods, own...)
}

// sameWire copies an entry of the API's BreakerReport into the wire's ReportEntry: the
// two spell the same fields (a test of api/v1alpha1 holds them together).
func sameWire(from *resiliencev1alpha1.BreakerReportEntry, to *breakerconfig.ReportEntry) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, to)
}
