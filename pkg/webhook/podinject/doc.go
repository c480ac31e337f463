// Package podinject is the mutating admission webhook that gives a pod what
// pkg/breaker/kube.FromEnvironment needs, so that using Fusebox from a pod is a
// one-annotation affair. docs/webhooks.md is the user's guide.
//
// A pod created with the annotation fusebox.dev/inject: "true" gets:
//
//   - the volume fusebox-breakers: the namespace's fusebox-breakers ConfigMap,
//     optional, so the pod starts before any CircuitBreaker exists (and the
//     kubelet fills the volume in once one does);
//   - in every container, and in every sidecar init container (restartPolicy
//     Always), that volume mounted read-only at /etc/fusebox and the
//     environment FUSEBOX_CONFIG_DIR=/etc/fusebox, POD_NAME, POD_NAMESPACE and
//     POD_UID (downward API). Plain init containers run to completion before the
//     application starts and are left alone.
//
// A pod wired to its node's agent (docs/design.md §9) reads its config from the agent
// and reports through it: it is annotated fusebox.dev/node-agent: "true", or created in
// a namespace labelled fusebox.dev/node-agent=enabled and not annotated "false". It gets,
// in the same containers, FUSEBOX_NODE_AGENT (the agent Service's cluster IP, read by
// AgentLocator, or its DNS name with a warning when that cannot be read),
// FUSEBOX_NODE_AGENT_TOKEN, POD_NAME, POD_NAMESPACE and POD_UID, and the projected
// service-account token volume fusebox-node-agent-token (audience
// fusebox.dev/node-agent, ten minutes) mounted read-only at /var/run/fusebox/node-agent;
// no ConfigMap volume. The namespace's label reaches the handler through the path: a
// second webhook, selected by the label, is served at NamespaceOptInPath.
//
// A pod created with the annotation fusebox.dev/sidecar: "true" gets the per-pod
// decision sidecar, cmd/fuseboxd (docs/fuseboxd.md), for applications in other
// languages: an init container named fuseboxd with restartPolicy Always (a native
// sidecar, first, so it serves before the application starts) that is wired as above
// (to the ConfigMap, or to the node agent when the pod is wired to it), requests 10m CPU
// and 32Mi memory and meets Pod Security's restricted level; and an emptyDir,
// fusebox-socket, mounted at /var/run/fusebox in it, in every container and in every
// sidecar init container, where the application finds its socket. The application's
// containers are wired too only with fusebox.dev/inject as well. The image is
// Injector.SidecarImage (DefaultSidecarImage when empty), which the manager's
// --fuseboxd-image flag and the chart's fuseboxd.image values set. A pod that has a
// container named fuseboxd that is not a native sidecar is refused, with a message
// naming the fix.
//
// The webhook never replaces what the pod already has: a volume, a mount at
// one of Fusebox's paths or an environment variable of the same name that differs
// from Fusebox's is kept, and the response carries a warning naming it. What is
// already there and the same is not added again, so admitting an injected pod
// again patches nothing. It adds only (a JSON patch of add operations built
// from the request's own object), so fields of the pod this webhook's Go types
// do not know survive untouched.
//
// The webhook is registered for pod creation only: Kubernetes refuses changes
// to a pod's volumes and containers' environment after creation, so there is
// nothing to do on update. Its configuration (config/webhook) fails open
// (failurePolicy: Ignore), so a Fusebox that is down or slow never keeps a workload
// from starting, and skips the system namespaces and the operator's own.
package podinject
