package cluster

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
)

// One install, one example application, in the order a user meets them: each spec leaves
// the cluster as the next one expects it (the nodes' network first, then the operator
// installed, scaled, given its node agents, upgraded and uninstalled, a node deleted,
// then deployed the other way, with kustomize, and undeployed). A failed spec does not
// stop the rest, which say what else works.
var _ = Describe("Fusebox on a real node", Ordered, ContinueOnFailure, Label("cluster"), func() {
	BeforeAll(func() {
		connect()
		noteNetworkNamespace()
	})
	// What the node agent's specs made outlives them, for the spec of a deleted node.
	AfterAll(func(ctx SpecContext) {
		deleteSuiteNamespaces(ctx, agentNamespace, restrictedNamespace)
	}, NodeTimeout(time.Minute))

	Describe("two nodes", Ordered, twoNodes, networkSpecs)
	Describe("installed from its chart", installSpecs)
	Describe("the example application", exampleSpecs)
	Describe("the fuseboxd sidecar", sidecarSpecs)
	Describe("one concurrency limit for the pods of two nodes", twoNodes, concurrencySpecs)
	Describe("pod identity and the garbage collector", identitySpecs)
	Describe("config propagation", propagationSpecs)
	Describe(rolloutsContainer, Ordered, rolloutSpecs)
	Describe("leader election", failoverSpecs)
	Describe("the node agent on two nodes", Ordered, twoNodes, nodeAgentSpecs)
	Describe("upgrade and uninstall", upgradeSpecs)
	// After the uninstall, so that only the garbage collector deletes node reports, and
	// before make undeploy, which deletes the CRDs and every report with them. The second
	// node's pods go with it: what follows runs on the first.
	Describe("a node deleted from the API", twoNodes, nodeGoneSpecs)
	Describe("installed with make deploy", deploySpecs)
})
