package v1alpha1

// The annotations and labels Fusebox reads or writes, on CircuitBreakers, Pods and
// Namespaces. This file is their one definition; the webhooks, the controller and the
// plugin import them from here. (The wire names between the operator and the pods are
// pkg/breaker/breakerconfig's.)
const (
	// AnnotationOverriddenBy names who set spec.override, as the API server
	// authenticated them. The mutating webhook writes it; a value a client writes
	// is replaced.
	AnnotationOverriddenBy = "fusebox.dev/overridden-by"

	// AnnotationForcedBy names who forced a CircuitBreaker's circuit (mode
	// ForcedOpen or ForcedClosed): a person, a team, a runbook or an automation
	// ("alice@example.com", "incident-bot").
	AnnotationForcedBy = "fusebox.dev/forced-by"
	// AnnotationForcedReason says why, ideally with a link ("INC-1234: payments
	// provider outage"). The validating webhook warns about a forced circuit
	// without both: a circuit held by hand outlives the incident that made
	// someone hold it unless the object says whom to ask.
	AnnotationForcedReason = "fusebox.dev/forced-reason"

	// AnnotationInject on a Pod asks the pod-injection webhook to wire it to
	// its breakers' configuration, when its value is "true".
	AnnotationInject = "fusebox.dev/inject"
	// AnnotationSidecar on a Pod asks the pod-injection webhook for the fuseboxd
	// decision sidecar, when its value is "true".
	AnnotationSidecar = "fusebox.dev/sidecar"
	// AnnotationNodeAgent on a Pod wires it to its node's agent (fuseboxd node)
	// when "true": the pod then reads its config from the agent and reports
	// through it, instead of mounting the ConfigMap and writing its own
	// BreakerReport. "false" keeps a pod of a namespace labelled LabelNodeAgent
	// out.
	AnnotationNodeAgent = "fusebox.dev/node-agent"
	// LabelNodeAgent set to "enabled" on a Namespace wires every pod created in it
	// to its node's agent, as AnnotationNodeAgent does for one pod.
	LabelNodeAgent = "fusebox.dev/node-agent"
	// LabelInjection set to "disabled" on a Namespace keeps the pod-injection
	// webhook out of it.
	//
	// The pod webhooks' matchConditions and namespaceSelectors, kubebuilder
	// markers in pkg/webhook/podinject, spell these names again (a marker cannot
	// name a constant); pkg/webhook's envtest suite, which serves the generated
	// configuration, fails if they part.
	LabelInjection = "fusebox.dev/injection"

	// LabelUnboundReportTokens set to LabelUnboundReportTokensAllowed on a
	// Namespace lets service accounts write its BreakerReports with a token
	// bound to no pod, which the admission policy
	// fusebox-breakerreport-bound-token refuses elsewhere: the opt-out for
	// clusters whose report writers have no pod-bound tokens (docs/rbac.md).
	// config/policy spells both again in the policy's binding, and
	// test/manifests fails if they part.
	LabelUnboundReportTokens        = "fusebox.dev/unbound-report-tokens"
	LabelUnboundReportTokensAllowed = "allowed"
)

// The values of LabelNodeAgent and LabelInjection that mean something; any other
// value means nothing.
const (
	NodeAgentEnabled  = "enabled"
	InjectionDisabled = "disabled"
)

// The labels of the node agents' pods (the DaemonSet fusebox-node, docs/design.md §9) in
// the operator's namespace: the operator counts a node's reports only while a pod so
// labelled, bound to that node, is Ready.
const (
	LabelAppName       = "app.kubernetes.io/name"
	AppName            = "fusebox"
	LabelAppComponent  = "app.kubernetes.io/component"
	ComponentNodeAgent = "node-agent"
)
