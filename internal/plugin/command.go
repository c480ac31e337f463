package plugin

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// scheme knows the kinds the plugin reads: CircuitBreakers and core Events.
var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(resiliencev1alpha1.AddToScheme(scheme))
}

// Options is what every subcommand shares: kubectl's connection flags, the
// streams, -A, the namespace Fusebox runs in, and the clock (tests and the
// commands read time through it).
type Options struct {
	Flags         *genericclioptions.ConfigFlags
	AllNamespaces bool
	// FuseboxNamespace is where the operator and the node agents run.
	FuseboxNamespace string
	genericiooptions.IOStreams
	Now func() time.Time

	// fetchAgent asks one node agent; nil means through the API server's pods/proxy.
	// The tests, whose API server has no kubelet to proxy to, reach the agents directly.
	fetchAgent agentFetcher
}

// NewCommand returns the root command, `kubectl fusebox`, with its subcommands
// and kubectl's connection flags.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newCommand(&Options{
		Flags:     genericclioptions.NewConfigFlags(true),
		IOStreams: streams,
		Now:       time.Now,
	})
}

// newCommand returns the root command with o's streams, clock and agent fetcher.
func newCommand(o *Options) *cobra.Command {
	streams := o.IOStreams
	root := &cobra.Command{
		Use:   "kubectl-fusebox",
		Short: "Show and override Fusebox CircuitBreakers",
		Long: `kubectl fusebox shows CircuitBreakers (status, watch, a live web dashboard)
and holds a circuit open or closed for a bounded time (open, close, release)
through spec.override, which the operator hands back to spec.mode when it ends.
It compares a candidate policy judged in shadow with the enforced one
(candidate), makes it the enforced one (promote), judges a rollout's revision
as the operator's rollout gate does (gate), and lists every pod of a breaker,
reading the node agents' (pods).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fusebox"},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Work on CircuitBreakers of every namespace.")
	root.PersistentFlags().StringVar(&o.FuseboxNamespace, "fusebox-namespace", DefaultFuseboxNamespace, "The namespace the Fusebox operator and node agents run in.")
	root.AddCommand(
		newStatusCommand(o),
		newOverrideCommand(o, resiliencev1alpha1.ModeForcedOpen),
		newOverrideCommand(o, resiliencev1alpha1.ModeForcedClosed),
		newReleaseCommand(o),
		newWatchCommand(o),
		newDashboardCommand(o),
		newCandidateCommand(o),
		newPromoteCommand(o),
		newGateCommand(o),
		newPodsCommand(o),
	)
	return root
}

// client is a direct (uncached) client of the cluster the flags name.
func (o *Options) client() (client.WithWatch, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// namespace is the namespace to work in: "" (every one) with -A, else -n or
// the kubeconfig context's.
func (o *Options) namespace() (string, error) {
	if o.AllNamespaces {
		return "", nil
	}
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("namespace: %w", err)
	}
	return ns, nil
}

// oneNamespace is the namespace of a command that names one breaker, for
// which -A means nothing.
func (o *Options) oneNamespace() (string, error) {
	if o.AllNamespaces {
		return "", fmt.Errorf("-A/--all-namespaces does not go with a breaker's name: name its namespace with -n")
	}
	return o.namespace()
}
